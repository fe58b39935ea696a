// lookup, forget, getattr, setattr and statfs: what a node is, its
// attributes and its times, and the figures df(1) shows.
#include <sys/statvfs.h>

#include <algorithm>
#include <cerrno>
#include <string>

#include "fs/errors.h"
#include "fs/ops.h"
#include "fs/request.h"

namespace ptstore::fs {

namespace {

// The child `name` of `parent` into *found, and the cache generation read
// before asking into *gen; an errno.
int LookupNode(Filesystem* fs, fuse_ino_t parent, const char* name, Found* found, uint64_t* gen) {
  if (int err = NameTooLong(name)) return err;
  NodeRef dir;
  if (int err = Resolve(fs, parent, &dir)) return err;
  *gen = fs->cache().generation();
  auto got = fs->tree().Lookup(dir, name);
  if (!got.ok()) return ErrnoOf(got.status());
  *found = std::move(*got);
  return 0;
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  Found found;
  uint64_t gen = 0;
  const int err = LookupNode(Fs(req), parent, name, &found, &gen);
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    ReplyEntry(req, parent, name, found, gen);
  }
}

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Fs(req)->inodes().Forget(ino, nlookup);
  fuse_reply_none(req);
}

void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) Fs(req)->inodes().Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

// The attributes of `ino` into *st, and the cache generation read before
// asking into *gen; an errno.
int StatNode(Filesystem* fs, fuse_ino_t ino, struct stat* st, uint64_t* gen) {
  NodeRef ref;
  if (int err = Resolve(fs, ino, &ref)) return err;
  *gen = fs->cache().generation();
  auto got = fs->tree().Stat(ref);
  if (!got.ok()) return ErrnoOf(got.status());
  *st = *got;
  st->st_ino = ino;
  if (IsIncrementFile(ref)) fs->inodes().NoteSize(ino, static_cast<uint64_t>(st->st_size));
  return 0;
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  struct stat st {};
  uint64_t gen = 0;
  const int err = StatNode(Fs(req), ino, &st, &gen);
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    ReplyAttr(req, st, gen);
  }
}

// The times touch(1) sets (FUSE_SET_ATTR_ATIME and _MTIME of `to_set`) in
// the store's nanoseconds, 0 for "leave it"; EINVAL for a time before the
// epoch (the store keeps times after it).
int TimesToSet(const struct stat& attr, int to_set, uint64_t* atime, uint64_t* mtime) {
  auto ns_of = [](const timespec& t) {
    return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
  };
  if (((to_set & FUSE_SET_ATTR_ATIME) && !(to_set & FUSE_SET_ATTR_ATIME_NOW) && attr.st_atim.tv_sec < 0) ||
      ((to_set & FUSE_SET_ATTR_MTIME) && !(to_set & FUSE_SET_ATTR_MTIME_NOW) && attr.st_mtim.tv_sec < 0)) {
    return EINVAL;
  }
  const uint64_t now = WallClockNs();
  *atime = 0;
  *mtime = 0;
  if (to_set & FUSE_SET_ATTR_ATIME) *atime = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? now : ns_of(attr.st_atim);
  if (to_set & FUSE_SET_ATTR_MTIME) *mtime = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? now : ns_of(attr.st_mtim);
  // 0 means "leave it" to the store: a time at the epoch itself is one nanosecond after it.
  if ((to_set & FUSE_SET_ATTR_ATIME) && *atime == 0) *atime = 1;
  if ((to_set & FUSE_SET_ATTR_MTIME) && *mtime == 0) *mtime = 1;
  return 0;
}

// Applies setattr's `to_set` of `attr` to `ino`; its attributes after it
// into *st, and the cache generation read before asking into *gen. An errno.
int SetAttrOf(Filesystem* fs, fuse_ino_t ino, const struct stat& attr, int to_set, struct stat* st, uint64_t* gen) {
  NodeRef ref;
  if (int err = Resolve(fs, ino, &ref)) return err;
  // The bytes never change; a .layout opened with O_TRUNC on a kernel without
  // atomic O_TRUNC is truncated this way before its new layout is written.
  if (to_set == FUSE_SET_ATTR_SIZE && ref.kind == NodeKind::kLayoutFile && attr.st_size == 0) {
    return StatNode(fs, ino, st, gen);
  }
  if (to_set & FUSE_SET_ATTR_SIZE) return EROFS;
  constexpr int kTimes = FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW |
                         FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME;
  if (to_set & ~kTimes) return EPERM;  // mode, owner: the namespace's
  const int times = to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME);
  if (times == 0) return StatNode(fs, ino, st, gen);
  // The root, a namespace and its .layout: their times are their increments'.
  if (ref.kind != NodeKind::kIncrement && !IsIncrementFile(ref)) return EPERM;
  // touch(1): the increment's times (the kernel checked the caller may set them).
  uint64_t atime = 0, mtime = 0;
  if (int err = TimesToSet(attr, to_set, &atime, &mtime)) return err;
  *gen = fs->cache().generation();
  auto got = fs->tree().SetTimes(ref, atime, mtime);
  if (!got.ok()) return ErrnoOf(got.status());
  *st = *got;
  st->st_ino = ino;
  return 0;
}

void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  struct stat st {};
  uint64_t gen = 0;
  const int err = SetAttrOf(Fs(req), ino, *attr, to_set, &st, &gen);
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    ReplyAttr(req, st, gen);
  }
}

// The node's figures at the root; inside a namespace (its directory and
// everything below it: df /mnt/ptstore/NS), the namespace's: its quotas as
// the size (the node's arena or SSD capacity for a tier without one) and
// what counts against them as used, so df's Used is the namespace's use;
// available is what is left of that, but never more than the node has free.
// An errno.
int StatFsOf(Filesystem* fs, fuse_ino_t ino, struct statvfs* st) {
  NodeRef ref;
  if (int err = Resolve(fs, ino, &ref)) return err;
  auto s = fs->client()->Stats();
  if (!s.ok()) return ErrnoOf(s.status());
  constexpr uint64_t kBsize = 4096;
  const uint64_t node_capacity = s->arena_bytes + s->ssd_capacity;
  const uint64_t node_used = s->used_bytes + s->ssd_file_bytes;
  const uint64_t node_free = node_capacity > node_used ? node_capacity - node_used : 0;
  uint64_t capacity = node_capacity, used = node_used, avail = node_free;
  if (ref.kind != NodeKind::kRoot && !ref.ns.empty()) {
    auto q = fs->client()->Quotas(ref.ns);
    if (!q.ok()) return ErrnoOf(q.status());
    const NamespaceQuota& nq = q->front();
    const uint64_t dram = nq.dram_quota != 0 ? nq.dram_quota : s->arena_bytes;
    const uint64_t ssd = nq.ssd_quota != 0 ? nq.ssd_quota : s->ssd_capacity;
    capacity = dram + ssd;
    used = nq.dram_bytes + nq.ssd_bytes;
    avail = std::min(capacity > used ? capacity - used : 0, node_free);
  }
  *st = {};
  st->f_bsize = kBsize;
  st->f_frsize = kBsize;
  st->f_blocks = capacity / kBsize;
  st->f_bfree = capacity > used ? (capacity - used) / kBsize : 0;
  st->f_bavail = avail / kBsize;
  st->f_files = s->prefix_nodes + s->namespaces;
  st->f_ffree = 0;
  st->f_favail = 0;
  st->f_namemax = kMaxNamespaceNameBytes;
  return 0;
}

void StatFs(fuse_req_t req, fuse_ino_t ino) {
  struct statvfs st {};
  const int err = StatFsOf(Fs(req), ino, &st);
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    fuse_reply_statfs(req, &st);
  }
}

}  // namespace

void AddNodeOps(fuse_lowlevel_ops* ops) {
  ops->lookup = Counted<Lookup>::Call;
  ops->forget = Counted<Forget>::Call;
  ops->forget_multi = Counted<ForgetMulti>::Call;
  ops->getattr = Counted<GetAttr>::Call;
  ops->setattr = Counted<SetAttr>::Call;
  ops->statfs = Counted<StatFs>::Call;
}

}  // namespace ptstore::fs

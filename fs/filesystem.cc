#include "fs/filesystem.h"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <atomic>
#include <memory>

#include "fs/errors.h"
#include "fs/ioctl_handler.h"
#include "fs/xattrs.h"

namespace ptstore::fs {

namespace {

// The store drops a pin after its lease time (30 s by default); an open kv
// file takes a fresh one well before that.
constexpr int64_t kRepinAfterNs = 10'000'000'000;

int64_t Now() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// An open kv, tokens or .layout file (fi->fh).
struct OpenFile : OpenHandle {
  NodeRef ref;
  // kv: the increment's bytes, pinned while the file is open.
  core::SharedMutex mu;  // shared to read, exclusive to re-pin
  PinnedPrefix pin GUARDED_BY(mu);
  std::atomic<int64_t> pinned_at{0};  // steady_clock nanoseconds
  // tokens and .layout: the whole contents.
  std::string content;
  // .layout opened for writing: the text written so far.
  std::string written GUARDED_BY(mu);
  // kv: the ioctl leases of this open file (include/ptstore/ioctl.h).
  LeaseSet leases;
};

// An open directory (fi->fh), on a mount without a change watcher (see
// OpenDirOp): a listing taken at its first readdir.
struct OpenDir : OpenHandle {
  NodeRef ref;
  std::shared_ptr<const Listing> listing;  // null until the first readdir
};

Filesystem* Fs(fuse_req_t req) { return static_cast<Filesystem*>(fuse_req_userdata(req)); }
OpenFile* File(fuse_file_info* fi) { return static_cast<OpenFile*>(reinterpret_cast<OpenHandle*>(fi->fh)); }
OpenDir* Dir(fuse_file_info* fi) { return static_cast<OpenDir*>(reinterpret_cast<OpenHandle*>(fi->fh)); }

// What `ino` is, or replies ESTALE and returns false.
bool Resolve(fuse_req_t req, fuse_ino_t ino, NodeRef* ref) {
  auto r = Fs(req)->inodes().Get(ino);
  if (!r) {
    fuse_reply_err(req, ESTALE);
    return false;
  }
  *ref = std::move(*r);
  return true;
}

void ReplyStatus(fuse_req_t req, const Status& s) { fuse_reply_err(req, ErrnoOf(s)); }

bool IsIncrementFile(const NodeRef& ref) { return ref.kind == NodeKind::kKvFile || ref.kind == NodeKind::kTokensFile; }

// `gen`: the cache generation read before the answer was asked for.
void ReplyEntry(fuse_req_t req, fuse_ino_t parent, const char* name, const Found& found, uint64_t gen) {
  Filesystem* fs = Fs(req);
  fuse_entry_param e{};
  e.ino = fs->inodes().Ref(found.ref, parent, name);
  // A new size in this reply makes the kernel drop the pages it cached.
  if (IsIncrementFile(found.ref)) fs->inodes().NoteSize(e.ino, static_cast<uint64_t>(found.st.st_size));
  e.attr = found.st;
  e.attr.st_ino = e.ino;
  auto lock = fs->lock_reply();
  const Filesystem::CacheTimes t = fs->TimesFor(gen);
  e.attr_timeout = t.attr;
  e.entry_timeout = t.entry;
  if (fuse_reply_entry(req, &e) != 0) fs->inodes().Forget(e.ino, 1);  // the kernel did not take it
}

// Pushes invalidations for the children of `dir` that its previous listing
// showed and this one does not (removed by another client, or evicted).
void NoticeVanished(Filesystem* fs, fuse_ino_t dir, const NodeRef& dir_ref, const std::vector<DirEntry>& entries) {
  std::vector<std::string> names;
  names.reserve(entries.size());
  for (const DirEntry& e : entries) names.push_back(e.name);
  for (const std::string& gone : fs->inodes().UpdateChildren(dir, names)) {
    fs->invalidator().Entry(dir, gone);
    // A vanished increment's kv may have cached pages: drop them too.
    ChainKey key;
    if (ParseKeyName(gone, &key)) {
      for (NodeKind k : {NodeKind::kIncrement, NodeKind::kKvFile, NodeKind::kTokensFile}) {
        if (auto ino = fs->inodes().Find(NodeRef{k, dir_ref.ns, key})) fs->invalidator().Inode(*ino);
      }
    }
  }
}

// ------------------------------------------------------------ operations

void Init(void* userdata, fuse_conn_info* conn) {
  // Listings carry every entry's attributes (readdirplus), always: a walk
  // then looks up nothing (with READDIRPLUS_AUTO the kernel would ask for
  // them only at offset 0 and after lookups).
  if (conn->capable & FUSE_CAP_READDIRPLUS) conn->want |= FUSE_CAP_READDIRPLUS;
  conn->want &= ~FUSE_CAP_READDIRPLUS_AUTO;
  // With auto_inval_data the kernel asks again for the attributes of what a
  // walk opens (to compare mtime and size before trusting its cache): about
  // one request per directory of every walk. The mount drops stale pages
  // itself: a kv or tokens file whose size changed (a split) is read past
  // the page cache at its next open, and its pages go (KeepOrDropCache).
  conn->want &= ~FUSE_CAP_AUTO_INVAL_DATA;

  if (conn->capable & FUSE_CAP_IOCTL_DIR) conn->want |= FUSE_CAP_IOCTL_DIR;
  // O_TRUNC arrives in open()'s flags (refused there) rather than as a
  // separate truncate.
  if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC) conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
}

// POSIX's ENAMETOOLONG for a name component longer than any name on the mount (its NAME_MAX, statfs'
// f_namemax); the kernel checks only its own 255.
bool TooLong(fuse_req_t req, const char* name) {
  if (std::strlen(name) <= kMaxNamespaceNameBytes) return false;
  fuse_reply_err(req, ENAMETOOLONG);
  return true;
}

void Lookup(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (TooLong(req, name)) return;
  NodeRef dir;
  if (!Resolve(req, parent, &dir)) return;
  const uint64_t gen = Fs(req)->cache().generation();
  auto found = Fs(req)->tree().Lookup(dir, name);
  if (!found.ok()) return ReplyStatus(req, found.status());
  ReplyEntry(req, parent, name, *found, gen);
}

void Forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup) {
  Fs(req)->inodes().Forget(ino, nlookup);
  fuse_reply_none(req);
}

void ForgetMulti(fuse_req_t req, size_t count, fuse_forget_data* forgets) {
  for (size_t i = 0; i < count; ++i) Fs(req)->inodes().Forget(forgets[i].ino, forgets[i].nlookup);
  fuse_reply_none(req);
}

void GetAttr(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  NodeRef ref;
  if (!Resolve(req, ino, &ref)) return;
  Filesystem* fs = Fs(req);
  const uint64_t gen = fs->cache().generation();
  auto st = fs->tree().Stat(ref);
  if (!st.ok()) return ReplyStatus(req, st.status());
  st->st_ino = ino;
  if (IsIncrementFile(ref)) fs->inodes().NoteSize(ino, static_cast<uint64_t>(st->st_size));
  auto lock = fs->lock_reply();
  fuse_reply_attr(req, &*st, fs->TimesFor(gen).attr);
}

void SetAttr(fuse_req_t req, fuse_ino_t ino, struct stat* attr, int to_set, fuse_file_info* fi) {
  NodeRef ref;
  if (!Resolve(req, ino, &ref)) return;
  // The bytes never change; a .layout opened with O_TRUNC on a kernel without
  // atomic O_TRUNC is truncated this way before its new layout is written.
  if (to_set == FUSE_SET_ATTR_SIZE && ref.kind == NodeKind::kLayoutFile && attr->st_size == 0) {
    return GetAttr(req, ino, fi);
  }
  if (to_set & FUSE_SET_ATTR_SIZE) return (void)fuse_reply_err(req, EROFS);
  constexpr int kTimes = FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW |
                         FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME;
  if (to_set & ~kTimes) return (void)fuse_reply_err(req, EPERM);  // mode, owner: the namespace's
  const int times = to_set & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME);
  if (times == 0) return GetAttr(req, ino, fi);
  // The root, a namespace and its .layout: their times are their increments'.
  if (ref.kind != NodeKind::kIncrement && !IsIncrementFile(ref)) return (void)fuse_reply_err(req, EPERM);
  // touch(1): the increment's times (the kernel checked the caller may set them).
  auto ns_of = [](const timespec& t) {
    return static_cast<uint64_t>(t.tv_sec) * 1000000000ull + static_cast<uint64_t>(t.tv_nsec);
  };
  if (((to_set & FUSE_SET_ATTR_ATIME) && !(to_set & FUSE_SET_ATTR_ATIME_NOW) && attr->st_atim.tv_sec < 0) ||
      ((to_set & FUSE_SET_ATTR_MTIME) && !(to_set & FUSE_SET_ATTR_MTIME_NOW) && attr->st_mtim.tv_sec < 0)) {
    return (void)fuse_reply_err(req, EINVAL);  // the store keeps times after the epoch
  }
  const uint64_t now = WallClockNs();
  uint64_t atime = 0, mtime = 0;
  if (to_set & FUSE_SET_ATTR_ATIME) atime = (to_set & FUSE_SET_ATTR_ATIME_NOW) ? now : ns_of(attr->st_atim);
  if (to_set & FUSE_SET_ATTR_MTIME) mtime = (to_set & FUSE_SET_ATTR_MTIME_NOW) ? now : ns_of(attr->st_mtim);
  // 0 means "leave it" to the store: a time at the epoch itself is one nanosecond after it.
  if ((to_set & FUSE_SET_ATTR_ATIME) && atime == 0) atime = 1;
  if ((to_set & FUSE_SET_ATTR_MTIME) && mtime == 0) mtime = 1;
  const uint64_t gen = Fs(req)->cache().generation();
  auto st = Fs(req)->tree().SetTimes(ref, atime, mtime);
  if (!st.ok()) return ReplyStatus(req, st.status());
  st->st_ino = ino;
  auto lock = Fs(req)->lock_reply();
  fuse_reply_attr(req, &*st, Fs(req)->TimesFor(gen).attr);
}

void MkNod(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, dev_t rdev) {
  fuse_reply_err(req, EROFS);
}

void Create(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode, fuse_file_info* fi) {
  fuse_reply_err(req, EROFS);
}

void MkDir(fuse_req_t req, fuse_ino_t parent, const char* name, mode_t mode) {
  if (TooLong(req, name)) return;
  NodeRef dir;
  if (!Resolve(req, parent, &dir)) return;
  if (dir.kind != NodeKind::kRoot) return (void)fuse_reply_err(req, EPERM);  // increments are made by saves
  auto found = Fs(req)->tree().MakeNamespace(name, mode);
  if (!found.ok()) return ReplyStatus(req, found.status());
  ReplyEntry(req, parent, name, *found, Fs(req)->cache().generation());
}

void Unlink(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (TooLong(req, name)) return;
  NodeRef dir;
  if (!Resolve(req, parent, &dir)) return;
  fuse_reply_err(req, Fs(req)->tree().HideFile(dir, name));
}

void RmDir(fuse_req_t req, fuse_ino_t parent, const char* name) {
  if (TooLong(req, name)) return;
  NodeRef dir;
  if (!Resolve(req, parent, &dir)) return;
  fuse_reply_err(req, Fs(req)->tree().RemoveDir(dir, name));
}

void SymLink(fuse_req_t req, const char* link, fuse_ino_t parent, const char* name) { fuse_reply_err(req, EPERM); }

void Rename(fuse_req_t req, fuse_ino_t parent, const char* name, fuse_ino_t newparent, const char* newname,
            unsigned int flags) {
  fuse_reply_err(req, EPERM);  // a key is a name derived from the tokens: it cannot change
}

void Link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char* newname) { fuse_reply_err(req, EPERM); }

// An increment's kv and tokens never change while its key names the same
// tokens, so the kernel may keep their pages. They do change when a later
// save splits the increment (same key, only its tail): then this open reads
// past the page cache and the kernel's size (direct I/O), and the inode's
// stale pages and attributes are dropped for the opens after it.
void KeepOrDropCache(Filesystem* fs, fuse_ino_t ino, uint64_t size, fuse_file_info* fi) {
  // Changed now, or in an entry or attribute reply since the last open.
  const bool changed = fs->inodes().NoteSize(ino, size);
  if (fs->inodes().TakeSizeChanged(ino) || changed) {
    fi->direct_io = 1;
    fs->invalidator().Inode(ino);
  } else {
    fi->keep_cache = 1;
  }
}

void Open(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  NodeRef ref;
  if (!Resolve(req, ino, &ref)) return;
  // Only a namespace's .layout takes writes (a new layout, see WriteLayout).
  const bool writes = (fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC);
  if (writes && ref.kind != NodeKind::kLayoutFile) return (void)fuse_reply_err(req, EROFS);
  Filesystem* fs = Fs(req);
  auto f = std::make_unique<OpenFile>();
  f->ref = ref;
  switch (ref.kind) {
    case NodeKind::kKvFile: {
      auto pin = fs->client()->PinIncrement(ref.ns, ref.key, false);
      if (!pin.ok()) return ReplyStatus(req, pin.status());
      const uint64_t bytes = pin->bytes();
      {
        core::WriterLock lock(f->mu);  // not shared yet: for the analysis
        f->pin = std::move(*pin);
      }
      f->pinned_at = Now();
      KeepOrDropCache(fs, ino, bytes, fi);
      break;
    }
    case NodeKind::kTokensFile: {
      auto inc = fs->client()->GetIncrement(ref.ns, ref.key);
      if (!inc.ok()) return ReplyStatus(req, inc.status());
      f->content.resize(inc->tokens.size() * 4);
      for (size_t i = 0; i < inc->tokens.size(); ++i) {
        uint32_t t = inc->tokens[i];
        for (int b = 0; b < 4; ++b) f->content[4 * i + b] = static_cast<char>(t >> (8 * b));  // little-endian
      }
      KeepOrDropCache(fs, ino, f->content.size(), fi);
      break;
    }
    case NodeKind::kLayoutFile: {
      auto ns = fs->tree().Namespace(ref.ns);
      if (!ns.ok()) return ReplyStatus(req, ns.status());
      f->content = TreeView::LayoutText(ns->layout);
      fi->direct_io = 1;  // changes with setfattr user.ptstore.layout
      break;
    }
    default:
      return (void)fuse_reply_err(req, EISDIR);
  }
  fi->fh = fs->Keep(std::move(f));
  if (fuse_reply_open(req, fi) != 0) fs->Close(fi->fh);  // the kernel did not take it
}

// Replies with kv bytes straight from the mapped arena (no copy here: the
// kernel copies from the iovecs).
void ReadKv(fuse_req_t req, Filesystem* fs, OpenFile* f, size_t size, off_t off) {
  if (Now() - f->pinned_at > kRepinAfterNs) {
    core::WriterLock lock(f->mu);
    if (Now() - f->pinned_at > kRepinAfterNs) {
      auto pin = fs->client()->PinIncrement(f->ref.ns, f->ref.key, false);
      if (!pin.ok()) return ReplyStatus(req, pin.status());
      // Split since the open (same key, only its tail now): this open's file is gone.
      if (pin->bytes() != f->pin.bytes()) return (void)fuse_reply_err(req, ESTALE);
      f->pin = std::move(*pin);  // the old pin goes after the new one holds
      f->pinned_at = Now();
    }
  }
  core::ReaderLock lock(f->mu);
  std::vector<iovec> iov;
  uint64_t pos = 0;
  uint64_t want_begin = static_cast<uint64_t>(off);
  uint64_t want_end = want_begin + size;
  for (const Extent& e : f->pin.extents()) {
    uint64_t b = std::max(pos, want_begin), end = std::min(pos + e.length, want_end);
    if (b < end) {
      iov.push_back(iovec{const_cast<uint8_t*>(f->pin.data(e)) + (b - pos), end - b});
    }
    pos += e.length;
    if (pos >= want_end) break;
  }
  if (iov.empty()) return (void)fuse_reply_buf(req, nullptr, 0);
  fuse_reply_iov(req, iov.data(), static_cast<int>(iov.size()));
}

void Read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  OpenFile* f = File(fi);
  if (f->ref.kind == NodeKind::kKvFile) return ReadKv(req, Fs(req), f, size, off);
  if (static_cast<uint64_t>(off) >= f->content.size()) return (void)fuse_reply_buf(req, nullptr, 0);
  size_t n = std::min(size, f->content.size() - static_cast<size_t>(off));
  fuse_reply_buf(req, f->content.data() + off, n);
}

// A write to a namespace's .layout gives it the layout written, as setting
// user.ptstore.layout does: the text written so far is parsed and applied at
// each write (a layout is written whole by one write(2), as echo and
// printf do). EINVAL for a text that is not a valid layout (nothing
// changes), EBUSY once something is stored, EPERM as for the xattr.
void WriteLayout(fuse_req_t req, fuse_ino_t ino, Filesystem* fs, OpenFile* f, const char* buf, size_t size,
                 off_t off) {
  constexpr size_t kMaxLayoutText = 64 * 1024;  // 16 groups take well under 1 KiB
  if (off < 0 || static_cast<uint64_t>(off) + size > kMaxLayoutText) return (void)fuse_reply_err(req, EFBIG);
  std::string text;
  {
    core::WriterLock lock(f->mu);
    if (f->written.size() < static_cast<size_t>(off) + size) f->written.resize(static_cast<size_t>(off) + size, ' ');
    std::memcpy(f->written.data() + off, buf, size);
    text = f->written;
  }
  while (!text.empty() && (text.back() == '\n' || text.back() == '\0' || text.back() == ' ')) text.pop_back();
  auto layout = Layout::Parse(text);
  if (!layout.ok()) return (void)fuse_reply_err(req, EINVAL);
  if (int err = fs->tree().SetLayout(f->ref.ns, *layout)) return (void)fuse_reply_err(req, err);
  fs->invalidator().Inode(ino);
  fuse_reply_write(req, size);
}

void Write(fuse_req_t req, fuse_ino_t ino, const char* buf, size_t size, off_t off, fuse_file_info* fi) {
  OpenFile* f = File(fi);
  if (f->ref.kind == NodeKind::kLayoutFile) return WriteLayout(req, ino, Fs(req), f, buf, size, off);
  fuse_reply_err(req, EROFS);
}

void Release(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Fs(req)->Close(fi->fh);  // unpins a kv
  fuse_reply_err(req, 0);
}

// With a change watcher (the default) the mount opens no directory: the
// first opendir is answered ENOSYS, after which the kernel sends none (nor
// a releasedir), keeps every directory's listing in its cache and drops it
// when the watcher invalidates the directory. A walk then costs no opendir
// and releasedir round trip per directory. Without a watcher nothing would
// invalidate a cached listing, so directories are opened (and their
// listings not cached by the kernel).
//
// Opened or not, the listing is taken at the first readdir, not at open: a
// walk opens a directory again each time it goes back up through it (fts
// opens ".."), and the kernel serves those from its cached listing.
void OpenDirOp(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  Filesystem* fs = Fs(req);
  if (fs->watcher() != nullptr) return (void)fuse_reply_err(req, ENOSYS);
  NodeRef ref;
  if (!Resolve(req, ino, &ref)) return;
  // ENOENT here for a directory that is gone (from the cache when it knows).
  Status there = Status::OK();
  if (ref.kind == NodeKind::kNamespace) there = fs->tree().Namespace(ref.ns).status();
  if (ref.kind == NodeKind::kIncrement) there = fs->tree().Node(ref.ns, ref.key).status();
  if (!there.ok()) return ReplyStatus(req, there);
  auto d = std::make_unique<OpenDir>();
  d->ref = ref;
  fi->fh = fs->Keep(std::move(d));
  if (fuse_reply_open(req, fi) != 0) fs->Close(fi->fh);  // the kernel did not take it
}

// The listing a readdir at `off` reads from: the open directory's, or (no
// handle: see OpenDirOp) the one the same reader took at offset 0 of this
// stream. A new one from offset 0, and whenever none is kept.
Result<std::shared_ptr<const Listing>> ListingFor(fuse_req_t req, Filesystem* fs, fuse_ino_t ino, off_t off,
                                                  fuse_file_info* fi) {
  OpenDir* d = fi->fh != 0 ? Dir(fi) : nullptr;
  const uint64_t reader = static_cast<uint64_t>(fuse_req_ctx(req)->pid);
  const uint64_t now = static_cast<uint64_t>(Now());
  if (off != 0) {
    std::shared_ptr<const Listing> kept = d != nullptr ? d->listing : fs->listings().Get(ino, reader, now);
    if (kept) return kept;
  }
  NodeRef ref;
  if (d != nullptr) {
    ref = d->ref;
  } else {
    auto r = fs->inodes().Get(ino);
    if (!r) return NotFound("inode " + std::to_string(ino) + " is no longer known");
    ref = std::move(*r);
  }
  auto listing = std::make_shared<Listing>();
  listing->gen = fs->cache().generation();
  listing->taken_ns = now;
  auto entries = fs->tree().List(ref);
  if (!entries.ok()) return entries.status();
  NoticeVanished(fs, ino, ref, *entries);
  listing->entries = std::move(*entries);
  if (d != nullptr) {
    d->listing = listing;
  } else {
    fs->listings().Put(ino, reader, listing);
  }
  return std::shared_ptr<const Listing>(std::move(listing));
}

// readdir and readdirplus. Offsets: 0 ".", 1 "..", 2.. the listing; an
// entry's offset is the next one's. readdirplus hands every entry but "."
// and ".." to the kernel (one lookup each), with its attributes.
void ReadDirAny(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi, bool plus) {
  Filesystem* fs = Fs(req);
  if (fi->fh == 0 && !fs->inodes().Get(ino)) return (void)fuse_reply_err(req, ESTALE);
  auto got = ListingFor(req, fs, ino, off, fi);
  if (!got.ok()) return ReplyStatus(req, got.status());
  const Listing& listing = **got;
  // Not zero-filled: the kernel asks for as much as the caller's getdents
  // buffer, and only `used` bytes go back.
  std::unique_ptr<char[]> buf(new char[size]);
  size_t used = 0;
  const size_t total = listing.entries.size() + 2;
  auto lock = fs->lock_reply();
  const Filesystem::CacheTimes times = fs->TimesFor(listing.gen);
  for (size_t i = static_cast<size_t>(off); i < total; ++i) {
    fuse_entry_param e{};
    std::string name;
    const DirEntry* entry = nullptr;
    if (i == 0) {
      name = ".";
      e.attr.st_ino = ino;
      e.attr.st_mode = S_IFDIR;
    } else if (i == 1) {
      name = "..";
      e.attr.st_ino = FUSE_ROOT_ID;  // the kernel fills in the real parent
      e.attr.st_mode = S_IFDIR;
    } else {
      entry = &listing.entries[i - 2];
      name = entry->name;
      e.attr = entry->st;
      e.attr.st_ino = fs->inodes().Peek(entry->ref);
    }
    char* at = buf.get() + used;
    const size_t room = size - used;
    size_t n;
    if (!plus) {
      n = fuse_add_direntry(req, at, room, name.c_str(), &e.attr, static_cast<off_t>(i + 1));
    } else {
      if (entry != nullptr) {
        e.ino = fs->inodes().Ref(entry->ref, ino, entry->name);
        e.attr.st_ino = e.ino;
        e.entry_timeout = times.entry;
        e.attr_timeout = times.attr;
      }
      n = fuse_add_direntry_plus(req, at, room, name.c_str(), &e, static_cast<off_t>(i + 1));
      if (n > room) {
        if (entry != nullptr) fs->inodes().Forget(e.ino, 1);  // not handed out
      } else if (entry != nullptr && IsIncrementFile(entry->ref)) {
        fs->inodes().NoteSize(e.ino, static_cast<uint64_t>(entry->st.st_size));
      }
    }
    if (n > room) break;
    used += n;
  }
  fuse_reply_buf(req, buf.get(), used);
  // A change was applied since the listing was taken: what the kernel
  // caches of it goes again (queued after the reply, so it lands after it).
  if (!times.fresh && fs->watcher() != nullptr) fs->invalidator().Inode(ino);
}

void ReadDir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  ReadDirAny(req, ino, size, off, fi, false);
}

void ReadDirPlus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi) {
  ReadDirAny(req, ino, size, off, fi, true);
}

void ReleaseDir(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  if (fi->fh != 0) Fs(req)->Close(fi->fh);
  fuse_reply_err(req, 0);
}

// The node's figures at the root; inside a namespace (its directory and
// everything below it: df /mnt/ptstore/NS), the namespace's: its quotas as
// the size (the node's arena or SSD capacity for a tier without one) and
// what counts against them as used, so df's Used is the namespace's use;
// available is what is left of that, but never more than the node has free.
void StatFs(fuse_req_t req, fuse_ino_t ino) {
  NodeRef ref;
  if (!Resolve(req, ino, &ref)) return;
  Filesystem* fs = Fs(req);
  auto s = fs->client()->Stats();
  if (!s.ok()) return ReplyStatus(req, s.status());
  constexpr uint64_t kBsize = 4096;
  const uint64_t node_capacity = s->arena_bytes + s->ssd_capacity;
  const uint64_t node_used = s->used_bytes + s->ssd_file_bytes;
  const uint64_t node_free = node_capacity > node_used ? node_capacity - node_used : 0;
  uint64_t capacity = node_capacity, used = node_used, avail = node_free;
  if (ref.kind != NodeKind::kRoot && !ref.ns.empty()) {
    auto q = fs->client()->Quotas(ref.ns);
    if (!q.ok()) return ReplyStatus(req, q.status());
    const NamespaceQuota& nq = q->front();
    const uint64_t dram = nq.dram_quota != 0 ? nq.dram_quota : s->arena_bytes;
    const uint64_t ssd = nq.ssd_quota != 0 ? nq.ssd_quota : s->ssd_capacity;
    capacity = dram + ssd;
    used = nq.dram_bytes + nq.ssd_bytes;
    avail = std::min(capacity > used ? capacity - used : 0, node_free);
  }
  struct statvfs st {};
  st.f_bsize = kBsize;
  st.f_frsize = kBsize;
  st.f_blocks = capacity / kBsize;
  st.f_bfree = capacity > used ? (capacity - used) / kBsize : 0;
  st.f_bavail = avail / kBsize;
  st.f_files = s->prefix_nodes + s->namespaces;
  st.f_ffree = 0;
  st.f_favail = 0;
  st.f_namemax = kMaxNamespaceNameBytes;
  fuse_reply_statfs(req, &st);
}

// The attributes of `ref`, or an errno. `locate`: ask the cluster where the
// increment is (for user.ptstore.replicas; one request to every node).
int XattrsOf(Filesystem* fs, const NodeRef& ref, std::vector<std::pair<std::string, std::string>>* attrs,
             bool locate = false) {
  attrs->clear();
  if (ref.kind == NodeKind::kNamespace) {
    auto ns = fs->tree().Namespace(ref.ns);
    if (!ns.ok()) return ErrnoOf(ns.status());
    auto quota = fs->client()->Quotas(ref.ns);
    if (!quota.ok()) return ErrnoOf(quota.status());
    *attrs = NamespaceXattrs(*ns, &quota->front());
  } else if (ref.kind == NodeKind::kIncrement || ref.kind == NodeKind::kKvFile) {
    auto inc = fs->tree().Increment(ref.ns, ref.key);
    if (!inc.ok()) return ErrnoOf(inc.status());
    std::optional<IncrementLocation> where;
    if (locate) {
      auto w = fs->client()->Locate(ref.ns, {ref.key});
      if (!w.ok()) return ErrnoOf(w.status());
      if (w->size() == 1) where = std::move(w->front());
    }
    *attrs = IncrementXattrs(inc->node, where ? &*where : nullptr);
  } else if (ref.kind == NodeKind::kRoot) {
    // The mount itself: how busy the daemon is (tools and bench_fs).
    attrs->push_back({"user.ptstore.fuse_requests", std::to_string(fs->requests())});
    attrs->push_back({"user.ptstore.socket", fs->options().socket_path});
    // The change watcher (fs/watcher.h): polls made, changes applied, full
    // invalidations; and what the daemon's cache holds.
    if (const ChangeWatcher* w = fs->watcher()) {
      attrs->push_back({"user.ptstore.change_polls", std::to_string(w->polls())});
      attrs->push_back({"user.ptstore.changes", std::to_string(w->changes())});
      attrs->push_back({"user.ptstore.change_resets", std::to_string(w->resets())});
    }
    attrs->push_back({"user.ptstore.cached_increments", std::to_string(fs->cache().increments())});
  }
  return 0;
}

void GetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, size_t size) {
  NodeRef ref;
  if (!Resolve(req, ino, &ref)) return;
  std::vector<std::pair<std::string, std::string>> attrs;
  const bool replicas = std::string(name) == std::string(kXattrPrefix) + "replicas";
  if (int err = XattrsOf(Fs(req), ref, &attrs, replicas)) return (void)fuse_reply_err(req, err);
  auto v = FindXattr(attrs, name);
  if (!v) return (void)fuse_reply_err(req, ENODATA);
  if (size == 0) return (void)fuse_reply_xattr(req, v->size());
  if (size < v->size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, v->data(), v->size());
}

void ListXattr(fuse_req_t req, fuse_ino_t ino, size_t size) {
  NodeRef ref;
  if (!Resolve(req, ino, &ref)) return;
  std::vector<std::pair<std::string, std::string>> attrs;
  if (int err = XattrsOf(Fs(req), ref, &attrs)) return (void)fuse_reply_err(req, err);
  std::string list = XattrList(attrs);
  if (size == 0) return (void)fuse_reply_xattr(req, list.size());
  if (size < list.size()) return (void)fuse_reply_err(req, ERANGE);
  fuse_reply_buf(req, list.data(), list.size());
}

// Sets a namespace's quota for the caller: the mount's own connection may
// do anything, so the rule of the server (the namespace's owner or root) is
// applied here to the credentials of the process that asked. An errno.
int SetQuotaAs(fuse_req_t req, Filesystem* fs, const std::string& ns_name, QuotaTier tier, uint64_t bytes) {
  auto ns = fs->client()->GetNamespace(ns_name);
  if (!ns.ok()) return ErrnoOf(ns.status());
  const fuse_ctx* ctx = fuse_req_ctx(req);
  if (ctx->uid != 0 && ctx->uid != ns->uid) return EPERM;
  QuotaChange change;
  (tier == QuotaTier::kDram ? change.dram : change.ssd) = bytes;
  auto q = fs->client()->SetQuota(ns_name, change);
  return q.ok() ? 0 : ErrnoOf(q.status());
}

void SetXattr(fuse_req_t req, fuse_ino_t ino, const char* name, const char* value, size_t size, int flags) {
  NodeRef ref;
  if (!Resolve(req, ino, &ref)) return;
  Filesystem* fs = Fs(req);
  const std::string n = name;
  if (ref.kind == NodeKind::kNamespace && n == kLayoutXattr) {
    std::string text(value, size);
    while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
    auto layout = Layout::Parse(text);
    if (!layout.ok()) return (void)fuse_reply_err(req, EINVAL);
    int err = fs->tree().SetLayout(ref.ns, *layout);
    if (err == 0) {
      if (auto lino = fs->inodes().Find(NodeRef{NodeKind::kLayoutFile, ref.ns, {}})) fs->invalidator().Inode(*lino);
    }
    return (void)fuse_reply_err(req, err);
  }
  if (ref.kind == NodeKind::kNamespace) {
    if (std::optional<QuotaTier> tier = QuotaXattrTier(n)) {
      std::string text(value, size);
      while (!text.empty() && (text.back() == '\n' || text.back() == '\0')) text.pop_back();
      auto bytes = ParseQuotaBytes(text);
      if (!bytes.ok()) return (void)fuse_reply_err(req, EINVAL);
      return (void)fuse_reply_err(req, SetQuotaAs(req, fs, ref.ns, *tier, *bytes));
    }
  }
  // Our own attributes are facts of the store; other names have nowhere to go.
  fuse_reply_err(req, n.rfind(kXattrPrefix, 0) == 0 ? EPERM : ENOTSUP);
}

void RemoveXattr(fuse_req_t req, fuse_ino_t ino, const char* name) {
  const std::string n = name;
  if (std::optional<QuotaTier> tier = QuotaXattrTier(n)) {
    NodeRef ref;
    if (!Resolve(req, ino, &ref)) return;
    // No quota is a quota of 0.
    if (ref.kind == NodeKind::kNamespace) return (void)fuse_reply_err(req, SetQuotaAs(req, Fs(req), ref.ns, *tier, 0));
  }
  fuse_reply_err(req, n.rfind(kXattrPrefix, 0) == 0 ? EPERM : ENOTSUP);
}

void Ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void* arg, fuse_file_info* fi, unsigned flags,
           const void* in_buf, size_t in_bufsz, size_t out_bufsz) {
  if (flags & FUSE_IOCTL_COMPAT) return (void)fuse_reply_err(req, ENOSYS);  // 32-bit callers: not supported
  // A directory (with or without a handle: see OpenDirOp) answers INFO; an
  // open kv file holds the leases of PIN and UNPIN.
  NodeRef node;
  LeaseSet* leases = nullptr;
  if (flags & FUSE_IOCTL_DIR) {
    if (!Resolve(req, ino, &node)) return;
  } else {
    OpenFile* f = File(fi);
    if (f->ref.kind != NodeKind::kKvFile) return (void)fuse_reply_err(req, ENOTTY);
    node = f->ref;
    leases = &f->leases;
  }
  const fuse_ctx* ctx = fuse_req_ctx(req);
  local::Credentials who;
  who.pid = ctx->pid;
  who.uid = ctx->uid;
  who.gid = ctx->gid;
  std::vector<gid_t> groups(64);
  int ng = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
  if (ng > static_cast<int>(groups.size())) {
    groups.resize(ng);
    ng = fuse_req_getgroups(req, static_cast<int>(groups.size()), groups.data());
  }
  if (ng > 0) who.groups.assign(groups.begin(), groups.begin() + std::min<int>(ng, static_cast<int>(groups.size())));
  std::vector<uint8_t> out;
  int err = HandleIoctl(Fs(req)->tree(), node, leases, who, cmd, in_buf, in_bufsz, &out);
  if (err != 0) return (void)fuse_reply_err(req, err);
  if (out.size() > out_bufsz) out.resize(out_bufsz);
  fuse_reply_ioctl(req, 0, out.empty() ? nullptr : out.data(), out.size());
}

// Every request handler, counted (user.ptstore.fuse_requests on the root).
template <auto F>
struct Counted;
template <typename... A, void (*F)(fuse_req_t, A...)>
struct Counted<F> {
  static void Call(fuse_req_t req, A... a) {
    Fs(req)->CountRequest();
    F(req, a...);
  }
};

fuse_lowlevel_ops MakeOps() {
  fuse_lowlevel_ops ops{};
  ops.init = Init;
  ops.lookup = Counted<Lookup>::Call;
  ops.forget = Counted<Forget>::Call;
  ops.forget_multi = Counted<ForgetMulti>::Call;
  ops.getattr = Counted<GetAttr>::Call;
  ops.setattr = Counted<SetAttr>::Call;
  ops.mknod = Counted<MkNod>::Call;
  ops.mkdir = Counted<MkDir>::Call;
  ops.unlink = Counted<Unlink>::Call;
  ops.rmdir = Counted<RmDir>::Call;
  ops.symlink = Counted<SymLink>::Call;
  ops.rename = Counted<Rename>::Call;
  ops.link = Counted<Link>::Call;
  ops.open = Counted<Open>::Call;
  ops.read = Counted<Read>::Call;
  ops.write = Counted<Write>::Call;
  ops.release = Counted<Release>::Call;
  ops.opendir = Counted<OpenDirOp>::Call;
  ops.readdir = Counted<ReadDir>::Call;
  ops.readdirplus = Counted<ReadDirPlus>::Call;
  ops.releasedir = Counted<ReleaseDir>::Call;
  ops.statfs = Counted<StatFs>::Call;
  ops.setxattr = Counted<SetXattr>::Call;
  ops.getxattr = Counted<GetXattr>::Call;
  ops.listxattr = Counted<ListXattr>::Call;
  ops.removexattr = Counted<RemoveXattr>::Call;
  ops.create = Counted<Create>::Call;
  ops.ioctl = Counted<Ioctl>::Call;
  return ops;
}

TreeOptions TreeOptionsFor(const MountOptions& o) {
  TreeOptions t;
  t.default_layout = o.layout;
  t.root_uid = geteuid();
  t.root_gid = getegid();
  t.prefetch_limit = o.prefetch_limit;
  return t;
}

}  // namespace

Filesystem::Filesystem(const MountOptions& options) : options_(options) {}

Filesystem::~Filesystem() { Stop(); }

const fuse_lowlevel_ops& Filesystem::Ops() {
  static const fuse_lowlevel_ops ops = MakeOps();
  return ops;
}

Result<std::unique_ptr<Client>> Filesystem::Connect(const MountOptions& options) {
  ClientOptions o;
  o.socket_path = options.socket_path;
  o.client_name = "ptstore-fuse";
  o.max_connections = 8;  // one per busy FUSE worker
  PTS_ASSIGN_OR_RETURN(std::unique_ptr<Client> c, Client::Connect(o));
  if (!c->mapped()) {
    return PermissionDenied("ptstored at " + options.socket_path +
                            " does not share its arena with this process: run ptstore-fuse as root or as a member "
                            "of the store's group");
  }
  return c;
}

Status Filesystem::Start(fuse_session* se) {
  PTS_ASSIGN_OR_RETURN(client_, Connect(options_));
  tree_ = std::make_unique<TreeView>(client_.get(), &cache_, TreeOptionsFor(options_));
  invalidator_.Start(se);
  if (options_.change_poll_ms > 0) {
    watcher_ = std::make_unique<ChangeWatcher>(client_.get(), std::chrono::milliseconds(options_.change_poll_ms),
                                               &cache_, &inodes_, &invalidator_, &reply_mu_);
    watcher_->Start();
  }
  return Status::OK();
}

Filesystem::CacheTimes Filesystem::TimesFor(uint64_t gen) const {
  CacheTimes t;
  if (watcher_ == nullptr) {
    // No watcher: the timeouts alone bound staleness (the user's choice).
    t.entry = options_.entry_timeout;
    t.attr = options_.attr_timeout;
    return t;
  }
  if (!watcher_->healthy()) {
    // Polls fail: nobody would invalidate. Short times until they work.
    t.entry = std::min(options_.entry_timeout, 1.0);
    t.attr = std::min(options_.attr_timeout, 1.0);
    return t;
  }
  if (cache_.generation() != gen) return t;  // a change may postdate the answer: keep nothing
  t.entry = options_.entry_timeout;
  t.attr = options_.attr_timeout;
  t.fresh = true;
  return t;
}

void Filesystem::Stop() {
  if (watcher_) watcher_->Stop();
  invalidator_.Stop();
  std::unordered_map<uint64_t, std::unique_ptr<OpenHandle>> left;
  {
    core::MutexLock lock(open_mu_);
    left.swap(open_);
  }
  left.clear();  // outside the lock: unpinning talks to ptstored
}

uint64_t Filesystem::Keep(std::unique_ptr<OpenHandle> handle) {
  const uint64_t fh = reinterpret_cast<uint64_t>(handle.get());
  core::MutexLock lock(open_mu_);
  open_.emplace(fh, std::move(handle));
  return fh;
}

void Filesystem::Close(uint64_t fh) {
  std::unique_ptr<OpenHandle> handle;
  {
    core::MutexLock lock(open_mu_);
    auto it = open_.find(fh);
    if (it == open_.end()) return;
    handle = std::move(it->second);
    open_.erase(it);
  }
}  // deleted here, outside the lock: unpinning talks to ptstored

}  // namespace ptstore::fs

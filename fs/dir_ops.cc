// The directories of a mount: opendir (ENOSYS with a change watcher),
// readdir and readdirplus from one listing per reader, releasedir.
//
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
#include <cerrno>
#include <memory>
#include <string>
#include <vector>

#include "fs/errors.h"
#include "fs/listing_cache.h"
#include "fs/ops.h"
#include "fs/request.h"

namespace ptstore::fs {

namespace {

// An open directory (fi->fh), on a mount without a change watcher: a
// listing taken at its first readdir.
struct OpenDir : OpenHandle {
  NodeRef ref;
  std::shared_ptr<const Listing> listing;  // null until the first readdir
};

OpenDir* Dir(fuse_file_info* fi) { return static_cast<OpenDir*>(reinterpret_cast<OpenHandle*>(fi->fh)); }

// Opens the directory `ino` into *out; an errno: ENOSYS on a mount with a
// change watcher, ENOENT for a directory that is gone (from the cache when
// it knows).
int OpenDirOf(Filesystem* fs, fuse_ino_t ino, std::unique_ptr<OpenDir>* out) {
  if (fs->watcher() != nullptr) return ENOSYS;
  NodeRef ref;
  if (int err = Resolve(fs, ino, &ref)) return err;
  Status there = Status::OK();
  if (ref.kind == NodeKind::kNamespace) there = fs->tree().Namespace(ref.ns).status();
  if (ref.kind == NodeKind::kIncrement) there = fs->tree().Node(ref.ns, ref.key).status();
  if (!there.ok()) return ErrnoOf(there);
  auto d = std::make_unique<OpenDir>();
  d->ref = ref;
  *out = std::move(d);
  return 0;
}

void OpenDirOp(fuse_req_t req, fuse_ino_t ino, fuse_file_info* fi) {
  std::unique_ptr<OpenDir> d;
  const int err = OpenDirOf(Fs(req), ino, &d);
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    ReplyOpen(req, std::move(d), fi);
  }
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

// The listing a readdir at `off` reads from: the open directory's, or (no
// handle) the one the same reader took at offset 0 of this stream. A new
// one from offset 0, and whenever none is kept.
Result<std::shared_ptr<const Listing>> ListingFor(fuse_req_t req, Filesystem* fs, fuse_ino_t ino, off_t off,
                                                  fuse_file_info* fi) {
  OpenDir* d = fi->fh != 0 ? Dir(fi) : nullptr;
  const uint64_t reader = static_cast<uint64_t>(fuse_req_ctx(req)->pid);
  const uint64_t now = static_cast<uint64_t>(SteadyNowNs());
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

// The listing of `ino` to read at `off` into *out; an errno (ESTALE for an
// inode the mount forgot, with no handle).
int ListingAt(fuse_req_t req, Filesystem* fs, fuse_ino_t ino, off_t off, fuse_file_info* fi,
              std::shared_ptr<const Listing>* out) {
  if (fi->fh == 0 && !fs->inodes().Get(ino)) return ESTALE;
  auto got = ListingFor(req, fs, ino, off, fi);
  if (!got.ok()) return ErrnoOf(got.status());
  *out = std::move(*got);
  return 0;
}

// Fills buf (size bytes) with the entries of `listing` from `off` on, as
// many as fit; returns the bytes used. Offsets: 0 ".", 1 "..", 2.. the
// listing; an entry's offset is the next one's. `plus` (readdirplus) hands
// every entry but "." and ".." to the kernel (one lookup each), with its
// attributes kept for `times`.
size_t FillListing(fuse_req_t req, Filesystem* fs, fuse_ino_t ino, const Listing& listing, off_t off, bool plus,
                   const Filesystem::CacheTimes& times, char* buf, size_t size) {
  size_t used = 0;
  const size_t total = listing.entries.size() + 2;
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
    char* at = buf + used;
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
  return used;
}

// Replies with what of `listing` from `off` fits in `size` bytes.
void ReplyListing(fuse_req_t req, fuse_ino_t ino, const Listing& listing, size_t size, off_t off, bool plus) {
  Filesystem* fs = Fs(req);
  // Not zero-filled: the kernel asks for as much as the caller's getdents
  // buffer, and only `used` bytes go back.
  std::unique_ptr<char[]> buf(new char[size]);
  core::ReaderLock lock(fs->reply_mu());
  const Filesystem::CacheTimes times = fs->TimesFor(listing.gen);
  const size_t used = FillListing(req, fs, ino, listing, off, plus, times, buf.get(), size);
  fuse_reply_buf(req, buf.get(), used);
  // A change was applied since the listing was taken: what the kernel
  // caches of it goes again (queued after the reply, so it lands after it).
  if (!times.fresh && fs->watcher() != nullptr) fs->invalidator().Inode(ino);
}

// readdir and readdirplus (`plus`).
void ReadDirAny(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, fuse_file_info* fi, bool plus) {
  std::shared_ptr<const Listing> listing;
  const int err = ListingAt(req, Fs(req), ino, off, fi, &listing);
  if (err != 0) {
    fuse_reply_err(req, err);
  } else {
    ReplyListing(req, ino, *listing, size, off, plus);
  }
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

}  // namespace

void AddDirOps(fuse_lowlevel_ops* ops) {
  ops->opendir = Counted<OpenDirOp>::Call;
  ops->readdir = Counted<ReadDir>::Call;
  ops->readdirplus = Counted<ReadDirPlus>::Call;
  ops->releasedir = Counted<ReleaseDir>::Call;
}

}  // namespace ptstore::fs

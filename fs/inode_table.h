// The inode numbers of a mount and the kernel's lookup counts.
//
// An inode number is derived from what the inode is (NodeRefHash), so the
// same increment keeps its number across lookups and forgets and readdir can
// report the d_ino that stat will show; a hash collision (two refs, one
// number) moves the newcomer to the next free number. An entry lives while
// the kernel holds lookups on it (Ref ... Forget); the root lives forever.
//
// The table also remembers, per directory inode, the names its last listing
// showed, so that the filesystem notices children that vanished (removed
// by another client or evicted) and can push invalidations.
//
// Thread safety: all methods may be called from any thread (one mutex).
#pragma once

#include <fuse_lowlevel.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "fs/node.h"

namespace ptstore::fs {

class InodeTable {
 public:
  InodeTable();

  // The inode of `ref` with one more kernel lookup (every successful
  // lookup/mkdir reply, and every readdirplus entry, that hands an inode to
  // the kernel calls this once). `parent` and `name`: the directory entry
  // it was handed out under (remembered for InvalidateAll).
  fuse_ino_t Ref(const NodeRef& ref, fuse_ino_t parent = 0, const std::string& name = {}) EXCLUDES(mu_);
  // The inode number `ref` has or would have, without a lookup (d_ino).
  fuse_ino_t Peek(const NodeRef& ref) const EXCLUDES(mu_);
  // The inode number of `ref` if the kernel holds it.
  std::optional<fuse_ino_t> Find(const NodeRef& ref) const EXCLUDES(mu_);
  // What `ino` is; nullopt for a number the kernel does not hold.
  std::optional<NodeRef> Get(fuse_ino_t ino) const EXCLUDES(mu_);
  // Drops `nlookup` kernel lookups; the entry goes at zero.
  void Forget(fuse_ino_t ino, uint64_t nlookup) EXCLUDES(mu_);

  // Records the names a listing of directory `dir` showed and returns those
  // the previous listing showed that are gone now.
  std::vector<std::string> UpdateChildren(fuse_ino_t dir, const std::vector<std::string>& names) EXCLUDES(mu_);

  // Records the size of file `ino` that the kernel now knows (an entry or
  // attribute reply, or the contents an open serves) and returns true when
  // it knew another one before: the file's contents changed under the same
  // inode (an increment split by a later save keeps its key but holds only
  // its tail), so the kernel's cached pages and size are stale.
  bool NoteSize(fuse_ino_t ino, uint64_t size) EXCLUDES(mu_);
  // Whether a NoteSize saw a change since the last call (then the next
  // open must not trust the cached pages); clears it.
  bool TakeSizeChanged(fuse_ino_t ino) EXCLUDES(mu_);

  size_t size() const EXCLUDES(mu_);

  // Every inode the kernel holds (not the root), with the entry it was last
  // handed out under.
  struct Known {
    fuse_ino_t ino = 0;
    fuse_ino_t parent = 0;
    std::string name;
  };
  std::vector<Known> All() const EXCLUDES(mu_);

 private:
  struct Entry {
    NodeRef ref;
    uint64_t nlookup = 0;
    std::vector<std::string> children;  // sorted; last listing (directories)
    std::optional<uint64_t> size;        // files: the size the kernel knows
    bool size_changed = false;           // since the last TakeSizeChanged
    fuse_ino_t parent = 0;               // the entry it was last handed out under
    std::string name;
  };
  static fuse_ino_t HashIno(const NodeRef& ref);

  mutable core::Mutex mu_;
  std::unordered_map<fuse_ino_t, Entry> inodes_ GUARDED_BY(mu_);
  std::unordered_map<NodeRef, fuse_ino_t, NodeRefHash> by_ref_ GUARDED_BY(mu_);
};

}  // namespace ptstore::fs

// The FUSE low-level filesystem of a PTStore mount: the operation table
// and the state it works on (inode table, tree view, open handles,
// invalidation thread). ptstore-fuse (main.cc) creates one per mount.
// The handlers live by concept in fs/*_ops.cc (fs/ops.h); each computes
// its result first and replies once, at its end (fs/request.h).
//
// Errnos (ptstore(7), "ERRORS"): writing data is EROFS (open for write,
// O_TRUNC, truncate, create, mknod, write); changing structure the store
// has no operation for is EPERM (mkdir below the root, rename, link,
// symlink, chmod, chown, utimes); the store's own errors go through
// ErrnoOf (errors.h).
//
// Thread safety: the operations run on libfuse's worker threads
// (fuse_session_loop_mt); everything here is safe for that.
#pragma once

#include <atomic>

#include <fuse_lowlevel.h>

#include <memory>
#include <unordered_map>

#include "core/mutex.h"
#include "fs/inode_table.h"
#include "fs/invalidator.h"
#include "fs/listing_cache.h"
#include "fs/meta_cache.h"
#include "fs/options.h"
#include "fs/tree.h"
#include "fs/watcher.h"
#include "ptstore/client.h"

namespace ptstore::fs {

// An open file or directory of the mount (its address is fi->fh), owned by
// the Filesystem from open to release. A lazy unmount can end the session
// before the kernel sends every release: what is still open then goes at
// Stop() (its pins and leases with it).
struct OpenHandle {
  virtual ~OpenHandle() = default;
};

class Filesystem {
 public:
  explicit Filesystem(const MountOptions& options);
  ~Filesystem();  // Stop()

  // The operation table; fuse_req_userdata(req) must be this Filesystem.
  static const fuse_lowlevel_ops& Ops();

  // Connects to ptstored and starts the invalidation thread for session
  // `se`, and the change watcher (fs/watcher.h) unless change_poll_ms is 0. Call it after fuse_daemonize (threads do not survive the fork)
  // and before the session loop. PermissionDenied when ptstored does not
  // share its arena with this process (kv reads and pins come from it).
  Status Start(fuse_session* se);
  // Stops the invalidation thread (before the session is destroyed) and
  // closes what is still open (after the session loop ended).
  void Stop() EXCLUDES(open_mu_);

  // Keeps an open handle until Close(fh) or Stop(); returns its fh.
  uint64_t Keep(std::unique_ptr<OpenHandle> handle) EXCLUDES(open_mu_);
  void Close(uint64_t fh) EXCLUDES(open_mu_);

  // REQUIRES: Start() succeeded (true in every operation).
  InodeTable& inodes() { return inodes_; }
  TreeView& tree() { return *tree_; }
  Invalidator& invalidator() { return invalidator_; }
  MetaCache& cache() { return cache_; }
  ListingCache& listings() { return listings_; }
  const ChangeWatcher* watcher() const { return watcher_.get(); }

  // How long the kernel may keep an entry and attributes built from what
  // the store said at cache generation `gen` (read before asking), while
  // the caller holds reply_mu() shared: the mount's timeouts while the watcher
  // keeps the kernel's cache exact; 0 when a change was applied since
  // `gen` (the answer may predate it); at most 1 s while polls fail.
  struct CacheTimes {
    double entry = 0;
    double attr = 0;
    bool fresh = false;  // the answer may be kept (cached listings too)
  };
  CacheTimes TimesFor(uint64_t gen) const REQUIRES_SHARED(reply_mu_);
  // Held (shared: core::ReaderLock) from TimesFor to the reply; the
  // watcher moves the generation under it held exclusively.
  core::SharedMutex& reply_mu() RETURN_CAPABILITY(reply_mu_) { return reply_mu_; }
  const MountOptions& options() const { return options_; }
  Client* client() const { return client_.get(); }
  // Requests served since the mount (every operation but init).
  void CountRequest() { requests_.fetch_add(1, std::memory_order_relaxed); }
  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }

  // A client of the ptstored at options.socket_path that maps its arena.
  static Result<std::unique_ptr<Client>> Connect(const MountOptions& options);

 private:
  MountOptions options_;
  std::unique_ptr<Client> client_;
  InodeTable inodes_;
  std::unique_ptr<TreeView> tree_;
  Invalidator invalidator_;
  MetaCache cache_;
  ListingCache listings_;
  // Guards no member of its own: it orders replies against the watcher's
  // generation moves (ChangeWatcher holds it exclusively; TimesFor and
  // each reply after it, shared).
  core::SharedMutex reply_mu_;
  std::unique_ptr<ChangeWatcher> watcher_;
  std::atomic<uint64_t> requests_{0};
  core::Mutex open_mu_;
  std::unordered_map<uint64_t, std::unique_ptr<OpenHandle>> open_ GUARDED_BY(open_mu_);
};

}  // namespace ptstore::fs

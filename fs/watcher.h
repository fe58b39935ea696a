// The change watcher of a mount: polls ptstored's change log
// (Client::Changes) every `interval` from a thread of its own, and for every
// change drops what it makes stale from the mount's MetaCache and queues the
// kernel invalidations it needs (Invalidator):
//
//   kAdded K below P    P's directory: attributes (its link count) and its
//                       cached listing
//   kRemoved K from P   the name K in P's directory (and what hangs below
//                       it), K's inodes (directory, kv, tokens: attributes
//                       and pages), P's directory as above
//   kTimes K            the attributes of K and of its ancestors (their
//                       atime), not their pages
//   kNamespace N        the name N at the root, N's inodes, the root's
//                       listing
//
// and, for any change in namespace N, the attributes of N's directory, its
// .layout and the root (their times are the newest of what they hold). A
// change is in the kernel's cache within one interval plus the time of one
// poll (ptstore(7) "Caching"): that bound is what lets the mount give the
// kernel long entry and attribute timeouts.
//
// When the log says changes were lost (ptstored restarted, or more changed
// between two polls than the log keeps), everything the kernel holds is
// invalidated and the cache emptied. While polls fail, the cache is
// disabled (healthy() is false) and the mount falls back to short
// timeouts; the first poll that succeeds again invalidates everything.
//
// Races with replies: the cache's generation moves, under `reply_mu` held
// exclusively, before the invalidations are queued; a reply (Filesystem)
// checks the generation it started from under `reply_mu` held shared, and
// gives the kernel timeouts of 0 when it moved. So a reply built from
// answers older than a change never outlives that change's invalidation.
//
// Thread safety: Start/Stop from one thread; the rest from any.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "core/mutex.h"
#include "fs/inode_table.h"
#include "fs/invalidator.h"
#include "fs/meta_cache.h"
#include "ptstore/client.h"

namespace ptstore::fs {

class ChangeWatcher {
 public:
  ChangeWatcher(Client* client, std::chrono::milliseconds interval, MetaCache* cache, InodeTable* inodes,
                Invalidator* invalidator, core::SharedMutex* reply_mu);
  ~ChangeWatcher();  // Stop()
  ChangeWatcher(const ChangeWatcher&) = delete;
  ChangeWatcher& operator=(const ChangeWatcher&) = delete;

  // Polls once (to know where the log is and enable the cache), then
  // starts the thread.
  void Start();
  void Stop() EXCLUDES(mu_);

  bool healthy() const { return healthy_.load(std::memory_order_acquire); }
  uint64_t polls() const { return polls_.load(std::memory_order_relaxed); }
  uint64_t changes() const { return changes_.load(std::memory_order_relaxed); }
  uint64_t resets() const { return resets_.load(std::memory_order_relaxed); }

 private:
  void Run() EXCLUDES(mu_);
  // One poll (and the polls right after it while the log has more).
  void Poll();
  void Apply(const TreeChanges& batch);
  void InvalidateAll();

  Client* const client_;
  const std::chrono::milliseconds interval_;
  MetaCache* const cache_;
  InodeTable* const inodes_;
  Invalidator* const invalidator_;
  core::SharedMutex* const reply_mu_;  // Filesystem's

  uint64_t epoch_ = 0;  // poll thread only
  uint64_t next_ = 0;
  bool synced_before_ = false;
  std::atomic<bool> healthy_{false};
  std::atomic<uint64_t> polls_{0}, changes_{0}, resets_{0};

  core::Mutex mu_;
  core::CondVar cv_;
  bool stop_ GUARDED_BY(mu_) = false;
  std::thread thread_;
};

}  // namespace ptstore::fs

// Pushes kernel cache invalidations from a thread of its own.
//
// libfuse: calling fuse_lowlevel_notify_inval_* from inside a request
// handler for the same inode (or its parent directory) can deadlock,
// because the kernel holds that inode's lock while it waits for the reply.
// Handlers therefore only queue; this thread sends.
//
// Thread safety: Entry/Inode may be called from any thread.
#pragma once

#include <fuse_lowlevel.h>

#include <deque>
#include <string>
#include <thread>

#include "core/mutex.h"

namespace ptstore::fs {

class Invalidator {
 public:
  Invalidator() = default;
  ~Invalidator();  // Stop()
  Invalidator(const Invalidator&) = delete;
  Invalidator& operator=(const Invalidator&) = delete;

  // Starts the thread; notifications go to `se`.
  void Start(fuse_session* se);
  // Sends what is queued, then joins. A second call is a no-op.
  void Stop() EXCLUDES(mu_);

  // The dentry `name` in directory `parent` (and what hangs below it).
  void Entry(fuse_ino_t parent, std::string name) EXCLUDES(mu_);
  // The attributes and cached pages of `ino` (a directory's: its cached
  // listing).
  void Inode(fuse_ino_t ino) EXCLUDES(mu_);
  // The attributes of `ino` only.
  void Attributes(fuse_ino_t ino) EXCLUDES(mu_);

  uint64_t sent() const EXCLUDES(mu_);

 private:
  struct Item {
    fuse_ino_t ino = 0;
    std::string name;  // empty: an inode; else an entry of directory `ino`
    bool attributes_only = false;
  };
  void Run() EXCLUDES(mu_);

  fuse_session* se_ = nullptr;  // set by Start, before any handler runs
  mutable core::Mutex mu_;
  core::CondVar cv_;
  std::deque<Item> queue_ GUARDED_BY(mu_);
  bool stop_ GUARDED_BY(mu_) = false;
  uint64_t sent_ GUARDED_BY(mu_) = 0;
  std::thread thread_;
};

}  // namespace ptstore::fs

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

#include <condition_variable>
#include <deque>
#include <mutex>
#include <string>
#include <thread>

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
  void Stop();

  // The dentry `name` in directory `parent` (and what hangs below it).
  void Entry(fuse_ino_t parent, std::string name);
  // The attributes and cached pages of `ino` (a directory's: its cached
  // listing).
  void Inode(fuse_ino_t ino);
  // The attributes of `ino` only.
  void Attributes(fuse_ino_t ino);

  uint64_t sent() const;

 private:
  struct Item {
    fuse_ino_t ino = 0;
    std::string name;  // empty: an inode; else an entry of directory `ino`
    bool attributes_only = false;
  };
  void Run();

  fuse_session* se_ = nullptr;
  mutable std::mutex mu_;  // guards queue_, stop_, sent_
  std::condition_variable cv_;
  std::deque<Item> queue_;
  bool stop_ = false;
  uint64_t sent_ = 0;
  std::thread thread_;
};

}  // namespace ptstore::fs

// A small pool of threads for the SSD tier's blocking file I/O, so that
// reads and writes of segment files never run under the store's mutex and
// loads of DRAM-resident data go on while they run. Jobs are plain I/O: they
// never take the store's mutex, so a thread that waits for one while not
// holding the mutex cannot deadlock with it.
//
// Foreground jobs (reads a client waits for) run before background ones
// (spills, header rewrites, compaction copies).
//
// Thread safety: all methods are safe from any thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::storage {

class IoPool {
 public:
  enum class Priority { kForeground, kBackground };

  explicit IoPool(unsigned threads);
  ~IoPool();  // runs every queued job, then joins
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  std::future<Status> Submit(std::function<Status()> job, Priority priority = Priority::kForeground);
  // Jobs queued or running.
  size_t pending() const;

 private:
  void Run();

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::packaged_task<Status()>> queue_[2];  // GUARDED_BY(mu_), by priority
  size_t running_ = 0;                                  // GUARDED_BY(mu_)
  bool stop_ = false;                                   // GUARDED_BY(mu_)
  std::vector<std::thread> threads_;
};

}  // namespace ptstore::storage

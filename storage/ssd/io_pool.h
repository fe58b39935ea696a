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

#include <deque>
#include <functional>
#include <future>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "ptstore/status.h"

namespace ptstore::storage {

class IoPool {
 public:
  enum class Priority { kForeground, kBackground };

  explicit IoPool(unsigned threads);
  ~IoPool();  // runs every queued job, then joins
  IoPool(const IoPool&) = delete;
  IoPool& operator=(const IoPool&) = delete;

  std::future<Status> Submit(std::function<Status()> job, Priority priority = Priority::kForeground)
      EXCLUDES(mu_);
  // Jobs queued or running.
  size_t pending() const EXCLUDES(mu_);

 private:
  void Run() EXCLUDES(mu_);

  mutable core::Mutex mu_;
  core::CondVar cv_;
  std::deque<std::packaged_task<Status()>> queue_[2] GUARDED_BY(mu_);  // by priority
  size_t running_ GUARDED_BY(mu_) = 0;
  bool stop_ GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace ptstore::storage

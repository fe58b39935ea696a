#include "storage/ssd/io_pool.h"

namespace ptstore::storage {

IoPool::IoPool(unsigned threads) {
  if (threads == 0) threads = 1;
  for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { Run(); });
}

IoPool::~IoPool() {
  {
    core::MutexLock lk(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  for (auto& t : threads_) t.join();
}

std::future<Status> IoPool::Submit(std::function<Status()> job, Priority priority) {
  std::packaged_task<Status()> task(std::move(job));
  std::future<Status> f = task.get_future();
  {
    core::MutexLock lk(mu_);
    queue_[priority == Priority::kForeground ? 0 : 1].push_back(std::move(task));
  }
  cv_.NotifyOne();
  return f;
}

size_t IoPool::pending() const {
  core::MutexLock lk(mu_);
  return queue_[0].size() + queue_[1].size() + running_;
}

void IoPool::Run() {
  core::UniqueLock lk(mu_);
  for (;;) {
    cv_.Wait(lk, [&]() REQUIRES(mu_) { return stop_ || !queue_[0].empty() || !queue_[1].empty(); });
    auto& q = !queue_[0].empty() ? queue_[0] : queue_[1];
    if (q.empty()) return;  // stopping and drained
    std::packaged_task<Status()> task = std::move(q.front());
    q.pop_front();
    ++running_;
    lk.Unlock();
    task();
    lk.Lock();
    --running_;
  }
}

}  // namespace ptstore::storage

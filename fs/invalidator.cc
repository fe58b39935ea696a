#include "fs/invalidator.h"

namespace ptstore::fs {

Invalidator::~Invalidator() { Stop(); }

void Invalidator::Start(fuse_session* se) {
  se_ = se;
  thread_ = std::thread([this] { Run(); });
}

void Invalidator::Stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Invalidator::Entry(fuse_ino_t parent, std::string name) {
  {
    std::lock_guard lock(mu_);
    if (stop_ || se_ == nullptr) return;
    queue_.push_back(Item{parent, std::move(name)});
  }
  cv_.notify_one();
}

void Invalidator::Inode(fuse_ino_t ino) {
  {
    std::lock_guard lock(mu_);
    if (stop_ || se_ == nullptr) return;
    queue_.push_back(Item{ino, {}});
  }
  cv_.notify_one();
}

void Invalidator::Attributes(fuse_ino_t ino) {
  {
    std::lock_guard lock(mu_);
    if (stop_ || se_ == nullptr) return;
    queue_.push_back(Item{ino, {}, true});
  }
  cv_.notify_one();
}

uint64_t Invalidator::sent() const {
  std::lock_guard lock(mu_);
  return sent_;
}

void Invalidator::Run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lock.unlock();
    // Errors (ENOENT: the kernel no longer caches it) are expected and harmless.
    if (item.name.empty()) {
      // A negative offset: the attributes only, not the pages.
      fuse_lowlevel_notify_inval_inode(se_, item.ino, item.attributes_only ? -1 : 0, 0);
    } else {
      fuse_lowlevel_notify_inval_entry(se_, item.ino, item.name.c_str(), item.name.size());
    }
    lock.lock();
    ++sent_;
  }
}

}  // namespace ptstore::fs

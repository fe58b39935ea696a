#include "fs/invalidator.h"

namespace ptstore::fs {

Invalidator::~Invalidator() { Stop(); }

void Invalidator::Start(fuse_session* se) {
  se_ = se;
  thread_ = std::thread([this] { Run(); });
}

void Invalidator::Stop() {
  {
    core::MutexLock lock(mu_);
    stop_ = true;
  }
  cv_.NotifyAll();
  if (thread_.joinable()) thread_.join();
}

void Invalidator::Entry(fuse_ino_t parent, std::string name) {
  {
    core::MutexLock lock(mu_);
    if (stop_ || se_ == nullptr) return;
    queue_.push_back(Item{parent, std::move(name)});
  }
  cv_.NotifyOne();
}

void Invalidator::Inode(fuse_ino_t ino) {
  {
    core::MutexLock lock(mu_);
    if (stop_ || se_ == nullptr) return;
    queue_.push_back(Item{ino, {}});
  }
  cv_.NotifyOne();
}

void Invalidator::Attributes(fuse_ino_t ino) {
  {
    core::MutexLock lock(mu_);
    if (stop_ || se_ == nullptr) return;
    queue_.push_back(Item{ino, {}, true});
  }
  cv_.NotifyOne();
}

uint64_t Invalidator::sent() const {
  core::MutexLock lock(mu_);
  return sent_;
}

void Invalidator::Run() {
  core::UniqueLock lock(mu_);
  for (;;) {
    cv_.Wait(lock, [&]() REQUIRES(mu_) { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping, nothing left
    Item item = std::move(queue_.front());
    queue_.pop_front();
    lock.Unlock();
    // Errors (ENOENT: the kernel no longer caches it) are expected and harmless.
    if (item.name.empty()) {
      // A negative offset: the attributes only, not the pages.
      fuse_lowlevel_notify_inval_inode(se_, item.ino, item.attributes_only ? -1 : 0, 0);
    } else {
      fuse_lowlevel_notify_inval_entry(se_, item.ino, item.name.c_str(), item.name.size());
    }
    lock.Lock();
    ++sent_;
  }
}

}  // namespace ptstore::fs

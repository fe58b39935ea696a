// Compiled only by clang with -Wthread-safety -Werror (the ctest
// thread_safety_analysis_clean): the patterns core/mutex.h documents (scoped
// locks, a lock dropped for I/O and retaken, a condition wait whose predicate
// says REQUIRES, reader and writer locks) pass the analysis with no warning.
#include <vector>

#include "core/mutex.h"

namespace {

using ptstore::core::CondVar;
using ptstore::core::Mutex;
using ptstore::core::MutexLock;
using ptstore::core::ReaderLock;
using ptstore::core::SharedMutex;
using ptstore::core::UniqueLock;
using ptstore::core::WriterLock;

class Queue {
 public:
  void Put(int v) EXCLUDES(mu_) {
    MutexLock lock(mu_);
    items_.push_back(v);
    cv_.NotifyAll();
  }
  int TakeAndPutBack() EXCLUDES(mu_) {
    UniqueLock lock(mu_);
    cv_.Wait(lock, [&]() REQUIRES(mu_) { return !items_.empty(); });
    int v = items_.back();
    items_.pop_back();
    lock.Unlock();
    Io();
    lock.Lock();
    items_.push_back(v);
    return v;
  }
  bool WaitBriefly() EXCLUDES(mu_) {
    UniqueLock lock(mu_);
    return cv_.WaitFor(lock, std::chrono::milliseconds(1), [&]() REQUIRES(mu_) { return !items_.empty(); });
  }
  int Read() EXCLUDES(table_mu_) {
    ReaderLock lock(table_mu_);
    return table_;
  }
  void Write(int v) EXCLUDES(table_mu_) {
    WriterLock lock(table_mu_);
    table_ = v;
  }
  size_t SizeLocked() const REQUIRES(mu_) { return items_.size(); }
  // A lock passed by reference, dropped for I/O and retaken by the callee.
  int TakeWithIo() EXCLUDES(mu_) {
    UniqueLock lock(mu_);
    items_.push_back(1);
    DropForIoLocked(lock);
    int v = items_.back();
    items_.pop_back();
    return v;
  }
  void DropForIoLocked(UniqueLock& lock) REQUIRES(mu_) {
    lock.Unlock(mu_);
    Io();
    lock.Lock(mu_);
    items_.push_back(static_cast<int>(items_.size()));
  }

 private:
  void Io() EXCLUDES(mu_) {}
  Mutex mu_;
  CondVar cv_;
  std::vector<int> items_ GUARDED_BY(mu_);
  SharedMutex table_mu_;
  int table_ GUARDED_BY(table_mu_) = 0;
};

}  // namespace

int main() {
  Queue q;
  q.Put(1);
  q.Write(q.TakeAndPutBack());
  q.TakeWithIo();
  return q.Read() + (q.WaitBriefly() ? 0 : 1) - 1;
}

// Compiled only by clang with -Wthread-safety -Werror (the ctest
// thread_safety_analysis_catches): each function below breaks one rule of
// core/mutex.h, and the test passes only when clang reports all of them.
// If the macros stopped expanding, or the check's flags stopped enabling the
// analysis, this would compile and the test would fail.
#include "core/mutex.h"

namespace {

class Violations {
 public:
  void WriteWithoutLock() { value_ = 1; }  // 1: writing value_ needs mu_
  int ReadAfterUnlock() {
    ptstore::core::UniqueLock lock(mu_);
    lock.Unlock();
    return value_;  // 2: reading value_ needs mu_
  }
  void WriteUnderReaderLock() {
    ptstore::core::ReaderLock lock(shared_mu_);
    shared_value_ = 2;  // 3: writing needs shared_mu_ exclusively
  }
  void CallWithoutLock() { NeedsLock(); }  // 4: NeedsLock requires mu_
  void DoubleLock() {
    ptstore::core::MutexLock lock(mu_);
    Takes();  // 5: Takes excludes mu_
  }
  void ReturnsWithLockDropped(ptstore::core::UniqueLock& lock) REQUIRES(mu_) {
    lock.Unlock(mu_);
  }  // 6: mu_ must be held again at the end (REQUIRES)

 private:
  void NeedsLock() REQUIRES(mu_) {}
  void Takes() EXCLUDES(mu_) { ptstore::core::MutexLock lock(mu_); }
 public:
  ptstore::core::Mutex& mu() RETURN_CAPABILITY(mu_) { return mu_; }
 private:
  ptstore::core::Mutex mu_;
  int value_ GUARDED_BY(mu_) = 0;
  ptstore::core::SharedMutex shared_mu_;
  int shared_value_ GUARDED_BY(shared_mu_) = 0;
};

}  // namespace

int main() {
  Violations v;
  v.WriteWithoutLock();
  v.CallWithoutLock();
  v.DoubleLock();
  {
    ptstore::core::UniqueLock lock(v.mu());
    v.ReturnsWithLockDropped(lock);
  }
  v.WriteUnderReaderLock();
  return v.ReadAfterUnlock();
}

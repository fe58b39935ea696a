// The mutexes of PTStore, as capabilities clang's -Wthread-safety analysis
// checks (core/thread_annotations.h): libstdc++'s std::mutex carries no
// annotations, so code that wants its locking checked uses these.
//
//   core::Mutex mu_;
//   int hits_ GUARDED_BY(mu_);
//
//   void Count() EXCLUDES(mu_) {
//     core::MutexLock lock(mu_);          // held to the end of the scope
//     ++hits_;
//   }
//   void WaitForHit() EXCLUDES(mu_) {
//     core::UniqueLock lock(mu_);         // may be dropped and retaken
//     cv_.Wait(lock, [&]() REQUIRES(mu_) { return hits_ > 0; });
//     lock.Unlock();                      // ... I/O without the lock ...
//     lock.Lock();
//   }
//
// A predicate that reads guarded members says so with REQUIRES(mu) on the
// lambda, as above: the analysis then checks its body like any function's.
// SharedMutex is the reader/writer form (ReaderLock, WriterLock).
//
// Thread safety: Mutex, SharedMutex and CondVar are safe to use from any
// thread; a scoped lock object belongs to the thread that made it.
#pragma once

#include <cassert>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <shared_mutex>

#include "core/thread_annotations.h"

namespace ptstore::core {

class CAPABILITY("mutex") Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  bool TryLock() TRY_ACQUIRE(true) { return mu_.try_lock(); }
  // Tells the analysis the caller holds the mutex, where it cannot see it
  // (a callback run under a lock taken elsewhere). Checks nothing at run time.
  void AssertHeld() const ASSERT_CAPABILITY(this) {}

 private:
  friend class UniqueLock;
  std::mutex mu_;
};

// Holds a Mutex from construction to the end of the scope.
class SCOPED_CAPABILITY MutexLock {
 public:
  explicit MutexLock(Mutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~MutexLock() RELEASE() { mu_.Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex& mu_;
};

// Holds a Mutex, and may drop it (Unlock) and take it again (Lock) within its
// scope; released at the end of the scope if held. The lock a CondVar waits on.
class SCOPED_CAPABILITY UniqueLock {
 public:
  explicit UniqueLock(Mutex& mu) ACQUIRE(mu) : lock_(mu.mu_) {}
  ~UniqueLock() RELEASE() {}
  UniqueLock(const UniqueLock&) = delete;
  UniqueLock& operator=(const UniqueLock&) = delete;

  void Unlock() RELEASE() { lock_.unlock(); }
  void Lock() ACQUIRE() { lock_.lock(); }
  // The same, for a lock passed by reference into a function that
  // REQUIRES(mu) and drops it part-way (for I/O): the analysis cannot see
  // which mutex a UniqueLock parameter holds, so the callee names it:
  //   void SpillLocked(UniqueLock& lk) REQUIRES(mu_) {
  //     lk.Unlock(mu_);  ...I/O...  lk.Lock(mu_);
  //   }
  // `mu` must be the mutex this lock was made with (asserted in debug builds).
  // Not analysed inside: the analysis would see mu released by a std call
  // it does not know (std::unique_lock carries no annotations).
  void Unlock(Mutex& mu) RELEASE(mu) NO_THREAD_SAFETY_ANALYSIS {
    assert(lock_.mutex() == &mu.mu_);
    lock_.unlock();
  }
  void Lock(Mutex& mu) ACQUIRE(mu) NO_THREAD_SAFETY_ANALYSIS {
    assert(lock_.mutex() == &mu.mu_);
    lock_.lock();
  }

 private:
  friend class CondVar;
  std::unique_lock<std::mutex> lock_;
};

// A condition variable over a UniqueLock. Waits return with the lock held.
class CondVar {
 public:
  void Wait(UniqueLock& lock) { cv_.wait(lock.lock_); }
  template <class Pred>
  void Wait(UniqueLock& lock, Pred pred) {
    cv_.wait(lock.lock_, std::move(pred));
  }
  // Returns false when `timeout` passed without a notification (or, with a
  // predicate, with the predicate still false).
  template <class Rep, class Period>
  bool WaitFor(UniqueLock& lock, std::chrono::duration<Rep, Period> timeout) {
    return cv_.wait_for(lock.lock_, timeout) == std::cv_status::no_timeout;
  }
  template <class Rep, class Period, class Pred>
  bool WaitFor(UniqueLock& lock, std::chrono::duration<Rep, Period> timeout, Pred pred) {
    return cv_.wait_for(lock.lock_, timeout, std::move(pred));
  }
  template <class Clock, class Duration, class Pred>
  bool WaitUntil(UniqueLock& lock, std::chrono::time_point<Clock, Duration> deadline, Pred pred) {
    return cv_.wait_until(lock.lock_, deadline, std::move(pred));
  }
  void NotifyOne() { cv_.notify_one(); }
  void NotifyAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

// A reader/writer mutex: many ReaderLocks or one WriterLock at a time.
class CAPABILITY("shared_mutex") SharedMutex {
 public:
  SharedMutex() = default;
  SharedMutex(const SharedMutex&) = delete;
  SharedMutex& operator=(const SharedMutex&) = delete;

  void Lock() ACQUIRE() { mu_.lock(); }
  void Unlock() RELEASE() { mu_.unlock(); }
  void LockShared() ACQUIRE_SHARED() { mu_.lock_shared(); }
  void UnlockShared() RELEASE_SHARED() { mu_.unlock_shared(); }
  void AssertHeld() const ASSERT_CAPABILITY(this) {}
  void AssertReaderHeld() const ASSERT_SHARED_CAPABILITY(this) {}

 private:
  std::shared_mutex mu_;
};

// Holds a SharedMutex shared (reading) to the end of the scope.
class SCOPED_CAPABILITY ReaderLock {
 public:
  explicit ReaderLock(SharedMutex& mu) ACQUIRE_SHARED(mu) : mu_(mu) { mu_.LockShared(); }
  ~ReaderLock() RELEASE() { mu_.UnlockShared(); }
  ReaderLock(const ReaderLock&) = delete;
  ReaderLock& operator=(const ReaderLock&) = delete;

 private:
  SharedMutex& mu_;
};

// Holds a SharedMutex exclusively (writing) to the end of the scope.
class SCOPED_CAPABILITY WriterLock {
 public:
  explicit WriterLock(SharedMutex& mu) ACQUIRE(mu) : mu_(mu) { mu_.Lock(); }
  ~WriterLock() RELEASE() { mu_.Unlock(); }
  WriterLock(const WriterLock&) = delete;
  WriterLock& operator=(const WriterLock&) = delete;

 private:
  SharedMutex& mu_;
};

}  // namespace ptstore::core

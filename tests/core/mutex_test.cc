// core/mutex.h: the annotated mutexes behave as the std ones they wrap (the
// analysis itself is checked by thread_safety_analysis_* in this folder).
#include "core/mutex.h"

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace ptstore::core {
namespace {

using namespace std::chrono_literals;

TEST(MutexTest, MutexLockExcludesOtherThreads) {
  Mutex mu;
  int counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 20000; ++i) {
        MutexLock lock(mu);
        ++counter;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, 80000);
}

TEST(MutexTest, TryLockFailsWhileHeldAndSucceedsAfter) {
  Mutex mu;
  mu.Lock();
  bool got = true;
  std::thread([&] { got = mu.TryLock(); }).join();
  EXPECT_FALSE(got);
  mu.Unlock();
  std::thread([&] {
    got = mu.TryLock();
    if (got) mu.Unlock();
  }).join();
  EXPECT_TRUE(got);
}

TEST(MutexTest, UniqueLockDropsAndRetakes) {
  Mutex mu;
  UniqueLock lock(mu);
  lock.Unlock();
  bool other_got = false;
  std::thread([&] {
    other_got = mu.TryLock();
    if (other_got) mu.Unlock();
  }).join();
  EXPECT_TRUE(other_got) << "Unlock must release the mutex";
  lock.Lock();
  std::thread([&] {
    other_got = mu.TryLock();
    if (other_got) mu.Unlock();
  }).join();
  EXPECT_FALSE(other_got) << "Lock must take it again";
}  // the destructor releases the retaken lock (the next test would hang otherwise)

TEST(MutexTest, UniqueLockDestructorReleasesOnlyWhatItHolds) {
  Mutex mu;
  {
    UniqueLock lock(mu);
    lock.Unlock();
  }  // not held: nothing to release
  ASSERT_TRUE(mu.TryLock());
  mu.Unlock();
}

TEST(MutexTest, CondVarWakesAWaiterWithThePredicateTrue) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  std::thread producer([&] {
    std::this_thread::sleep_for(20ms);
    MutexLock lock(mu);
    ready = true;
    cv.NotifyAll();
  });
  UniqueLock lock(mu);
  cv.Wait(lock, [&] { return ready; });
  EXPECT_TRUE(ready);
  lock.Unlock();
  producer.join();
}

TEST(MutexTest, CondVarTimedWaitsReportTimeouts) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  UniqueLock lock(mu);
  auto start = std::chrono::steady_clock::now();
  EXPECT_FALSE(cv.WaitFor(lock, 30ms, [&] { return ready; }));
  EXPECT_GE(std::chrono::steady_clock::now() - start, 30ms);
  EXPECT_FALSE(cv.WaitUntil(lock, std::chrono::steady_clock::now() + 10ms, [&] { return ready; }));
  ready = true;
  EXPECT_TRUE(cv.WaitFor(lock, 1h, [&] { return ready; })) << "a true predicate returns at once";
}

TEST(MutexTest, SharedMutexAdmitsReadersTogetherAndWritersAlone) {
  SharedMutex mu;
  std::atomic<int> readers{0};
  std::atomic<int> most{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      ReaderLock lock(mu);
      int now = ++readers;
      for (int seen = most.load(); now > seen && !most.compare_exchange_weak(seen, now);) {
      }
      std::this_thread::sleep_for(30ms);
      --readers;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_GT(most.load(), 1) << "readers should overlap";
  int inside = 0;
  bool overlap = false;
  threads.clear();
  for (int t = 0; t < 3; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 2000; ++i) {
        WriterLock lock(mu);
        if (++inside != 1) overlap = true;
        --inside;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_FALSE(overlap);
}

}  // namespace
}  // namespace ptstore::core

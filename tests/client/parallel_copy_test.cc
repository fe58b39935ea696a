// client/parallel_copy.h: large copies split over threads copy every byte
// to its place (unaligned spans, many spans, spans of every size around the
// per-thread threshold), from many callers at once, and never use more
// threads than the CPUs idle at that moment allow.
#include "client/parallel_copy.h"

#include <gtest/gtest.h>
#include <sched.h>
#include <stdlib.h>

#include <cstring>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

namespace ptstore::client {
namespace {

std::vector<uint8_t> Random(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937_64 rng(seed);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    const uint64_t x = rng();
    std::memcpy(v.data() + i, &x, 8);
  }
  for (size_t i = n / 8 * 8; i < n; ++i) v[i] = static_cast<uint8_t>(rng());
  return v;
}

// Copies random pieces of `src` to random places of a destination as
// CopyParallel would be asked by a load (pieces in order, gaps between),
// and checks every byte, including that the gaps were left alone.
void CheckPieces(uint64_t seed, int max_threads) {
  std::mt19937_64 rng(seed);
  const size_t n = 24u << 20;
  const std::vector<uint8_t> src = Random(n, seed);
  std::vector<uint8_t> dst(n + 4096, 0xAB), want(n + 4096, 0xAB);
  std::vector<CopySpan> spans;
  size_t in = rng() % 64, out = rng() % 64;
  while (in < n && out < dst.size()) {
    size_t len = std::min<size_t>({n - in, dst.size() - out, static_cast<size_t>(rng() % (9u << 20)) + 1});
    spans.push_back({dst.data() + out, src.data() + in, len});
    std::memcpy(want.data() + out, src.data() + in, len);
    in += len + rng() % 3;
    out += len + rng() % 5;
  }
  CopyParallel(spans, max_threads);
  ASSERT_EQ(dst, want) << "seed " << seed << ", " << spans.size() << " spans, max_threads " << max_threads;
}

TEST(ParallelCopy, EveryByteGoesToItsPlace) {
  for (int threads : {1, 2, 4, 0}) {
    for (uint64_t seed = 1; seed <= 4; ++seed) CheckPieces(seed * 100 + threads, threads);
  }
}

TEST(ParallelCopy, SizesAroundThePerThreadThreshold) {
  for (uint64_t bytes : {uint64_t{0}, uint64_t{1}, uint64_t{63}, kMinBytesPerThread - 1, kMinBytesPerThread,
                         2 * kMinBytesPerThread - 1, 2 * kMinBytesPerThread + 1, 5 * kMinBytesPerThread + 17}) {
    const std::vector<uint8_t> src = Random(bytes + 1, bytes);
    std::vector<uint8_t> dst(bytes + 2, 0);
    const CopySpan s{dst.data() + 1, src.data() + 1, bytes};  // both unaligned
    CopyParallel({&s, 1}, 4);
    EXPECT_EQ(std::memcmp(dst.data() + 1, src.data() + 1, bytes), 0) << bytes;
    EXPECT_EQ(dst[0], 0) << bytes;
    EXPECT_EQ(dst[bytes + 1], 0) << bytes;
  }
}

TEST(ParallelCopy, ManyCallersAtOnceShareThePool) {
  std::vector<std::thread> callers;
  std::vector<int> failures(6, 0);
  for (int c = 0; c < 6; ++c) {
    callers.emplace_back([c, &failures] {
      for (int rep = 0; rep < 3; ++rep) {
        const size_t n = (9u << 20) + c * 4097 + rep;
        const std::vector<uint8_t> src = Random(n, c * 10 + rep);
        std::vector<uint8_t> dst(n);
        const CopySpan s{dst.data(), src.data(), n};
        CopyParallel({&s, 1}, 4);
        if (dst != src) failures[c]++;
      }
    });
  }
  for (auto& t : callers) t.join();
  for (int c = 0; c < 6; ++c) EXPECT_EQ(failures[c], 0) << "caller " << c;
}

TEST(ParallelCopy, ThreadCountsFollowTheMachineAndTheEnvironment) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cpus = CPU_COUNT(&set);
  const int idle = IdleCpus();
  EXPECT_GE(idle, 0);
  EXPECT_LE(idle, cpus);
  ASSERT_EQ(unsetenv("PTSTORE_COPY_THREADS"), 0);
  EXPECT_EQ(DefaultCopyThreads(), std::min(cpus, kMaxCopyThreads));
  ASSERT_EQ(setenv("PTSTORE_COPY_THREADS", "3", 1), 0);
  EXPECT_EQ(DefaultCopyThreads(), 3);
  ASSERT_EQ(setenv("PTSTORE_COPY_THREADS", "zero", 1), 0);  // not a positive number: ignored
  EXPECT_EQ(DefaultCopyThreads(), std::min(cpus, kMaxCopyThreads));
  ASSERT_EQ(unsetenv("PTSTORE_COPY_THREADS"), 0);
  // A busy machine: every CPU taken by a spinning thread leaves none idle
  // (the runnable count counts them), so a copy stays on the caller's thread.
  std::atomic<bool> stop{false};
  std::vector<std::thread> spinners;
  for (int i = 0; i < cpus; ++i) {
    spinners.emplace_back([&] {
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  int seen_busy = cpus;
  for (int i = 0; i < 50 && seen_busy > 0; ++i) {
    seen_busy = std::min(seen_busy, IdleCpus());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  stop = true;
  for (auto& t : spinners) t.join();
  EXPECT_EQ(seen_busy, 0) << "with " << cpus << " spinning threads some CPU still read idle";
}

}  // namespace
}  // namespace ptstore::client

// Large copies split over threads.
//
// One thread's memcpy moves about half of what the memory system can (on
// this project's build machine 12.6 GB/s on one thread, 24.4 on two:
// docs/benchmarks.md, bench_load), so a load of a GiB out of the arena, a
// copy out of a staging buffer and a save into one are split over several
// threads: the caller's and workers of one pool shared by the process.
//
// How many threads: at most `max_threads` (ClientOptions::copy_threads; 0
// means DefaultCopyThreads()), and at each copy no more than the CPUs idle
// right now (IdleCpus: the CPUs this process may run on less the other
// runnable tasks), so a busy node is never over-subscribed: with every CPU
// taken the copy stays on the caller's thread. Copies smaller than
// kMinBytesPerThread per thread use fewer threads (below twice that, one).
//
// Thread safety: CopyParallel may be called from many threads at once.
#pragma once

#include <cstdint>
#include <span>

namespace ptstore::client {

struct CopySpan {
  void* dst;
  const void* src;
  uint64_t bytes;
};

// Below this many bytes per thread another thread costs more than it gains.
inline constexpr uint64_t kMinBytesPerThread = 4ull << 20;
// The most copy threads DefaultCopyThreads chooses (memory bandwidth stops
// growing with threads well before the core count on large machines).
inline constexpr int kMaxCopyThreads = 8;

// Copies every span (the spans must not overlap each other). `max_threads`:
// <= 0 for DefaultCopyThreads(), 1 for the caller's thread alone.
void CopyParallel(std::span<const CopySpan> spans, int max_threads);

// The CPUs this process may run on (its affinity mask), at most
// kMaxCopyThreads; $PTSTORE_COPY_THREADS (a positive number) overrides it.
int DefaultCopyThreads();

// CPUs of this process's affinity mask not taken by another runnable task
// now (/proc/loadavg's runnable count, less the caller), at least 0.
int IdleCpus();

}  // namespace ptstore::client

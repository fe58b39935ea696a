// Copies larger than the caches, with non-temporal (streaming) stores.
//
// Why not memcpy: glibc chooses its copy by the size of each call. Above
// about 16 times its non-temporal threshold (192 MiB on a machine with a
// 32 MiB L3) it streams pages with non-temporal stores; below that, it
// writes through the cache, paying a read-for-ownership of every line. A
// large copy done in pieces (the extents of a prefix, the chunks one thread
// of several takes) therefore runs at the slow rate however large the whole
// is. Measured on this project's build machine (docs/benchmarks.md,
// bench_load and bench_copy): a loop of 4 MiB memcpy calls moves 9 GB/s on
// one thread, one 512 MiB call 16 GB/s, StreamCopy in 4 MiB pieces 15-16;
// on two threads 12 against 20-29.
//
// Streaming stores leave the destination out of the cache, which is right
// when the whole copy is larger than the last-level cache (it would not stay
// there anyway) and wrong for small copies that are read back at once:
// CopyBytes chooses by the size of the whole copy, not of the piece.
//
// Thread safety: all functions may be called from any thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace ptstore::core {

// Copies `n` bytes (the ranges must not overlap) with non-temporal stores
// where the CPU has them (x86-64: AVX2 when present, else SSE2; elsewhere
// memcpy), and ends with a store fence: the bytes are visible to another
// thread that synchronizes with this one afterwards.
void StreamCopy(void* dst, const void* src, size_t n);

// Whole copies of at least this many bytes stream: the last-level cache's
// size (sysconf), at least 8 MiB, 32 MiB where the size is unknown.
uint64_t StreamCopyThreshold();

// Copies one piece of `n` bytes of a copy of `total` bytes in all:
// StreamCopy when `total` reaches StreamCopyThreshold(), else memcpy.
void CopyBytes(void* dst, const void* src, size_t n, uint64_t total);

}  // namespace ptstore::core

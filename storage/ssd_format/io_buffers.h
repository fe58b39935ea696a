// Buffers for O_DIRECT file I/O.
//
// AlignedBuffer: a zeroed heap buffer, 4 KiB aligned (O_DIRECT needs it).
//
// BouncePool: large reads go through it. Reading with O_DIRECT straight
// into the arena (shared memory in 4 KiB pages) runs at 1.5-2 GB/s on the
// project's machines: the kernel pins every shmem page of the request one
// by one. Into anonymous memory backed by transparent huge pages it runs at
// the disk's speed (3+ GB/s), and copying on into the arena costs a memcpy
// at 10+ GB/s (bench/bench_ssd, docs/benchmarks.md). The pool keeps its
// buffers (faulted in once: fresh pages are slow on these VMs).
//
// Thread safety: AlignedBuffer none; BouncePool is safe from many threads.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <span>
#include <vector>

#include "core/mutex.h"
#include "storage/ssd_format/env.h"

namespace ptstore::storage {

class AlignedBuffer {
 public:
  explicit AlignedBuffer(uint64_t bytes)
      : size_((std::max<uint64_t>(bytes, 1) + kDirectIoAlignment - 1) / kDirectIoAlignment * kDirectIoAlignment),
        data_(static_cast<uint8_t*>(std::aligned_alloc(kDirectIoAlignment, size_))) {
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(data_, 0, size_);
  }
  ~AlignedBuffer() { std::free(data_); }
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;
  uint8_t* data() { return data_; }
  uint64_t size() const { return size_; }
  std::span<uint8_t> span(uint64_t n) { return {data_, n}; }

 private:
  uint64_t size_;
  uint8_t* data_;
};

class BouncePool {
 public:
  // Buffers of `buffer_bytes` (a multiple of 2 MiB), at most `max_buffers`
  // kept; more callers at once get fresh ones.
  BouncePool(uint64_t buffer_bytes, size_t max_buffers);
  ~BouncePool();
  BouncePool(const BouncePool&) = delete;
  BouncePool& operator=(const BouncePool&) = delete;

  uint64_t buffer_bytes() const { return buffer_bytes_; }
  // A 2 MiB-aligned buffer of buffer_bytes(); give it back with Release.
  uint8_t* Acquire() EXCLUDES(mu_);
  void Release(uint8_t* buffer) EXCLUDES(mu_);

 private:
  uint8_t* Map() EXCLUDES(mu_);

  const uint64_t buffer_bytes_;
  const size_t max_buffers_;
  core::Mutex mu_;
  std::vector<uint8_t*> free_ GUARDED_BY(mu_);
  std::vector<std::pair<uint8_t*, uint64_t>> mappings_ GUARDED_BY(mu_);  // (start, length) to unmap
};

}  // namespace ptstore::storage

#include "storage/ssd_format/io_buffers.h"

#include <sys/mman.h>

#include <algorithm>

namespace ptstore::storage {

namespace {
constexpr uint64_t kHugePage = 2ull << 20;
}  // namespace

BouncePool::BouncePool(uint64_t buffer_bytes, size_t max_buffers)
    : buffer_bytes_((buffer_bytes + kHugePage - 1) / kHugePage * kHugePage), max_buffers_(max_buffers) {}

BouncePool::~BouncePool() {
  for (auto& [start, length] : mappings_) ::munmap(start, length);
}

uint8_t* BouncePool::Map() {
  // Over-map by one huge page to place the buffer on a 2 MiB boundary, so
  // that transparent huge pages can back all of it.
  const uint64_t length = buffer_bytes_ + kHugePage;
  void* p = ::mmap(nullptr, length, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  auto* start = static_cast<uint8_t*>(p);
  auto* aligned = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(start) + kHugePage - 1) & ~(kHugePage - 1));
  (void)::madvise(aligned, buffer_bytes_, MADV_HUGEPAGE);  // a hint; fine if refused
  std::memset(aligned, 0, buffer_bytes_);                  // fault it in now, once
  core::MutexLock lk(mu_);
  mappings_.push_back({start, length});
  return aligned;
}

uint8_t* BouncePool::Acquire() {
  {
    core::MutexLock lk(mu_);
    if (!free_.empty()) {
      uint8_t* b = free_.back();
      free_.pop_back();
      return b;
    }
  }
  return Map();
}

void BouncePool::Release(uint8_t* buffer) {
  core::MutexLock lk(mu_);
  if (free_.size() < max_buffers_) {
    free_.push_back(buffer);
    return;
  }
  // Over the limit: unmap it.
  auto it = std::find_if(mappings_.begin(), mappings_.end(), [&](const auto& m) {
    return buffer >= m.first && buffer < m.first + m.second;
  });
  if (it != mappings_.end()) {
    ::munmap(it->first, it->second);
    mappings_.erase(it);
  }
}

}  // namespace ptstore::storage

#include "storage/cache/allocator.h"

#include <cstdio>
#include <cstdlib>
#include <iterator>

namespace ptstore::storage {
namespace {

// Contract violations are bugs in the caller: abort in every build type, with
// a message, rather than corrupt the free lists.
[[noreturn]] void Die(const char* what, uint64_t offset) {
  std::fprintf(stderr, "ptstore::storage::Allocator: %s (offset %llu)\n", what,
               static_cast<unsigned long long>(offset));
  std::abort();
}

}  // namespace

Allocator::Allocator(uint64_t capacity, uint64_t alignment) : alignment_(alignment) {
  if (alignment < 64 || (alignment & (alignment - 1)) != 0) {
    Die("alignment must be a power of two >= 64", alignment);
  }
  capacity_ = capacity / alignment * alignment;
  if (capacity_ > 0) InsertFree(0, capacity_);
}

void Allocator::InsertFree(uint64_t offset, uint64_t size) {
  free_by_offset_.emplace(offset, size);
  free_by_size_.emplace(size, offset);
}

void Allocator::EraseFree(std::map<uint64_t, uint64_t>::iterator it) {
  free_by_size_.erase({it->second, it->first});
  free_by_offset_.erase(it);
}

std::optional<uint64_t> Allocator::Allocate(uint64_t bytes) {
  // Checking against capacity first also keeps the rounding from overflowing.
  if (bytes == 0 || bytes > capacity_) return std::nullopt;
  const uint64_t size = (bytes + alignment_ - 1) & ~(alignment_ - 1);

  // Best fit: smallest extent >= size; among equal sizes the lowest offset,
  // which keeps allocations packed towards the start of the arena.
  auto fit = free_by_size_.lower_bound({size, 0});
  if (fit == free_by_size_.end()) return std::nullopt;
  const auto [extent_size, offset] = *fit;

  EraseFree(free_by_offset_.find(offset));
  // The allocation takes the front of the extent; the tail stays free. The
  // tail cannot touch another free extent: the whole extent was maximal.
  if (extent_size > size) InsertFree(offset + size, extent_size - size);

  allocated_.emplace(offset, size);
  used_bytes_ += size;
  return offset;
}

void Allocator::Free(uint64_t offset) {
  auto live = allocated_.find(offset);
  if (live == allocated_.end()) Die("Free of an offset that is not a live allocation", offset);
  uint64_t start = offset;
  uint64_t size = live->second;
  allocated_.erase(live);
  used_bytes_ -= size;

  // Merge with the free extent that starts where this one ends, and with the
  // one that ends where this one starts, so free extents stay maximal.
  auto next = free_by_offset_.lower_bound(offset);
  if (next != free_by_offset_.end() && next->first == start + size) {
    size += next->second;
    auto after = std::next(next);
    EraseFree(next);
    next = after;
  }
  if (next != free_by_offset_.begin()) {
    auto prev = std::prev(next);
    if (prev->first + prev->second == start) {
      start = prev->first;
      size += prev->second;
      EraseFree(prev);
    }
  }
  InsertFree(start, size);
}

uint64_t Allocator::AllocatedSize(uint64_t offset) const {
  auto live = allocated_.find(offset);
  if (live == allocated_.end()) Die("AllocatedSize of an offset that is not a live allocation", offset);
  return live->second;
}

uint64_t Allocator::largest_free_extent() const {
  return free_by_size_.empty() ? 0 : free_by_size_.rbegin()->first;
}

}  // namespace ptstore::storage

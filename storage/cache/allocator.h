// Allocator: hands out variable-size ranges of an arena of `capacity` bytes.
//
// It deals in offsets only and never touches the arena's memory. Every
// allocation starts at a multiple of `alignment` and its size is rounded up
// to a multiple of `alignment`. Placement is best fit (the smallest free
// extent that is large enough; the lowest offset among equals), and Free
// merges the range with free neighbours, so free space is always held as
// maximal extents and the arena does not fragment its capacity away.
// Allocate and Free cost O(log n) in the number of extents.
//
// Thread safety: none. The owner serialises every call (the arena's lock).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>

namespace ptstore::storage {

class Allocator {
 public:
  // REQUIRES: alignment is a power of two >= 64 (aborts otherwise).
  // A capacity that is not a multiple of alignment is rounded down to one:
  // capacity() returns the rounded value, which may be 0 (nothing fits).
  explicit Allocator(uint64_t capacity, uint64_t alignment = 4096);

  Allocator(const Allocator&) = delete;
  Allocator& operator=(const Allocator&) = delete;

  // Offset of a new range of at least `bytes` bytes (AllocatedSize() tells
  // how many). nullopt when bytes == 0 or no free extent is large enough.
  std::optional<uint64_t> Allocate(uint64_t bytes);

  // Returns a range to the free space, merging it with free neighbours.
  // REQUIRES: offset came from Allocate and was not freed since; aborts with
  // a message naming the offset otherwise (in release builds too).
  void Free(uint64_t offset);

  // Rounded size of the live allocation at `offset`.
  // REQUIRES: offset is live, as for Free (aborts otherwise).
  uint64_t AllocatedSize(uint64_t offset) const;

  uint64_t alignment() const { return alignment_; }
  uint64_t capacity() const { return capacity_; }
  // Sum of the rounded sizes of live allocations.
  uint64_t used_bytes() const { return used_bytes_; }
  uint64_t free_bytes() const { return capacity_ - used_bytes_; }
  // Largest request that Allocate would satisfy now (0 when full).
  uint64_t largest_free_extent() const;
  size_t free_extent_count() const { return free_by_offset_.size(); }
  size_t allocation_count() const { return allocated_.size(); }

 private:
  void InsertFree(uint64_t offset, uint64_t size);
  void EraseFree(std::map<uint64_t, uint64_t>::iterator it);

  uint64_t alignment_;
  uint64_t capacity_;
  uint64_t used_bytes_ = 0;
  // Free extents, both indexes always holding the same set. Invariant: no two
  // free extents touch (Free merges them).
  std::map<uint64_t, uint64_t> free_by_offset_;            // offset -> size
  std::set<std::pair<uint64_t, uint64_t>> free_by_size_;   // (size, offset)
  std::unordered_map<uint64_t, uint64_t> allocated_;       // offset -> rounded size
};

}  // namespace ptstore::storage

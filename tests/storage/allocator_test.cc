#include "storage/cache/allocator.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

namespace ptstore::storage {
namespace {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = kKiB * 1024;
constexpr uint64_t kGiB = kMiB * 1024;

TEST(AllocatorTest, StartsWithOneExtentOfFullCapacity) {
  Allocator a(64 * kMiB);
  EXPECT_EQ(a.capacity(), 64 * kMiB);
  EXPECT_EQ(a.alignment(), 4096u);
  EXPECT_EQ(a.used_bytes(), 0u);
  EXPECT_EQ(a.free_bytes(), 64 * kMiB);
  EXPECT_EQ(a.largest_free_extent(), 64 * kMiB);
  EXPECT_EQ(a.free_extent_count(), 1u);
  EXPECT_EQ(a.allocation_count(), 0u);
}

TEST(AllocatorTest, CapacityIsRoundedDownToAlignment) {
  Allocator a(10 * 4096 + 100);
  EXPECT_EQ(a.capacity(), 10 * 4096u);
  Allocator tiny(4095);
  EXPECT_EQ(tiny.capacity(), 0u);
  EXPECT_EQ(tiny.free_extent_count(), 0u);
  EXPECT_FALSE(tiny.Allocate(1).has_value());
}

TEST(AllocatorTest, OffsetsAreAlignedAndSizesRounded) {
  for (uint64_t alignment : {uint64_t{64}, uint64_t{4096}, 2 * kMiB}) {
    Allocator a(256 * kMiB, alignment);
    std::mt19937_64 rng(alignment);
    std::uniform_int_distribution<uint64_t> size(1, 3 * alignment);
    uint64_t used = 0;
    for (int i = 0; i < 40; ++i) {
      uint64_t bytes = size(rng);
      auto off = a.Allocate(bytes);
      ASSERT_TRUE(off.has_value());
      EXPECT_EQ(*off % alignment, 0u) << "alignment " << alignment;
      uint64_t rounded = (bytes + alignment - 1) / alignment * alignment;
      EXPECT_EQ(a.AllocatedSize(*off), rounded) << "bytes " << bytes;
      used += rounded;
    }
    EXPECT_EQ(a.used_bytes(), used);
  }
}

TEST(AllocatorTest, RoundingExamples) {
  Allocator a(kMiB);
  EXPECT_EQ(a.AllocatedSize(*a.Allocate(1)), 4096u);
  EXPECT_EQ(a.AllocatedSize(*a.Allocate(4096)), 4096u);
  EXPECT_EQ(a.AllocatedSize(*a.Allocate(4097)), 8192u);
}

TEST(AllocatorTest, ZeroAndOversizedRequestsFail) {
  Allocator a(kMiB);
  EXPECT_FALSE(a.Allocate(0).has_value());
  EXPECT_FALSE(a.Allocate(kMiB + 1).has_value());
  EXPECT_FALSE(a.Allocate(std::numeric_limits<uint64_t>::max()).has_value());
  EXPECT_FALSE(a.Allocate(std::numeric_limits<uint64_t>::max() - 10).has_value());
  EXPECT_TRUE(a.Allocate(kMiB).has_value());
}

TEST(AllocatorTest, ExhaustionReturnsNullopt) {
  Allocator a(16 * 4096);
  for (int i = 0; i < 16; ++i) ASSERT_TRUE(a.Allocate(4000).has_value()) << i;
  EXPECT_FALSE(a.Allocate(1).has_value());
  EXPECT_EQ(a.free_bytes(), 0u);
  EXPECT_EQ(a.largest_free_extent(), 0u);
  EXPECT_EQ(a.free_extent_count(), 0u);
  EXPECT_EQ(a.allocation_count(), 16u);
}

TEST(AllocatorTest, FreeCoalescesBackToOneExtent) {
  Allocator a(256 * kMiB);
  std::vector<uint64_t> offsets;
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<uint64_t> size(1, 3 * kMiB);
  while (auto off = a.Allocate(size(rng))) offsets.push_back(*off);
  ASSERT_GT(offsets.size(), 50u);
  std::shuffle(offsets.begin(), offsets.end(), rng);
  for (uint64_t off : offsets) a.Free(off);
  EXPECT_EQ(a.used_bytes(), 0u);
  EXPECT_EQ(a.allocation_count(), 0u);
  EXPECT_EQ(a.free_extent_count(), 1u);
  EXPECT_EQ(a.largest_free_extent(), a.capacity());
  EXPECT_EQ(a.Allocate(a.capacity()), std::optional<uint64_t>(0));
}

TEST(AllocatorTest, FreeMergesWithBothNeighbours) {
  Allocator a(5 * 4096);
  uint64_t o[5];
  for (auto& off : o) off = *a.Allocate(4096);
  a.Free(o[1]);
  a.Free(o[3]);
  EXPECT_EQ(a.free_extent_count(), 2u);
  a.Free(o[2]);  // joins [1] and [3]
  EXPECT_EQ(a.free_extent_count(), 1u);
  EXPECT_EQ(a.largest_free_extent(), 3 * 4096u);
  a.Free(o[0]);
  a.Free(o[4]);
  EXPECT_EQ(a.free_extent_count(), 1u);
  EXPECT_EQ(a.largest_free_extent(), 5 * 4096u);
}

TEST(AllocatorTest, BestFitPicksSmallestSufficientHole) {
  // Layout: [h3 3p][a 1p][h1 1p][b 1p][h2 2p][c 1p][rest]
  Allocator a(64 * 4096);
  uint64_t h3 = *a.Allocate(3 * 4096);
  uint64_t x = *a.Allocate(4096);
  uint64_t h1 = *a.Allocate(4096);
  uint64_t y = *a.Allocate(4096);
  uint64_t h2 = *a.Allocate(2 * 4096);
  uint64_t z = *a.Allocate(4096);
  (void)x, (void)y, (void)z;
  a.Free(h3);
  a.Free(h1);
  a.Free(h2);
  EXPECT_EQ(a.Allocate(2 * 4096), std::optional<uint64_t>(h2));
  EXPECT_EQ(a.Allocate(4096), std::optional<uint64_t>(h1));
  EXPECT_EQ(a.Allocate(2 * 4096), std::optional<uint64_t>(h3));  // front of the 3-page hole
  EXPECT_EQ(a.Allocate(4096), std::optional<uint64_t>(h3 + 2 * 4096));
}

TEST(AllocatorDeathTest, RejectsBadAlignment) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(Allocator(kMiB, 100), "power of two");
  EXPECT_DEATH(Allocator(kMiB, 32), "power of two");
}

TEST(AllocatorDeathTest, DoubleFreeAndUnknownOffsetAbort) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Allocator a(kMiB);
  uint64_t off = *a.Allocate(8192);
  EXPECT_DEATH(a.Free(off + 4096), "not a live allocation \\(offset 4096\\)");
  a.Free(off);
  EXPECT_DEATH(a.Free(off), "not a live allocation \\(offset 0\\)");
  EXPECT_DEATH((void)a.AllocatedSize(off), "not a live allocation");
}

// Reference: one bool per alignment unit. Free extents are the maximal runs
// of free units; best fit is the shortest run that is long enough, lowest
// offset first. The allocator must agree on every placement.
class ReferenceArena {
 public:
  explicit ReferenceArena(size_t units) : used_(units, false) {}

  std::vector<std::pair<size_t, size_t>> FreeRuns() const {  // (start, length)
    std::vector<std::pair<size_t, size_t>> runs;
    for (size_t i = 0; i < used_.size();) {
      if (used_[i]) {
        ++i;
        continue;
      }
      size_t j = i;
      while (j < used_.size() && !used_[j]) ++j;
      runs.emplace_back(i, j - i);
      i = j;
    }
    return runs;
  }

  std::optional<size_t> BestFit(size_t units) const {
    std::optional<std::pair<size_t, size_t>> best;
    for (auto run : FreeRuns()) {
      if (run.second >= units && (!best || run.second < best->second)) best = run;
    }
    if (!best) return std::nullopt;
    return best->first;
  }

  void Mark(size_t start, size_t units, bool used) {
    for (size_t i = start; i < start + units; ++i) {
      ASSERT_NE(used_[i], used) << "unit " << i << (used ? " allocated twice" : " freed twice");
      used_[i] = used;
    }
  }

 private:
  std::vector<bool> used_;
};

TEST(AllocatorTest, RandomizedAgainstReference) {
  constexpr uint64_t kAlign = 64;
  constexpr size_t kUnits = 512;
  Allocator a(kUnits * kAlign, kAlign);
  ReferenceArena ref(kUnits);
  std::map<uint64_t, uint64_t> live;  // offset -> rounded size
  std::mt19937_64 rng(12345);
  std::uniform_int_distribution<uint64_t> bytes_dist(1, 40 * kAlign);

  for (int step = 0; step < 20000; ++step) {
    if (live.empty() || rng() % 100 < 55) {
      uint64_t bytes = bytes_dist(rng);
      size_t units = (bytes + kAlign - 1) / kAlign;
      std::optional<size_t> want = ref.BestFit(units);
      std::optional<uint64_t> got = a.Allocate(bytes);
      ASSERT_EQ(got.has_value(), want.has_value()) << "step " << step << " bytes " << bytes;
      if (got) {
        ASSERT_EQ(*got, *want * kAlign) << "step " << step;
        ASSERT_EQ(a.AllocatedSize(*got), units * kAlign);
        ref.Mark(*want, units, true);
        live[*got] = units * kAlign;
      }
    } else {
      auto it = live.begin();
      std::advance(it, rng() % live.size());
      ref.Mark(it->first / kAlign, it->second / kAlign, false);
      a.Free(it->first);
      live.erase(it);
    }
    uint64_t used = 0;
    for (auto& [off, size] : live) used += size;
    auto runs = ref.FreeRuns();
    uint64_t largest = 0;
    for (auto& run : runs) largest = std::max<uint64_t>(largest, run.second * kAlign);
    ASSERT_EQ(a.used_bytes(), used) << "step " << step;
    ASSERT_EQ(a.free_bytes(), a.capacity() - used);
    ASSERT_EQ(a.allocation_count(), live.size());
    ASSERT_EQ(a.free_extent_count(), runs.size()) << "step " << step;
    ASSERT_EQ(a.largest_free_extent(), largest) << "step " << step;
  }
}

// KV-cache-like churn over a 1 GiB arena: fill until an allocation fails,
// record the utilisation at that moment, free a random ~30%, repeat.
// Sizes: half whole 2 MiB blocks (1..16 of them), half any size in
// [64 KiB, 32 MiB].
TEST(AllocatorTest, ChurnKeepsUtilisationHighAtFailure) {
  Allocator a(kGiB);
  std::mt19937_64 rng(2024);
  std::uniform_int_distribution<uint64_t> blocks(1, 16);
  std::uniform_int_distribution<uint64_t> odd(64 * kKiB, 32 * kMiB);
  auto next_size = [&] { return rng() % 2 ? blocks(rng) * 2 * kMiB : odd(rng); };

  std::vector<uint64_t> live;
  constexpr int kRounds = 4000;
  double sum = 0, min = 1, sum_free = 0, sum_largest = 0;
  size_t max_extents = 0;
  for (int round = 0; round < kRounds; ++round) {
    while (auto off = a.Allocate(next_size())) live.push_back(*off);
    double util = static_cast<double>(a.used_bytes()) / a.capacity();
    sum += util;
    min = std::min(min, util);
    sum_free += static_cast<double>(a.free_bytes()) / kMiB;
    sum_largest += static_cast<double>(a.largest_free_extent()) / kMiB;
    max_extents = std::max(max_extents, a.free_extent_count());

    std::shuffle(live.begin(), live.end(), rng);
    size_t to_free = live.size() * 3 / 10;
    for (size_t i = 0; i < to_free; ++i) a.Free(live[live.size() - 1 - i]);
    live.resize(live.size() - to_free);
  }
  double mean = sum / kRounds;
  std::printf("churn: 1 GiB arena, %d rounds: utilisation at failure mean %.4f min %.4f; "
              "at failure free %.1f MiB in extents of at most %.1f MiB (means); "
              "max free extents %zu\n",
              kRounds, mean, min, sum_free / kRounds, sum_largest / kRounds, max_extents);
  RecordProperty("churn_mean_utilisation", std::to_string(mean));
  RecordProperty("churn_min_utilisation", std::to_string(min));
  EXPECT_GE(mean, 0.85);
}

}  // namespace
}  // namespace ptstore::storage

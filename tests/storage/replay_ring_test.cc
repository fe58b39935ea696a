// The publisher's replay ring (storage/events/replay_ring.h): what it keeps
// is always the newest batches, byte for byte, within both bounds, and it
// gives up no more than the wrap's waste.
#include "storage/events/replay_ring.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace ptstore::storage {
namespace {

std::string Payload(uint64_t seq, size_t len) {
  std::string p(len, '\0');
  for (size_t i = 0; i < len; i++) p[i] = static_cast<char>((seq * 131 + i * 7) & 0xff);
  return p;
}

std::vector<uint64_t> Kept(const ReplayRing& r, uint64_t from, const std::vector<std::string>& added) {
  std::vector<uint64_t> seqs;
  r.ForEachFrom(from, [&](uint64_t seq, std::string_view payload) {
    EXPECT_EQ(payload, added[seq]) << "batch " << seq << " changed in the ring";
    seqs.push_back(seq);
  });
  return seqs;
}

TEST(ReplayRingTest, KeepsTheNewestBatchesIntactWithinBothBounds) {
  constexpr uint64_t kBytes = 64 << 10, kMaxLen = 5000;
  for (uint64_t max_batches : {uint64_t{8}, uint64_t{100000}}) {
    ReplayRing r;
    ASSERT_TRUE(r.Init(max_batches, kBytes).ok());
    r.Prefault();
    std::mt19937_64 rng(max_batches);
    std::vector<std::string> added;
    for (uint64_t seq = 0; seq < 3000; seq++) {
      added.push_back(Payload(seq, 1 + rng() % kMaxLen));
      r.Add(seq, added.back());
      const std::vector<uint64_t> kept = Kept(r, 0, added);
      ASSERT_FALSE(kept.empty());
      EXPECT_EQ(kept.back(), seq) << "the newest batch is kept";
      for (size_t i = 1; i < kept.size(); i++) ASSERT_EQ(kept[i], kept[i - 1] + 1) << "a run of the newest";
      EXPECT_EQ(r.batches(), kept.size());
      EXPECT_EQ(r.oldest_seq(), kept.front());
      EXPECT_LE(r.batches(), max_batches);
      uint64_t bytes = 0;
      for (uint64_t s : kept) bytes += added[s].size();
      EXPECT_EQ(r.bytes(), bytes);
      EXPECT_LE(bytes, kBytes);
      // What it gave up beyond the bounds is at most the wrap's waste: the
      // batch before the oldest kept would not have fitted with it.
      if (kept.size() < max_batches && kept.front() > 0) {
        EXPECT_GT(bytes + added[kept.front() - 1].size() + kMaxLen, kBytes) << "at batch " << seq;
      }
    }
    EXPECT_EQ(Kept(r, 2997, added).front(), 2997u) << "ForEachFrom starts at its seq";
  }
}

TEST(ReplayRingTest, ABatchLargerThanTheRingIsNotKeptAndTheOthersStay) {
  ReplayRing r;
  ASSERT_TRUE(r.Init(100, 1 << 20).ok());
  const std::string small(1000, 'a'), huge((1 << 20) + 1, 'b');
  r.Add(1, small);
  r.Add(2, huge);
  r.Add(3, small);
  std::vector<uint64_t> seqs;
  r.ForEachFrom(0, [&](uint64_t seq, std::string_view) { seqs.push_back(seq); });
  EXPECT_EQ(seqs, (std::vector<uint64_t>{1, 3}));
}

TEST(ReplayRingTest, NoBatchesOrNoBytesIsRefused) {
  ReplayRing a, b;
  EXPECT_FALSE(a.Init(0, 1 << 20).ok());
  EXPECT_FALSE(b.Init(10, 0).ok());
}

}  // namespace
}  // namespace ptstore::storage

// Tests of rendezvous hashing (core/rendezvous.h): determinism, uniformity,
// minimal disruption when nodes leave or join, independence of the order of
// the node list.
#include "core/rendezvous.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <vector>

namespace ptstore::core {
namespace {

std::vector<ChainKey> RandomRoots(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ChainKey> roots(n);
  for (auto& r : roots) r = ChainKey{rng(), rng()};
  return roots;
}

TEST(RendezvousTest, PinnedWeight) {
  // The weight is part of the cluster's contract: every node must compute the
  // same shard. XXH3_64 of hi LE ‖ lo LE ‖ id LE; pinned so a change shows.
  ChainKey root{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  uint64_t w0 = RendezvousWeight(root, 0);
  EXPECT_EQ(w0, 0xf3891bc0f559aff4ULL);
  EXPECT_EQ(RendezvousWeight(root, 7), 0xd555a3ed03599994ULL);
  EXPECT_NE(w0, RendezvousWeight(root, 1));
  EXPECT_NE(w0, RendezvousWeight(ChainKey{root.hi, root.lo ^ 1}, 0));
}

TEST(RendezvousTest, DeterministicAndAgreesWithShardOf) {
  std::vector<uint32_t> nodes = {0, 1, 2, 3, 4, 5, 6, 7};
  for (const ChainKey& root : RandomRoots(1000, 1)) {
    std::vector<uint32_t> order = RendezvousOrder(root, nodes);
    EXPECT_EQ(order, RendezvousOrder(root, nodes));
    ASSERT_EQ(order.size(), nodes.size());
    std::vector<uint32_t> sorted = order;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, nodes);
    EXPECT_EQ(ShardOf(root, nodes), order[0]);
    for (size_t i = 1; i < order.size(); ++i) {
      EXPECT_GE(RendezvousWeight(root, order[i - 1]), RendezvousWeight(root, order[i]));
    }
    // Failover: without the shard, the next node in order takes over.
    std::vector<uint32_t> rest(order.begin() + 1, order.end());
    EXPECT_EQ(ShardOf(root, rest), order[1]);
  }
}

TEST(RendezvousTest, EmptyAndSingle) {
  ChainKey root{1, 2};
  EXPECT_EQ(ShardOf(root, {}), kNoShard);
  EXPECT_TRUE(RendezvousOrder(root, {}).empty());
  std::vector<uint32_t> one = {42};
  EXPECT_EQ(ShardOf(root, one), 42u);
  EXPECT_EQ(RendezvousOrder(root, one), one);
}

TEST(RendezvousTest, Uniform) {
  constexpr size_t kRoots = 100000;
  std::vector<uint32_t> nodes = {0, 1, 2, 3, 4, 5, 6, 7};
  std::map<uint32_t, size_t> count;
  for (const ChainKey& root : RandomRoots(kRoots, 2)) ++count[ShardOf(root, nodes)];
  ASSERT_EQ(count.size(), nodes.size());
  const double expect = static_cast<double>(kRoots) / nodes.size();
  for (auto [node, n] : count) {
    EXPECT_NEAR(static_cast<double>(n), expect, 0.05 * expect) << "node " << node;
  }
  // Sparse, large ids (the top of the 24-bit range) spread as well.
  std::vector<uint32_t> sparse = {7, 1000, 65536, 16777215};
  std::map<uint32_t, size_t> c2;
  for (const ChainKey& root : RandomRoots(kRoots, 3)) ++c2[ShardOf(root, sparse)];
  for (auto [node, n] : c2) EXPECT_NEAR(static_cast<double>(n), kRoots / 4.0, 0.05 * kRoots / 4.0) << node;
}

TEST(RendezvousTest, RemovingANodeMovesOnlyItsRoots) {
  std::vector<uint32_t> nodes = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<uint32_t> without3 = {0, 1, 2, 4, 5, 6, 7};
  size_t moved = 0;
  for (const ChainKey& root : RandomRoots(20000, 4)) {
    uint32_t before = ShardOf(root, nodes);
    uint32_t after = ShardOf(root, without3);
    if (before != 3) {
      EXPECT_EQ(after, before);
    } else {
      ++moved;
      EXPECT_EQ(after, RendezvousOrder(root, nodes)[1]);
    }
  }
  EXPECT_NEAR(static_cast<double>(moved), 20000.0 / 8, 0.1 * 20000.0 / 8);
}

TEST(RendezvousTest, AddingANodeMovesAboutOneInNPlusOne) {
  std::vector<uint32_t> nodes = {0, 1, 2, 3, 4, 5, 6, 7};
  std::vector<uint32_t> grown = nodes;
  grown.push_back(8);
  constexpr size_t kRoots = 20000;
  size_t moved = 0;
  for (const ChainKey& root : RandomRoots(kRoots, 5)) {
    uint32_t before = ShardOf(root, nodes);
    uint32_t after = ShardOf(root, grown);
    if (after != before) {
      ++moved;
      EXPECT_EQ(after, 8u) << "a root moved between two old nodes";
    }
  }
  EXPECT_NEAR(static_cast<double>(moved), kRoots / 9.0, 0.1 * kRoots / 9.0);
}

TEST(RendezvousTest, OrderOfTheNodeListDoesNotMatter) {
  std::vector<uint32_t> nodes = {3, 9, 1, 12, 5, 0, 7};
  std::mt19937 rng(6);
  for (const ChainKey& root : RandomRoots(500, 7)) {
    std::vector<uint32_t> order = RendezvousOrder(root, nodes);
    uint32_t shard = ShardOf(root, nodes);
    for (int k = 0; k < 3; ++k) {
      std::vector<uint32_t> shuffled = nodes;
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      EXPECT_EQ(RendezvousOrder(root, shuffled), order);
      EXPECT_EQ(ShardOf(root, shuffled), shard);
    }
  }
}

}  // namespace
}  // namespace ptstore::core

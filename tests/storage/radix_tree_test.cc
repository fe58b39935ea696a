// Tests of the radix index on its own: matching, insertion, splits (metadata
// only), chain-key names, collisions and subtree removal.
//
// The tree never touches bytes, so the tests keep a model "arena": the bytes
// of every tensor as the Store would have written them, generated from the
// prefix (each token's KV depends on every token before it, as real KV does).
// Every match is turned back into bytes through the nodes' (tensor, offset,
// length) slices and compared with the expected KV byte for byte.
#include "storage/index/radix_tree.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <vector>

#include <gtest/gtest.h>

#include "tests/storage/kv_fixture.h"
#include <pthread.h>

#include "ptstore/keys.h"
#include "storage/index/tensor.h"

namespace ptstore::storage {
namespace {

using namespace testkv;  // NOLINT: the shared test fixture

class RadixTreeTest : public ::testing::Test {
 protected:
  RadixTreeTest() : tree_(kBt, kBb), root_key_(RootKey("radix-test", "")) {}

  struct RemoveCounts {
    uint64_t nodes = 0;
    uint64_t bytes = 0;
    std::vector<RadixNode*> order;
  };

  std::vector<ChainKey> Keys(std::span<const uint32_t> tokens) const { return ChainKeys(root_key_, tokens, kBt); }

  Match Longest(const std::vector<uint32_t>& tokens) const { return tree_.Longest(tokens, Keys(tokens)); }

  Tensor* NewTensor(uint64_t start_block, uint64_t blocks) {
    auto t = std::make_unique<Tensor>();
    t->id = TensorId::Make(NodeId{0}, ++seq_);
    t->start_token = start_block * kBt;
    t->tokens = blocks * kBt;
    t->bytes = blocks * kBb;
    t->EnterIndex();
    Tensor* raw = t.get();
    tensors_.push_back(std::move(t));
    return raw;
  }

  // What the Store does on a save: a new tensor for the blocks past the
  // longest match, hung below it. Returns the new node (nullptr if nothing new).
  RadixNode* Save(const std::vector<uint32_t>& tokens, const Times& times = {}) {
    const std::vector<ChainKey> keys = Keys(tokens);
    Match m = tree_.Longest(tokens, keys);
    if (m.blocks >= keys.size()) return nullptr;
    Tensor* t = NewTensor(m.blocks, keys.size() - m.blocks);
    bytes_[t] = Kv(tokens, m.blocks * kBt, keys.size() * kBt);
    RadixNode* n = tree_.Insert(m, std::span<const uint32_t>(tokens).first(keys.size() * kBt), keys, t, times);
    EXPECT_NE(n, nullptr);
    return n;
  }

  // The bytes a load of this match would read, slice by slice.
  std::vector<uint8_t> Gather(const Match& m) const {
    std::vector<uint8_t> out;
    for (const MatchStep& s : m.path) {
      const std::vector<uint8_t>& tb = bytes_.at(s.node->tensor);
      EXPECT_LE(s.node->offset + s.blocks * kBb, tb.size());
      out.insert(out.end(), tb.begin() + s.node->offset, tb.begin() + s.node->offset + s.blocks * kBb);
    }
    return out;
  }

  // The whole-block KV that `tokens` should load, up to `blocks` blocks.
  static std::vector<uint8_t> Expected(const std::vector<uint32_t>& tokens, uint64_t blocks) {
    return Kv(tokens, 0, blocks * kBt);
  }

  // What the Store does when a node leaves the index.
  void OnRemoved(RadixNode* n) {
    auto& chain = n->tensor->nodes;
    auto it = std::find(chain.begin(), chain.end(), n);
    ASSERT_NE(it, chain.end()) << "removed node missing from its tensor's chain";
    chain.erase(it);
  }

  RemoveCounts Remove(RadixNode* n) {
    RemoveCounts c;
    tree_.RemoveSubtree(n, [&](RadixNode* x) {
      OnRemoved(x);
      c.nodes++;
      c.bytes += x->length;
      c.order.push_back(x);
    });
    return c;
  }

  // Walks the whole tree and checks every structural invariant against a
  // recomputation from first principles.
  void CheckInvariants() {
    size_t count = 0;
    std::map<const Tensor*, std::vector<const RadixNode*>> nodes_of;
    std::map<const Tensor*, uint32_t> foreign;
    struct Item {
      const RadixNode* node;
      std::vector<uint32_t> path;  // tokens of the prefix ending at node
    };
    std::vector<Item> stack{{tree_.root(), {}}};
    while (!stack.empty()) {
      Item it = std::move(stack.back());
      stack.pop_back();
      for (const auto& [k, child] : it.node->children) {
        const RadixNode* c = child.get();
        ++count;
        SCOPED_TRACE("node at block " + std::to_string(c->start_block) + " named " + c->key.ToHex());
        EXPECT_EQ(k, c->first_key);
        EXPECT_EQ(c->parent, it.node);
        ASSERT_NE(c->tensor, nullptr);
        ASSERT_FALSE(c->tokens.empty());
        ASSERT_EQ(c->tokens.size() % kBt, 0u);
        EXPECT_EQ(c->start_block, it.path.size() / kBt);
        std::vector<uint32_t> path = Cat(it.path, c->tokens);
        const std::vector<ChainKey> keys = Keys(path);
        EXPECT_EQ(c->first_key, keys[c->start_block]) << "a node is filed under the chain key of its first block";
        EXPECT_EQ(c->key, keys.back()) << "a node is named by the chain key of its last block";
        EXPECT_EQ(tree_.FindByKey(c->key), c);
        EXPECT_EQ(c->length, c->tokens.size() / kBt * kBb);
        EXPECT_EQ(c->offset, (c->start_block * kBt - c->tensor->start_token) * kBpt)
            << "a node's slice starts where its first token sits in the tensor";
        const std::vector<uint8_t>& tb = bytes_.at(c->tensor);
        ASSERT_LE(c->offset + c->length, tb.size());
        EXPECT_TRUE(std::equal(tb.begin() + c->offset, tb.begin() + c->offset + c->length,
                               Kv(path, c->start_block * kBt, path.size()).begin()))
            << "the node's slice does not hold the KV of its tokens";
        nodes_of[c->tensor].push_back(c);
        if (it.node->tensor != nullptr && it.node->tensor != c->tensor) foreign[it.node->tensor]++;
        stack.push_back({c, std::move(path)});
      }
    }
    EXPECT_EQ(count, tree_.node_count());
    for (const auto& t : tensors_) {
      SCOPED_TRACE("tensor " + std::to_string(t->id.seq()));
      std::vector<const RadixNode*> expect = nodes_of[t.get()];
      std::vector<const RadixNode*> have(t->nodes.begin(), t->nodes.end());
      std::vector<const RadixNode*> a = expect, b = have;
      std::sort(a.begin(), a.end());
      std::sort(b.begin(), b.end());
      EXPECT_EQ(a, b) << "tensor->nodes must list exactly the nodes that point into it";
      for (size_t i = 1; i < have.size(); ++i) {
        EXPECT_EQ(have[i]->parent, have[i - 1]) << "a tensor's nodes form one chain, in prefix order";
        EXPECT_EQ(have[i]->offset, have[i - 1]->offset + have[i - 1]->length);
      }
      if (!have.empty()) {
        EXPECT_EQ(t->foreign_children, foreign[t.get()]);
      }
    }
  }

  RadixTree tree_;
  ChainKey root_key_;
  uint64_t seq_ = 0;
  std::vector<std::unique_ptr<Tensor>> tensors_;
  std::map<const Tensor*, std::vector<uint8_t>> bytes_;
};

TEST_F(RadixTreeTest, EmptyTreeMatchesNothing) {
  auto a = RandomTokens(1, 40);
  Match m = Longest(a);
  EXPECT_EQ(m.blocks, 0u);
  EXPECT_TRUE(m.path.empty());
  EXPECT_FALSE(m.partial_last);
  EXPECT_EQ(tree_.node_count(), 0u);
  EXPECT_EQ(tree_.FindByKey(Keys(a).back()), nullptr);
  Match none = tree_.Longest({}, {});
  EXPECT_EQ(none.blocks, 0u);
}

TEST_F(RadixTreeTest, InsertThenMatchExactShorterAndLonger) {
  auto a = RandomTokens(1, 8 * kBt);
  RadixNode* n = Save(a);
  ASSERT_NE(n, nullptr);
  const auto keys = Keys(a);
  EXPECT_EQ(tree_.node_count(), 1u);
  EXPECT_EQ(n->parent, tree_.root());
  EXPECT_EQ(n->first_key, keys.front());
  EXPECT_EQ(n->key, keys.back());
  EXPECT_EQ(n->start_block, 0u);
  EXPECT_EQ(n->tokens, a);
  EXPECT_EQ(n->offset, 0u);
  EXPECT_EQ(n->length, 8 * kBb);
  EXPECT_EQ(n->tensor->nodes, std::vector<RadixNode*>{n});
  EXPECT_EQ(tree_.FindByKey(keys.back()), n);
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    EXPECT_EQ(tree_.FindByKey(keys[i]), nullptr) << "only the last block's key names an increment";
  }

  Match exact = Longest(a);
  EXPECT_EQ(exact.blocks, 8u);
  EXPECT_FALSE(exact.partial_last);
  ASSERT_EQ(exact.path.size(), 1u);
  EXPECT_EQ(Gather(exact), Expected(a, 8));

  auto shorter = Head(a, 3 * kBt + 2);  // 3 whole blocks and a partial one
  Match s = tree_.Longest(Head(a, 3 * kBt), Keys(shorter));
  EXPECT_EQ(s.blocks, 3u);
  EXPECT_TRUE(s.partial_last);
  EXPECT_EQ(Gather(s), Expected(a, 3));

  auto longer = Cat(a, RandomTokens(2, 5 * kBt));
  Match l = Longest(longer);
  EXPECT_EQ(l.blocks, 8u);
  EXPECT_FALSE(l.partial_last);
  EXPECT_EQ(Gather(l), Expected(longer, 8));

  // Same length, different tokens: a miss (the first block differs).
  auto other = RandomTokens(3, 8 * kBt);
  EXPECT_EQ(Longest(other).blocks, 0u);
  // Same first block, different second block.
  auto fork = Cat(Head(a, kBt), RandomTokens(4, 7 * kBt));
  Match f = Longest(fork);
  EXPECT_EQ(f.blocks, 1u);
  EXPECT_TRUE(f.partial_last);
  CheckInvariants();
}

TEST_F(RadixTreeTest, BranchInsideNodeSplitsMetadataOnly) {
  auto a = RandomTokens(1, 8 * kBt);
  RadixNode* lower = Save(a);
  ASSERT_NE(lower, nullptr);
  Tensor* t = lower->tensor;
  const std::vector<uint8_t> t_bytes = bytes_.at(t);
  lower->hits = 7;

  auto b = Cat(Head(a, 3 * kBt), RandomTokens(2, 5 * kBt));
  RadixNode* nb = Save(b);
  ASSERT_NE(nb, nullptr);
  const auto ka = Keys(a), kb = Keys(b);

  EXPECT_EQ(tree_.node_count(), 3u);
  RadixNode* upper = lower->parent;
  ASSERT_NE(upper, tree_.root());
  EXPECT_EQ(upper->parent, tree_.root());
  // Upper: blocks [0, 3) of the same tensor, named by the key at block 2.
  EXPECT_EQ(upper->tensor, t);
  EXPECT_EQ(upper->offset, 0u);
  EXPECT_EQ(upper->length, 3 * kBb);
  EXPECT_EQ(upper->start_block, 0u);
  EXPECT_EQ(upper->first_key, ka[0]);
  EXPECT_EQ(upper->key, ka[2]);
  EXPECT_EQ(upper->key, kb[2]);
  EXPECT_EQ(upper->tokens, Head(a, 3 * kBt));
  EXPECT_EQ(upper->hits, 7u) << "every hit on the lower part passed through the upper part";
  EXPECT_EQ(tree_.FindByKey(ka[2]), upper);
  // Lower: blocks [3, 8) of the same tensor, same name as before.
  EXPECT_EQ(lower->tensor, t);
  EXPECT_EQ(lower->offset, 3 * kBb);
  EXPECT_EQ(lower->length, 5 * kBb);
  EXPECT_EQ(lower->start_block, 3u);
  EXPECT_EQ(lower->first_key, ka[3]);
  EXPECT_EQ(lower->key, ka[7]);
  EXPECT_EQ(tree_.FindByKey(ka[7]), lower);
  // The branch: its own tensor from offset 0, below the upper part.
  EXPECT_EQ(nb->parent, upper);
  EXPECT_NE(nb->tensor, t);
  EXPECT_EQ(nb->offset, 0u);
  EXPECT_EQ(nb->length, 5 * kBb);
  EXPECT_EQ(nb->start_block, 3u);
  EXPECT_EQ(nb->first_key, kb[3]);
  EXPECT_EQ(nb->key, kb[7]);
  EXPECT_EQ(upper->children.size(), 2u);
  // The tensor's chain is in prefix order; the branch is its only foreign child.
  EXPECT_EQ(t->nodes, (std::vector<RadixNode*>{upper, lower}));
  EXPECT_EQ(t->foreign_children, 1u);
  EXPECT_EQ(nb->tensor->foreign_children, 0u);
  // The bytes did not move.
  EXPECT_EQ(bytes_.at(t), t_bytes);

  Match ma = Longest(a);
  EXPECT_EQ(ma.blocks, 8u);
  ASSERT_EQ(ma.path.size(), 2u);
  EXPECT_EQ(ma.path[0].node, upper);
  EXPECT_EQ(ma.path[1].node, lower);
  EXPECT_EQ(Gather(ma), Expected(a, 8));
  Match mb = Longest(b);
  EXPECT_EQ(mb.blocks, 8u);
  ASSERT_EQ(mb.path.size(), 2u);
  EXPECT_EQ(mb.path[1].node, nb);
  EXPECT_EQ(Gather(mb), Expected(b, 8));
  CheckInvariants();
}

TEST_F(RadixTreeTest, ASplitKeepsTheTimesOfBothHalvesAndStampsTheirCtime) {
  auto a = RandomTokens(1, 8 * kBt);
  RadixNode* lower = Save(a, Times{100, 150, 100});
  ASSERT_NE(lower, nullptr);
  auto b = Cat(Head(a, 3 * kBt), RandomTokens(2, 5 * kBt));
  RadixNode* nb = Save(b, Times{200, 200, 200});
  ASSERT_NE(nb, nullptr);
  RadixNode* upper = lower->parent;
  ASSERT_NE(upper, tree_.root());
  // Stored at 100, used at 150 (both halves), split at 200.
  EXPECT_EQ(upper->times, (Times{100, 150, 200}));
  EXPECT_EQ(lower->times, (Times{100, 150, 200}));
  EXPECT_EQ(nb->times, (Times{200, 200, 200}));
  // A split stamped earlier than the last change leaves ctime as it is.
  RadixNode* up2 = tree_.Split(lower, 2, Keys(a)[4], 50);
  EXPECT_EQ(up2->times, (Times{100, 150, 200}));
  EXPECT_EQ(lower->times, (Times{100, 150, 200}));
  CheckInvariants();
}

TEST_F(RadixTreeTest, BranchAtNodeBoundaryHangsBelowWithoutSplit) {
  auto a = RandomTokens(1, 4 * kBt);
  RadixNode* na = Save(a);
  auto b = Cat(a, RandomTokens(2, 4 * kBt));
  auto c = Cat(a, RandomTokens(3, 2 * kBt));
  RadixNode* nb = Save(b);
  RadixNode* nc = Save(c);
  ASSERT_TRUE(na && nb && nc);
  EXPECT_EQ(tree_.node_count(), 3u);
  EXPECT_EQ(na->length, 4 * kBb) << "no split at a node boundary";
  EXPECT_EQ(nb->parent, na);
  EXPECT_EQ(nc->parent, na);
  EXPECT_EQ(na->tensor->foreign_children, 2u);
  EXPECT_EQ(Save(a), nullptr) << "nothing new to insert";
  EXPECT_EQ(Gather(Longest(b)), Expected(b, 8));
  EXPECT_EQ(Gather(Longest(c)), Expected(c, 6));
  CheckInvariants();
}

TEST_F(RadixTreeTest, RepeatedSplitsKeepTheChainInPrefixOrder) {
  auto a = RandomTokens(1, 12 * kBt);
  RadixNode* last = Save(a);
  Tensor* t = last->tensor;
  std::vector<std::vector<uint32_t>> branches;
  for (uint64_t at : {8u, 3u, 5u, 1u, 11u}) {
    branches.push_back(Cat(Head(a, at * kBt), RandomTokens(100 + at, 3 * kBt)));
    ASSERT_NE(Save(branches.back()), nullptr);
    CheckInvariants();
  }
  // Nodes of `a` now cover blocks [0,1) [1,3) [3,5) [5,8) [8,11) [11,12).
  const auto ka = Keys(a);
  std::vector<uint64_t> ends;
  for (RadixNode* n : t->nodes) ends.push_back(n->start_block + n->tokens.size() / kBt);
  EXPECT_EQ(ends, (std::vector<uint64_t>{1, 3, 5, 8, 11, 12}));
  for (RadixNode* n : t->nodes) {
    EXPECT_EQ(n->key, ka[n->start_block + n->tokens.size() / kBt - 1]);
    EXPECT_EQ(n->tensor, t);
  }
  EXPECT_EQ(t->foreign_children, 5u);
  EXPECT_EQ(tree_.node_count(), 6u + 5u);
  Match ma = Longest(a);
  EXPECT_EQ(ma.blocks, 12u);
  EXPECT_EQ(ma.path.size(), 6u);
  EXPECT_EQ(Gather(ma), Expected(a, 12));
  for (const auto& b : branches) {
    Match mb = Longest(b);
    EXPECT_EQ(mb.blocks, b.size() / kBt);
    EXPECT_EQ(Gather(mb), Expected(b, b.size() / kBt));
  }
}

TEST_F(RadixTreeTest, SplitOfASplitNodeBelowAnotherTensor) {
  // root -> A (T1) -> B (T2, 6 blocks); branch inside B twice.
  auto a = RandomTokens(1, 2 * kBt);
  auto ab = Cat(a, RandomTokens(2, 6 * kBt));
  Save(a);
  RadixNode* nb = Save(ab);
  Tensor* t2 = nb->tensor;
  auto x = Cat(Head(ab, 5 * kBt), RandomTokens(3, kBt));  // branch at block 5 of the prefix (3 inside B)
  auto y = Cat(Head(ab, 3 * kBt), RandomTokens(4, kBt));  // branch at block 3 (1 inside B)
  Save(x);
  Save(y);
  CheckInvariants();
  ASSERT_EQ(t2->nodes.size(), 3u);
  EXPECT_EQ(t2->nodes[0]->offset, 0u);
  EXPECT_EQ(t2->nodes[0]->length, 1 * kBb);
  EXPECT_EQ(t2->nodes[1]->offset, 1 * kBb);
  EXPECT_EQ(t2->nodes[1]->length, 2 * kBb);
  EXPECT_EQ(t2->nodes[2]->offset, 3 * kBb);
  EXPECT_EQ(t2->nodes[2]->length, 3 * kBb);
  EXPECT_EQ(t2->nodes[0]->parent->tensor->foreign_children, 1u) << "A still has one foreign child";
  EXPECT_EQ(t2->foreign_children, 2u);
  for (const auto& p : {a, ab, x, y}) EXPECT_EQ(Gather(Longest(p)), Expected(p, p.size() / kBt));
}

// Keys only choose a candidate child; tokens decide. Forge keys so that a
// different prompt claims the stored prompt's keys: it must never match more
// than its tokens share.
TEST_F(RadixTreeTest, ForgedFirstBlockKeyCollisionIsAMiss) {
  auto a = RandomTokens(1, 6 * kBt);
  Save(a);
  auto b = RandomTokens(2, 6 * kBt);  // same length, different tokens
  ASSERT_NE(Head(a, kBt), Head(b, kBt));
  Match m = tree_.Longest(b, Keys(a));  // b's tokens, a's keys: every key collides
  EXPECT_EQ(m.blocks, 0u);
  EXPECT_TRUE(m.path.empty());
  EXPECT_EQ(Longest(b).blocks, 0u);
}

TEST_F(RadixTreeTest, ForgedKeysInsideANodeOnlyShortenTheMatch) {
  auto a = RandomTokens(1, 6 * kBt);
  Save(a);
  // Differs from `a` only in block 2 (one token), with all of a's keys.
  auto q = a;
  q[2 * kBt + 1] ^= 1;
  Match m = tree_.Longest(q, Keys(a));
  EXPECT_EQ(m.blocks, 2u) << "token comparison inside the node must stop at the first differing block";
  EXPECT_TRUE(m.partial_last);
  EXPECT_EQ(Gather(m), Expected(q, 2));
  // And the last block only.
  auto r = a;
  r.back() ^= 1;
  Match mr = tree_.Longest(r, Keys(a));
  EXPECT_EQ(mr.blocks, 5u);
  EXPECT_EQ(Gather(mr), Expected(r, 5));
}

TEST_F(RadixTreeTest, ForgedChildKeyCollisionStopsAtTheParent) {
  // root -> X (2 blocks) -> {Y, Z}
  auto x = RandomTokens(1, 2 * kBt);
  auto xy = Cat(x, RandomTokens(2, 2 * kBt));
  auto xz = Cat(x, RandomTokens(3, 2 * kBt));
  Save(xy);
  Save(xz);
  ASSERT_EQ(tree_.node_count(), 3u);
  auto xw = Cat(x, RandomTokens(4, 2 * kBt));
  Match m = tree_.Longest(xw, Keys(xy));  // w's first key collides with y's
  EXPECT_EQ(m.blocks, 2u);
  EXPECT_FALSE(m.partial_last);
  ASSERT_EQ(m.path.size(), 1u);
  EXPECT_EQ(m.path[0].node->key, Keys(x).back());
  EXPECT_EQ(Gather(m), Expected(xw, 2));
}

// A save that follows a collision-miss must not corrupt the tree: the slot
// for its first key is taken by a node with other tokens, so there is nowhere
// to put it. Insert must refuse (nullptr) and leave the index as it was.
TEST_F(RadixTreeTest, InsertAfterForgedCollisionLeavesTheTreeIntact) {
  auto a = RandomTokens(1, 4 * kBt);
  Save(a);
  auto b = RandomTokens(2, 4 * kBt);
  const auto forged = Keys(a);
  Match m = tree_.Longest(b, forged);
  ASSERT_EQ(m.blocks, 0u);
  Tensor* u = NewTensor(0, 4);
  bytes_[u] = Kv(b, 0, b.size());
  RadixNode* n = tree_.Insert(m, b, forged, u, Times{});
  EXPECT_EQ(n, nullptr);
  EXPECT_TRUE(u->nodes.empty());
  EXPECT_EQ(tree_.node_count(), 1u);
  EXPECT_EQ(tree_.FindByKey(forged.back())->tensor->id, tensors_[0]->id);
  EXPECT_EQ(Gather(Longest(a)), Expected(a, 4));
  CheckInvariants();
}

TEST_F(RadixTreeTest, InsertAfterForgedCollisionInsideANodeLeavesTheDataIntact) {
  auto a = RandomTokens(1, 4 * kBt);
  Save(a);
  // Shares 2 blocks with `a`; its block 2 differs but is given a's key.
  auto b = Cat(Head(a, 2 * kBt), RandomTokens(2, 2 * kBt));
  auto forged = Keys(b);
  forged[2] = Keys(a)[2];
  Match m = tree_.Longest(b, forged);
  ASSERT_EQ(m.blocks, 2u);
  ASSERT_TRUE(m.partial_last);
  Tensor* u = NewTensor(2, 2);
  bytes_[u] = Kv(b, 2 * kBt, b.size());
  RadixNode* n = tree_.Insert(m, b, forged, u, Times{});
  EXPECT_EQ(n, nullptr);
  EXPECT_TRUE(u->nodes.empty());
  EXPECT_EQ(Gather(Longest(a)), Expected(a, 4));
  EXPECT_EQ(Longest(b).blocks, 2u);
  CheckInvariants();
}

// Walk (keys hashed only where it steps) finds what Longest (every key
// hashed first) finds, on a random tree of shared prefixes, splits and
// removals, for stored prompts, their heads, longer prompts, prompts that
// branch inside an increment or at its end, and misses.
TEST_F(RadixTreeTest, WalkMatchesWhatLongestMatchesWithoutHashingEveryBlock) {
  std::mt19937_64 rng(4242);
  std::vector<std::vector<uint32_t>> prompts;
  const auto base = RandomTokens(1, 40 * kBt);
  for (int i = 0; i < 200; ++i) {
    std::vector<uint32_t> p;
    if (!prompts.empty() && rng() % 4 != 0) {
      const auto& from = prompts[rng() % prompts.size()];
      p = Head(from, (rng() % (from.size() / kBt) + 1) * kBt);  // a stored head, maybe inside an increment
    } else {
      p = Head(base, (rng() % 8 + 1) * kBt);
    }
    const size_t more = rng() % 6;
    for (size_t b = 0; b < more; ++b) p = Cat(p, RandomTokens(1000 + i * 10 + b, kBt));
    if (rng() % 3 == 0) p.resize(p.size() + rng() % kBt, 7);  // a partial block at the end
    if (rng() % 2 == 0) Save(p);
    prompts.push_back(p);
    if (rng() % 25 == 0 && tree_.node_count() > 1) {  // remove a random increment's subtree
      Match m = Longest(prompts[rng() % prompts.size()]);
      if (!m.path.empty()) Remove(m.path[rng() % m.path.size()].node);
    }
  }
  ASSERT_GT(tree_.node_count(), 20u);
  uint64_t checked = 0, hits = 0, partial = 0;
  for (int i = 0; i < 2000; ++i) {
    std::vector<uint32_t> q = prompts[rng() % prompts.size()];
    switch (rng() % 4) {
      case 0: break;
      case 1: q = Head(q, std::min(q.size(), (rng() % 12) * kBt)); break;
      case 2: q = Cat(q, RandomTokens(50000 + i, (rng() % 3 + 1) * kBt)); break;
      case 3:
        if (!q.empty()) q[rng() % q.size()] ^= 1;  // branches somewhere
        break;
    }
    const std::vector<uint32_t> whole = Head(q, q.size() / kBt * kBt);
    const Match want = Longest(whole);
    const Match got = tree_.Walk(whole, root_key_);
    ASSERT_EQ(got.blocks, want.blocks) << "query " << i;
    ASSERT_EQ(got.partial_last, want.partial_last) << "query " << i;
    ASSERT_EQ(got.path.size(), want.path.size()) << "query " << i;
    for (size_t s = 0; s < got.path.size(); ++s) {
      EXPECT_EQ(got.path[s].node, want.path[s].node) << "query " << i << " step " << s;
      EXPECT_EQ(got.path[s].blocks, want.path[s].blocks) << "query " << i << " step " << s;
    }
    EXPECT_EQ(Gather(got), Expected(whole, got.blocks));
    ++checked;
    hits += got.blocks > 0;
    partial += got.partial_last;
  }
  EXPECT_GT(hits, 500u);     // the queries reached into the tree
  EXPECT_GT(partial, 100u);  // and stopped inside increments
  EXPECT_LT(hits, checked);  // and missed too
  // A tree of another namespace (another root key) matches nothing.
  EXPECT_EQ(tree_.Walk(Head(base, 8 * kBt), RootKey("another", "")).blocks, 0u);
}

TEST_F(RadixTreeTest, RemoveSubtreeRemovesDescendantsChildrenFirst) {
  auto a = RandomTokens(1, 2 * kBt);
  auto ab = Cat(a, RandomTokens(2, 4 * kBt));
  auto abc = Cat(ab, RandomTokens(3, 2 * kBt));
  auto abd = Cat(ab, RandomTokens(4, 3 * kBt));
  auto ae = Cat(a, RandomTokens(5, 2 * kBt));
  auto abf = Cat(Head(ab, 3 * kBt), RandomTokens(6, 2 * kBt));  // splits B after its first block
  for (const auto* p : {&a, &ab, &abc, &abd, &ae, &abf}) ASSERT_NE(Save(*p), nullptr);
  CheckInvariants();
  ASSERT_EQ(tree_.node_count(), 7u);  // A, B-upper, B-lower, C, D, E, F
  Tensor* ta = tree_.FindByKey(Keys(a).back())->tensor;
  EXPECT_EQ(ta->foreign_children, 2u);  // B-upper and E

  RadixNode* b_upper = tree_.FindByKey(Keys(ab)[2]);
  ASSERT_NE(b_upper, nullptr);
  std::map<RadixNode*, RadixNode*> parent_of;
  std::set<RadixNode*> expect_removed;
  {
    std::vector<RadixNode*> st{b_upper};
    while (!st.empty()) {
      RadixNode* n = st.back();
      st.pop_back();
      expect_removed.insert(n);
      parent_of[n] = n->parent;
      for (auto& [k, c] : n->children) st.push_back(c.get());
    }
  }
  ASSERT_EQ(expect_removed.size(), 5u);  // B-upper, B-lower, C, D, F
  std::vector<ChainKey> removed_keys;
  for (RadixNode* n : expect_removed) removed_keys.push_back(n->key);

  RemoveCounts rc = Remove(b_upper);
  EXPECT_EQ(rc.nodes, 5u);
  EXPECT_EQ(rc.bytes, (4 + 2 + 3 + 2) * kBb);
  EXPECT_EQ(std::set<RadixNode*>(rc.order.begin(), rc.order.end()), expect_removed);
  // Children before parents: a node comes after all of its descendants.
  for (size_t j = 0; j < rc.order.size(); ++j) {
    for (RadixNode* p = parent_of[rc.order[j]]; parent_of.count(p); p = parent_of[p]) {
      auto at = std::find(rc.order.begin(), rc.order.end(), p);
      EXPECT_GT(at - rc.order.begin(), static_cast<ptrdiff_t>(j)) << "an ancestor was reported before its descendant";
    }
  }
  EXPECT_EQ(tree_.node_count(), 2u);
  for (const ChainKey& k : removed_keys) EXPECT_EQ(tree_.FindByKey(k), nullptr);
  EXPECT_EQ(ta->foreign_children, 1u) << "only E is left below A";
  CheckInvariants();
  // Ancestor and sibling stay, byte-exact; the removed prefixes now stop at A.
  EXPECT_EQ(Gather(Longest(ae)), Expected(ae, 4));
  EXPECT_EQ(Longest(abc).blocks, 2u);
  EXPECT_EQ(Longest(abd).blocks, 2u);
  EXPECT_EQ(Longest(abf).blocks, 2u);
  EXPECT_EQ(Gather(Longest(abc)), Expected(abc, 2));
}

TEST_F(RadixTreeTest, RemoveLowerPartOfATensorKeepsTheUpperPart) {
  auto a = RandomTokens(1, 8 * kBt);
  RadixNode* lower = Save(a);
  Tensor* t = lower->tensor;
  auto below = Cat(a, RandomTokens(2, 2 * kBt));  // a foreign child of the lower part
  auto branch = Cat(Head(a, 3 * kBt), RandomTokens(3, 2 * kBt));
  Save(below);
  Save(branch);
  EXPECT_EQ(t->foreign_children, 2u);
  ASSERT_EQ(lower->start_block, 3u);
  RemoveCounts rc = Remove(lower);
  EXPECT_EQ(rc.nodes, 2u);
  EXPECT_EQ(rc.bytes, 5 * kBb + 2 * kBb);
  EXPECT_EQ(t->nodes.size(), 1u);
  EXPECT_EQ(t->foreign_children, 1u) << "the branch below the upper part remains";
  CheckInvariants();
  Match m = Longest(a);
  EXPECT_EQ(m.blocks, 3u);
  EXPECT_FALSE(m.partial_last);
  EXPECT_EQ(Gather(m), Expected(a, 3));
  EXPECT_EQ(Gather(Longest(branch)), Expected(branch, 5));
  // The upper part can grow a new lower part again.
  ASSERT_NE(Save(a), nullptr);
  EXPECT_EQ(Gather(Longest(a)), Expected(a, 8));
  CheckInvariants();
}

TEST_F(RadixTreeTest, RemoveTopLevelNodeEmptiesTheTree) {
  auto a = RandomTokens(1, 3 * kBt);
  auto b = RandomTokens(2, 3 * kBt);
  RadixNode* na = Save(a);
  Save(Cat(a, RandomTokens(3, kBt)));
  Save(b);
  Remove(na);
  EXPECT_EQ(tree_.node_count(), 1u);
  EXPECT_EQ(Longest(a).blocks, 0u);
  EXPECT_EQ(Gather(Longest(b)), Expected(b, 3));
  CheckInvariants();
}

// Runs `fn` on a thread with a `stack_bytes` stack (a fixed size, so the
// test does not depend on the shell's ulimit -s).
void RunOnSmallStack(size_t stack_bytes, std::function<void()> fn) {
  pthread_attr_t attr;
  ASSERT_EQ(pthread_attr_init(&attr), 0);
  ASSERT_EQ(pthread_attr_setstacksize(&attr, stack_bytes), 0);
  pthread_t th;
  auto trampoline = [](void* arg) -> void* {
    (*static_cast<std::function<void()>*>(arg))();
    return nullptr;
  };
  ASSERT_EQ(pthread_create(&th, &attr, trampoline, &fn), 0);
  pthread_join(th, nullptr);
  pthread_attr_destroy(&attr);
}

// The removal walk is iterative because a conversation can grow a very deep
// chain (one increment per turn). Destroying the detached subtree must not
// recurse once per level either: 60k levels on a 1 MiB stack (a recursive
// teardown needs ~35 B a level, so a per-level recursion overflows it).
TEST_F(RadixTreeTest, RemovingAVeryDeepChainDoesNotRecursePerLevel) {
  constexpr size_t kDepth = 60000;
  std::vector<uint32_t> tokens = RandomTokens(9, kDepth * kBt);
  const std::vector<ChainKey> keys = Keys(tokens);
  // Append one block at a time below the previous node (built directly:
  // Longest over the whole chain on every step would be quadratic).
  Match m;
  RadixNode* first = nullptr;
  for (size_t i = 0; i < kDepth; ++i) {
    Tensor* t = NewTensor(i, 1);
    RadixNode* n = tree_.Insert(m, std::span<const uint32_t>(tokens).first((i + 1) * kBt),
                                std::span<const ChainKey>(keys).first(i + 1), t, Times{});
    ASSERT_NE(n, nullptr);
    if (first == nullptr) first = n;
    m.path.assign(1, MatchStep{n, 1});
    m.blocks = i + 1;
    m.partial_last = false;
  }
  ASSERT_EQ(tree_.node_count(), kDepth);
  Match full = tree_.Longest(tokens, keys);
  EXPECT_EQ(full.blocks, kDepth);
  uint64_t removed = 0;
  RunOnSmallStack(1 << 20, [&] {
    tree_.RemoveSubtree(first, [&](RadixNode* n) {
      n->tensor->nodes.clear();
      ++removed;
    });
  });
  EXPECT_EQ(removed, kDepth);
  EXPECT_EQ(tree_.node_count(), 0u);
  EXPECT_EQ(tree_.Longest(tokens, keys).blocks, 0u);
}

}  // namespace
}  // namespace ptstore::storage

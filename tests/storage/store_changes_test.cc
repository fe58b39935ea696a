// The change log of a store (storage/cache/change_log.h, Client::Changes): what a
// save, a split, a use, a removal, an eviction and a namespace's creation
// and drop log, in order; positions and epochs; a log that wrapped says
// `lost`.
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "storage/cache/change_log.h"
#include "storage/cache/store.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

using namespace testkv;  // NOLINT: the shared test fixture

class StoreChangesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    StoreOptions o;
    o.arena_bytes = 1 * kMiB;
    o.prefault = false;
    o.try_huge_pages = false;
    auto s = Store::Open(o);
    ASSERT_OK(s);
    store_ = std::move(*s);
    epoch_ = store_->Changes(0, 0, 0).epoch;
    ASSERT_OK(store_->CreateNamespace("m", SmallLayout(), "", 0, 0, 0755, false));
  }
  void Save(const Tokens& t) {
    std::vector<uint8_t> kv = Kv(t, 0, t.size());
    ASSERT_OK(store_->Save("m", t, kv.data(), kv.size(), 0));
  }
  // Everything logged since the last call.
  std::vector<TreeChange> Take() {
    TreeChanges c = store_->Changes(epoch_, next_, 1 << 20);
    EXPECT_FALSE(c.lost);
    EXPECT_FALSE(c.more);
    EXPECT_EQ(c.next, next_ + c.changes.size());
    next_ = c.next;
    return c.changes;
  }
  PrefixNodeInfo At(uint64_t end) {
    auto tree = store_->ListTree("m", ChainKey{}, true);
    EXPECT_OK(tree);
    for (const auto& n : *tree) {
      if (n.start_token + n.tokens == end) return n;
    }
    ADD_FAILURE() << "no increment ends at " << end;
    return {};
  }

  std::unique_ptr<Store> store_;
  uint64_t epoch_ = 0, next_ = 0;
};

TEST_F(StoreChangesTest, AFirstCallIsLostAndSaysWhereTheLogIs) {
  TreeChanges c = store_->Changes(0, 0, 10);
  EXPECT_TRUE(c.lost);
  EXPECT_TRUE(c.changes.empty());
  EXPECT_EQ(c.epoch, epoch_);
  EXPECT_EQ(c.next, 1u);  // the namespace's creation
  EXPECT_TRUE(store_->Changes(epoch_ + 1, 0, 10).lost);  // another epoch: another ptstored
  EXPECT_TRUE(store_->Changes(epoch_, 2, 10).lost);      // a position past the end
  std::vector<TreeChange> first = Take();
  ASSERT_EQ(first.size(), 1u);
  EXPECT_EQ(first[0], (TreeChange{ChangeKind::kNamespace, "m", {}, {}}));
}

TEST_F(StoreChangesTest, SavesSplitsUsesRemovalsAndDropsAreLoggedInOrder) {
  Take();
  Tokens a = RandomTokens(5, 64);
  Save(a);
  const ChainKey ka = At(64).key;
  EXPECT_EQ(Take(), (std::vector<TreeChange>{{ChangeKind::kAdded, "m", ka, {}}}));
  // A branch inside `a` splits it: a moves below its new upper half.
  Save(Cat(Head(a, 32), RandomTokens(6, 16)));
  const ChainKey up = At(32).key, kb = At(48).key;
  std::vector<TreeChange> split = Take();
  ASSERT_GE(split.size(), 4u);
  EXPECT_EQ(split[0], (TreeChange{ChangeKind::kRemoved, "m", ka, {}}));
  EXPECT_EQ(split[1], (TreeChange{ChangeKind::kAdded, "m", up, {}}));
  EXPECT_EQ(split[2], (TreeChange{ChangeKind::kAdded, "m", ka, up}));
  EXPECT_EQ(split[3], (TreeChange{ChangeKind::kAdded, "m", kb, up}));
  // A use (a lookup) logs the deepest increment it matched; a listing logs nothing.
  ASSERT_OK(store_->ListTree("m", ChainKey{}, true));
  ASSERT_OK(store_->Increment("m", ka, false, false, 1));
  EXPECT_TRUE(Take().empty());
  ASSERT_OK(store_->Lookup("m", a));
  EXPECT_EQ(Take(), (std::vector<TreeChange>{{ChangeKind::kTimes, "m", ka, up}}));
  ASSERT_OK(store_->SetTimes("m", kb, 1, 0));
  EXPECT_EQ(Take(), (std::vector<TreeChange>{{ChangeKind::kTimes, "m", kb, up}}));
  // A removal logs every increment it took, children first.
  ASSERT_OK(store_->RemoveByKey("m", up));
  std::vector<TreeChange> removed = Take();
  ASSERT_EQ(removed.size(), 3u);
  EXPECT_EQ(removed[2], (TreeChange{ChangeKind::kRemoved, "m", up, {}}));
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(removed[i].kind, ChangeKind::kRemoved);
    EXPECT_EQ(removed[i].parent, up);
  }
  // Dropping a namespace is one change, whatever it held.
  Save(RandomTokens(7, 64));
  Take();
  ASSERT_OK(store_->DropNamespace("m"));
  EXPECT_EQ(Take(), (std::vector<TreeChange>{{ChangeKind::kNamespace, "m", {}, {}}}));
}

TEST_F(StoreChangesTest, EvictionsAreRemovals) {
  Take();
  // 1 MiB of arena and 64 KiB prompts: the 17th save evicts the oldest.
  std::vector<ChainKey> saved;
  for (int i = 0; i < 40; ++i) Save(RandomTokens(100 + i, 64 * kKiB / SmallLayout().BytesPerToken()));
  size_t added = 0, removed = 0;
  for (const TreeChange& c : Take()) {
    added += c.kind == ChangeKind::kAdded;
    removed += c.kind == ChangeKind::kRemoved;
  }
  EXPECT_EQ(added, 40u);
  EXPECT_GT(removed, 0u);
  EXPECT_EQ(added - removed, store_->GetNamespace("m")->prefixes);
}

TEST(ChangeLogTest, BoundedRepeatedUsesOnceAndMore) {
  ChangeLog log(4, 77);
  EXPECT_EQ(log.epoch(), 77u);
  for (int i = 0; i < 3; ++i) log.Append(ChangeKind::kTimes, "m", ChainKey{1, 1}, {});  // one use, three times
  EXPECT_EQ(log.next(), 1u);
  for (uint64_t i = 0; i < 5; ++i) log.Append(ChangeKind::kAdded, "m", ChainKey{2, i}, {});
  EXPECT_EQ(log.next(), 6u);
  EXPECT_TRUE(log.Since(77, 1, 10).lost);  // fell out of the last 4
  TreeChanges c = log.Since(77, 2, 3);
  EXPECT_FALSE(c.lost);
  EXPECT_TRUE(c.more);
  ASSERT_EQ(c.changes.size(), 3u);
  EXPECT_EQ(c.changes[0].key, (ChainKey{2, 1}));
  EXPECT_EQ(c.next, 5u);
  c = log.Since(77, c.next, 3);
  EXPECT_FALSE(c.more);
  ASSERT_EQ(c.changes.size(), 1u);
  EXPECT_EQ(c.next, 6u);
  EXPECT_TRUE(log.Since(77, 6, 3).changes.empty());
}

}  // namespace
}  // namespace ptstore::storage

// Removal from the node store (storage/cache/store.h Remove, RemoveByKey,
// DropNamespace): an increment goes with its descendants only, a split keeps
// the other half, and removed bytes that are pinned stay intact until the
// pin is released.
#include "tests/storage/store_testing.h"

namespace ptstore::storage {
namespace {

using namespace store_testing;  // NOLINT: the shared fixture (StoreTest)

// ------------------------------------------------------------------- removal

TEST_F(StoreTest, RemoveTakesTheIncrementAndItsDescendantsOnly) {
  Tokens a = RandomTokens(1, 4 * kBt);
  Tokens ab = Cat(a, RandomTokens(2, 4 * kBt));
  Tokens abd = Cat(ab, RandomTokens(3, 2 * kBt));
  Tokens ac = Cat(a, RandomTokens(4, 3 * kBt));
  Tokens other = RandomTokens(5, 2 * kBt);
  for (const Tokens* p : {&a, &ab, &abd, &ac, &other}) Save(*p);
  const StoreStats before = store_->Stats();
  ASSERT_EQ(before.tensors, 5u);
  Result<RemoveResult> r = store_->Remove("ns", Cat(ab, RandomTokens(9, 3)));  // trailing partial block ignored
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 2u);
  EXPECT_EQ(r->bytes, 6 * kBb);
  StoreStats after = store_->Stats();
  EXPECT_EQ(after.tensors, 3u);
  EXPECT_EQ(after.prefix_nodes, 3u);
  EXPECT_EQ(after.used_bytes, before.used_bytes - 2 * 4096) << "both tensors freed";
  // Descendants gone; ancestor and siblings intact, byte-exact.
  ExpectStored(abd, 4 * kBt);
  ExpectStored(ab, 4 * kBt);
  ExpectStored(ac, 7 * kBt);
  ExpectStored(other, 2 * kBt);
  EXPECT_EQ(store_->GetNamespace("ns")->bytes, (4 + 3 + 2) * kBb);
  // The freed prefix can be saved again.
  EXPECT_EQ(Save(abd).new_bytes, 6 * kBb);
  ExpectStored(abd, 10 * kBt);
  ExpectStatsConsistent();
}

TEST_F(StoreTest, RemoveEndingInsideAnIncrementTakesThatWholeIncrement) {
  Tokens a = RandomTokens(1, 4 * kBt);
  Tokens ae = Cat(a, RandomTokens(2, 8 * kBt));
  Save(a);
  Save(ae);
  Result<RemoveResult> r = store_->Remove("ns", Head(ae, 7 * kBt));  // ends 3 blocks into E
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 1u);
  EXPECT_EQ(r->bytes, 8 * kBb);
  ExpectStored(ae, 4 * kBt);
  r = store_->Remove("ns", Head(a, 2 * kBt));
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 1u);
  ExpectStored(a, 0);
  EXPECT_EQ(store_->Stats().used_bytes, 0u);
}

TEST_F(StoreTest, RemovingOneHalfOfASplitKeepsTheOtherHalfAndTheTensor) {
  Tokens p = RandomTokens(1, 8 * kBt);
  Tokens q = Cat(Head(p, 3 * kBt), RandomTokens(2, 2 * kBt));
  Save(p);
  Save(q);
  const uint64_t used = store_->Stats().used_bytes;
  Result<RemoveResult> r = store_->Remove("ns", p);  // the lower half of p's tensor
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 1u);
  EXPECT_EQ(r->bytes, 5 * kBb);
  EXPECT_EQ(store_->Stats().used_bytes, used) << "the upper half still points into the tensor";
  ExpectStored(p, 3 * kBt);
  ExpectStored(q, 5 * kBt);
  ASSERT_OK(store_->Remove("ns", q));
  ExpectStored(q, 3 * kBt);
  ASSERT_OK(store_->Remove("ns", Head(p, 3 * kBt)));
  ExpectStored(p, 0);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.tensors, 0u);
  EXPECT_EQ(s.prefix_nodes, 0u);
  EXPECT_EQ(store_->GetNamespace("ns")->bytes, 0u);
  EXPECT_EQ(store_->GetNamespace("ns")->prefixes, 0u);
}

TEST_F(StoreTest, RemoveOfWhatIsNotStoredIsAnError) {
  Tokens a = RandomTokens(1, 4 * kBt);
  Save(a);
  EXPECT_ERROR(store_->Remove("ns", RandomTokens(2, 4 * kBt)), Code::kNotFound);
  EXPECT_ERROR(store_->Remove("ns", Cat(a, RandomTokens(3, kBt))), Code::kNotFound)
      << "a prefix longer than what is stored";
  EXPECT_ERROR(store_->Remove("ns", Head(a, kBt - 1)), Code::kInvalidArgument);
  EXPECT_ERROR(store_->Remove("ns", {}), Code::kInvalidArgument);
  ExpectStored(a, 4 * kBt);
}

TEST_F(StoreTest, RemoveByKeyTakesTheNamedIncrementAndItsSubtree) {
  Tokens a = RandomTokens(1, 4 * kBt);
  Tokens ab = Cat(a, RandomTokens(2, 4 * kBt));
  Tokens ac = Cat(a, RandomTokens(3, 4 * kBt));
  Tokens acd = Cat(ac, RandomTokens(4, 4 * kBt));
  for (const Tokens* p : {&a, &ab, &ac, &acd}) Save(*p);
  EXPECT_ERROR(store_->RemoveByKey("ns", KeyAt(ac, 5)), Code::kNotFound)
      << "a key inside an increment names nothing";
  EXPECT_ERROR(store_->RemoveByKey("ns", ChainKey{1, 2}), Code::kNotFound);
  Result<RemoveResult> r = store_->RemoveByKey("ns", KeyAt(ac, 7));
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 2u);
  EXPECT_EQ(r->bytes, 8 * kBb);
  ExpectStored(acd, 4 * kBt);
  ExpectStored(ab, 8 * kBt);
  EXPECT_ERROR(store_->RemoveByKey("ns", KeyAt(ac, 7)), Code::kNotFound) << "already gone";
  r = store_->RemoveByKey("ns", KeyAt(a, 3));
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 2u);
  EXPECT_EQ(store_->Stats().used_bytes, 0u);
  EXPECT_TRUE(Tree().empty());
}

TEST_F(StoreTest, RemovedButPinnedBytesStayIntactUntilRelease) {
  Tokens a = RandomTokens(1, 6 * kBt);
  Tokens ab = Cat(a, RandomTokens(2, 6 * kBt));
  Save(a);
  Save(ab);
  Result<PrefixResult> p = store_->Pin("ns", ab, kSession);
  ASSERT_OK(p);
  const StoreStats before = store_->Stats();
  ASSERT_OK(store_->Remove("ns", a));
  EXPECT_EQ(Matched(ab), 0u) << "removed from the index at once";
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.used_bytes, before.used_bytes) << "pinned bytes are not freed";
  EXPECT_EQ(s.pinned_bytes, before.pinned_bytes);
  EXPECT_EQ(s.tensors, 2u);
  EXPECT_EQ(s.prefix_nodes, 0u);
  // New saves must not land on the pinned bytes.
  for (int i = 0; i < 50; ++i) Save(RandomTokens(100 + i, 12 * kBt));
  EXPECT_TRUE(Read(p->extents) == Kv(ab, 0, 12 * kBt)) << "pinned bytes were overwritten after removal";
  EXPECT_OK(store_->Release(p->lease_id, kSession));
  s = store_->Stats();
  EXPECT_EQ(s.pinned_bytes, 0u);
  EXPECT_EQ(s.tensors, 50u);
  EXPECT_EQ(s.used_bytes, 50 * 12 * kBb);
  ExpectStatsConsistent();
}

TEST_F(StoreTest, DropNamespaceRemovesEverythingInIt) {
  ASSERT_OK(store_->CreateNamespace("keep", SmallLayout(), "", 0, 0, 0755, false));
  Tokens a = RandomTokens(1, 4 * kBt);
  Tokens ab = Cat(a, RandomTokens(2, 3 * kBt));
  Tokens c = RandomTokens(3, 2 * kBt);
  Save(a);
  Save(ab);
  Save(c);
  Save(a, 0, CacheClass::kOwned, "keep");
  Result<PrefixResult> pinned = store_->Pin("ns", ab, kSession);
  ASSERT_OK(pinned);
  Result<RemoveResult> r = store_->DropNamespace("ns");
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 3u);
  EXPECT_EQ(r->bytes, 9 * kBb);
  EXPECT_ERROR(store_->GetNamespace("ns"), Code::kNotFound);
  EXPECT_ERROR(store_->Lookup("ns", a), Code::kNotFound);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.namespaces, 1u);
  EXPECT_EQ(s.tensors, 3u) << "two pinned tensors outlive the namespace, plus keep's";
  EXPECT_TRUE(Read(pinned->extents) == Kv(ab, 0, 7 * kBt));
  EXPECT_OK(store_->Release(pinned->lease_id, kSession));
  s = store_->Stats();
  EXPECT_EQ(s.tensors, 1u);
  EXPECT_EQ(s.used_bytes, 4096u);
  ExpectStored(a, 4 * kBt, "keep");
  // The name can be used again, with another layout; nothing old is visible.
  Layout other = SmallLayout();
  other.block_tokens = 8;
  ASSERT_OK(store_->CreateNamespace("ns", other, "", 0, 0, 0755, false));
  EXPECT_EQ(Matched(ab), 0u);
  EXPECT_EQ(store_->GetNamespace("ns")->bytes, 0u);
  ExpectStatsConsistent();
}

}  // namespace
}  // namespace ptstore::storage

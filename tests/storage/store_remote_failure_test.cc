// Failing and `gone` fetches in the node store's cluster part
// (storage/cache/store_remote.cc): a failing fetch cuts the pin at the first
// remote block, `gone` drops the increment and what hangs below it, a short
// fetch serves its head. Fixture: store_remote_testing.h.
#include "tests/storage/store_remote_testing.h"

namespace ptstore::storage {
namespace {

using namespace store_remote_testing;  // NOLINT: the shared fixture (StoreRemoteTest)

// ----------------------------------------------------------------- failures

TEST_F(StoreRemoteTest, FailingFetchCutsThePinAtTheFirstRemoteBlock) {
  const Tokens p = RandomTokens(40, 6 * kBt);
  SaveOn(0, p);
  SaveOn(1, Head(p, 2 * kBt));  // node 1 holds blocks [0,2) itself
  EXPECT_EQ(Share(0, 1, p), 6u);
  EXPECT_EQ(ResolveOn(1, p).ranges, (std::vector<OwnedRange>{{2, 1}, {6, 0}}));

  F(1).SetDead(0, true);
  EXPECT_EQ(PinCheck(1, p), 2 * kBt);  // the local part, no error
  EXPECT_EQ(F(1).calls(), 1u);          // tried once, not again in the same pin
  StoreStats s = N(1).Stats();
  EXPECT_EQ(s.remote_fetch_failures, 1u);
  EXPECT_EQ(s.remote_fetches, 0u);
  EXPECT_EQ(s.replica_bytes, 0u);
  EXPECT_EQ(s.pinned_bytes, 0u);
  // A failure is not a removal: the remote increment stays known.
  EXPECT_EQ(Matched(1, p), p.size());
  EXPECT_EQ(N(1).Stats().remote_tensors, 1u);

  // Every owner down: same, through the other failure path.
  F(1).SetDead(0, false);
  F(1).FailAll(true);
  EXPECT_EQ(PinCheck(1, p), 2 * kBt);
  EXPECT_EQ(N(1).Stats().remote_fetch_failures, 2u);

  // Back: the next pin fetches it.
  F(1).FailAll(false);
  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(N(1).Stats().remote_fetches, 1u);
}

TEST_F(StoreRemoteTest, FailingFetchOfAFullyRemotePromptIsAMiss) {
  const Tokens p = RandomTokens(41, 3 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  F(1).FailAll(true);
  Result<PrefixResult> pin = N(1).Pin(kNs, p, kSession);
  ASSERT_OK(pin);
  EXPECT_EQ(pin->matched_tokens, 0u);
  EXPECT_EQ(pin->lease_id, 0u);
  EXPECT_TRUE(pin->extents.empty());
  EXPECT_EQ(N(1).Stats().misses, 1u);
  EXPECT_EQ(N(1).Stats().used_bytes, 0u);
  // LoadCopy too.
  std::vector<uint8_t> buf(p.size() * kBpt);
  Result<uint64_t> got = N(1).LoadCopy(kNs, p, buf.data(), buf.size());
  ASSERT_OK(got);
  EXPECT_EQ(*got, 0u);
}

TEST_F(StoreRemoteTest, WithoutAFetcherRemoteBlocksAreMisses) {
  const Tokens p = RandomTokens(42, 3 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  N(1).SetFetcher(nullptr);
  EXPECT_EQ(PinCheck(1, p), 0u);
  EXPECT_EQ(F(1).calls(), 0u);
  N(1).SetFetcher(&F(1));
  EXPECT_EQ(PinCheck(1, p), p.size());
}

TEST_F(StoreRemoteTest, GoneDropsTheIncrementAndWhatHangsBelowIt) {
  const Tokens p = RandomTokens(43, 6 * kBt);
  const Tokens q = Cat(p, RandomTokens(44, 2 * kBt));  // node 1's own blocks [6,8) below
  SaveOn(0, p);
  SaveOn(1, Head(p, 2 * kBt));
  EXPECT_EQ(Share(0, 1, p), 6u);
  SaveResult s = SaveOn(1, q, /*first_block=*/6);
  EXPECT_EQ(s.stored_tokens, 2 * kBt);
  EXPECT_EQ(Matched(1, q), q.size());
  EXPECT_EQ(Tree(1).size(), 3u);

  // The owner drops blocks [2, ...): its index no longer reaches block 2.
  Result<RemoveResult> rm = N(0).RemoveFrom(kNs, p, 2);
  ASSERT_OK(rm);
  EXPECT_EQ(rm->nodes, 1u);
  EXPECT_EQ(ResolveOn(0, p).blocks, 2u);

  EXPECT_EQ(PinCheck(1, q), 2 * kBt);
  EXPECT_EQ(F(1).calls(), 1u);
  StoreStats st = N(1).Stats();
  EXPECT_EQ(st.remote_fetch_failures, 1u);
  EXPECT_EQ(st.remote_tensors, 0u);
  // The remote increment and node 1's own blocks below it left the index.
  EXPECT_EQ(Matched(1, q), 2 * kBt);
  std::vector<PrefixNodeInfo> tree = Tree(1);
  ASSERT_EQ(tree.size(), 1u);
  EXPECT_EQ(tree[0].tokens, 2 * kBt);
  EXPECT_EQ(st.owned_bytes, 4096u);  // blocks [0,2), one aligned allocation
  EXPECT_EQ(st.pinned_bytes, 0u);
  // Nothing left to fetch.
  EXPECT_EQ(PinCheck(1, q), 2 * kBt);
  EXPECT_EQ(F(1).calls(), 1u);
}

TEST_F(StoreRemoteTest, GoneOfTheFirstOwnerSegmentDropsLaterSegmentsToo) {
  // Node 2 asks node 0 for [0,2) and [4,6) and node 1 for [2,4) in one load;
  // node 0 no longer has any of it: everything from block 0 goes.
  const Tokens p = RandomTokens(45, 6 * kBt);
  SaveOn(0, Head(p, 2 * kBt));
  Share(0, 1, Head(p, 2 * kBt));
  SaveOn(1, Head(p, 4 * kBt));
  Share(1, 0, Head(p, 4 * kBt));
  SaveOn(0, p, 4);
  Share(0, 2, p);
  ASSERT_EQ(Matched(2, p), p.size());
  ASSERT_OK(N(0).RemoveFrom(kNs, p, 0));
  EXPECT_EQ(ResolveOn(0, p).blocks, 0u);
  EXPECT_EQ(PinCheck(2, p), 0u);
  EXPECT_EQ(Matched(2, p), 0u);
  EXPECT_EQ(N(2).Stats().remote_tensors, 0u);
  EXPECT_EQ(N(2).Stats().used_bytes, 0u);
  EXPECT_EQ(N(2).Stats().pinned_bytes, 0u);
}

TEST_F(StoreRemoteTest, AShortFetchServesTheHeadAndDropsWhatTheOwnerNoLongerHolds) {
  // The owner holds only the head of what was asked (the rest went without
  // a removal reaching the requester, as when a node is killed): it sends
  // the head and says the rest is gone; the requester serves the head and
  // drops the rest from its index.
  const Tokens p = RandomTokens(46, 8 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  ASSERT_OK(N(0).RemoveFrom(kNs, p, 5));
  EXPECT_EQ(PinCheck(1, p), 5 * kBt);  // one segment [0,8): its 5 blocks held
  EXPECT_EQ(N(1).Stats().remote_fetch_failures, 0u);
  EXPECT_EQ(N(1).Stats().remote_fetch_bytes, 5 * kBb);
  EXPECT_EQ(Matched(1, p), 5 * kBt);
  EXPECT_EQ(PinCheck(1, p), 5 * kBt);  // transient: fetched again, now as [0,5)
  std::vector<SeenCall> log = F(1).log();
  ASSERT_EQ(log.size(), 2u);
  EXPECT_EQ(log[0].requests.at(0).segments, (std::vector<SeenSegment>{{0, 8}}));
  EXPECT_EQ(log[1].requests.at(0).segments, (std::vector<SeenSegment>{{0, 5}}));
  EXPECT_EQ(N(1).Stats().pinned_bytes, 0u);
}

TEST_F(StoreRemoteTest, ARunWhoseOtherBranchItsOwnerLostStillLoadsTheBranchItHolds) {
  // Node 1 knows node 0's document and first question as one remote
  // increment (one run of node 0's blocks, though node 0 stores two). Node 0
  // loses the question without a removal reaching node 1 (it was killed
  // before the question reached its SSD tier) and saves a second question;
  // node 1 files it below the document, splitting its increment, which keeps
  // the first question as its tail and is fetched named by it. Node 0 holds
  // the document of that: node 1 loads the second question whole (it got
  // none of it before: the soak's final check, docs/soak.md).
  for (uint32_t replicate_after : {0u, 1u, 2u}) {
    SCOPED_TRACE(replicate_after);
    for (uint32_t i : {0u, 1u}) {
      StoreOptions o = NodeOptions(i);
      o.replicate_after = replicate_after;
      Reopen(i, o);
    }
    const Tokens doc = RandomTokens(80 + replicate_after, 3 * kBt);
    const Tokens q1 = Cat(doc, RandomTokens(83 + replicate_after, 3 * kBt));
    const Tokens q2 = Cat(doc, RandomTokens(86 + replicate_after, 2 * kBt));
    SaveOn(0, doc);
    SaveOn(0, q1, 3);
    ASSERT_EQ(Share(0, 1, q1), Blocks(q1));
    ASSERT_EQ(N(1).Stats().remote_tensors, 1u);
    ASSERT_OK(N(0).RemoveFrom(kNs, q1, 3));  // node 1 is not told
    SaveOn(0, q2, 3);
    ASSERT_EQ(Share(0, 1, q2), Blocks(q2));
    EXPECT_EQ(PinCheck(1, q2), q2.size());
    EXPECT_EQ(Matched(1, q1), doc.size());  // the lost question left node 1's index
    EXPECT_EQ(PinCheck(1, q1), doc.size());
    EXPECT_EQ(PinCheck(1, q2), q2.size());
    EXPECT_EQ(N(1).Stats().remote_fetch_failures, 0u);
    EXPECT_EQ(N(1).Stats().pinned_bytes, 0u);
  }
}

}  // namespace
}  // namespace ptstore::storage

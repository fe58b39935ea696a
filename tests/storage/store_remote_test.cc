// Tests of the node store's cluster part (storage/cache/store_remote.cc): three
// real in-process Stores stand for three nodes (node ids 0, 1, 2), and a
// RemoteFetcher serves each FetchRequest the way the cluster does, by
// PinHeld on the owner's Store, copying the pinned bytes from the owner's
// arena into the requester's, and reporting `gone` when the owner does not
// hold the segment's blocks past those it sent (none, or a head of them).
//
// Covered here: Resolve / InsertRemote / fetch-on-pin with byte-exact loads;
// one request per owner with all its segments; prompts that end or branch
// inside a remote increment; PinHeld past remote placeholders; Save past a
// remote prefix; and a multi-threaded smoke test. Replicas (replicate_after,
// replica eviction, quotas) are in store_remote_replica_test.cc, failing and
// `gone` fetches in store_remote_failure_test.cc, RemoveFrom and track_lost /
// TakeLostIncrements / ListOwned in store_remote_removal_test.cc; the fixture
// (StoreRemoteTest, PeerFetcher) in store_remote_testing.h.
//
// Layout (kv_fixture.h): 256 B a token, 4 tokens a block: 1 KiB a block.
// The KV of token i depends on its position and every token id up to it, so
// bytes from another prompt, another owner's wrong range or a wrong arena
// offset never match.
//
// The thread smoke test is most useful under ThreadSanitizer; the tree has
// no TSan option, so configure a separate build dir with
//   cmake -S . -B build-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo
//     -DPTSTORE_BUILD_BENCH=OFF -DCMAKE_CXX_FLAGS=-fsanitize=thread
//     -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread   (one command line)
//   ninja -C build-tsan store_remote_test && build-tsan/tests/storage/store_remote_test
#include <atomic>
#include <chrono>
#include <random>
#include <thread>

#include "tests/storage/store_remote_testing.h"

namespace ptstore::storage {
namespace {

using namespace store_remote_testing;  // NOLINT: the shared fixture (StoreRemoteTest)

// ---------------------------------------------------------------- basics

TEST_F(StoreRemoteTest, ResolveOnTheOwnerNamesItself) {
  const Tokens p = RandomTokens(1, 12 * kBt + 3);
  SaveOn(0, p);
  Ownership o = ResolveOn(0, p);
  EXPECT_EQ(o.blocks, 12u);
  ASSERT_EQ(o.ranges.size(), 1u);
  EXPECT_EQ(o.ranges[0], (OwnedRange{12, 0}));
  EXPECT_EQ(o.held, std::vector<bool>{true});
  // Another node that only knows of it: owner 0, bytes not held there.
  Share(0, 1, p);
  Ownership there = ResolveOn(1, p);
  ASSERT_EQ(there.ranges.size(), 1u);
  EXPECT_EQ(there.ranges[0], (OwnedRange{12, 0}));
  EXPECT_EQ(there.held, std::vector<bool>{false});
  // A longer prompt resolves to the stored part; an unknown one to nothing.
  o = ResolveOn(0, Cat(p, RandomTokens(2, 16)));
  EXPECT_EQ(o.blocks, 12u);
  o = ResolveOn(0, RandomTokens(3, 32));
  EXPECT_EQ(o.blocks, 0u);
  EXPECT_TRUE(o.ranges.empty());
  EXPECT_ERROR(N(0).Resolve("nope", p), Code::kNotFound);
}

TEST_F(StoreRemoteTest, RemoteIncrementIsMatchedListedAndFetchedByteExact) {
  const Tokens p = RandomTokens(10, 12 * kBt);
  SaveOn(0, p);
  EXPECT_EQ(Share(0, 1, p), 12u);
  EXPECT_EQ(N(1).Stats().remote_tensors, 1u);
  EXPECT_EQ(N(1).Stats().used_bytes, 0u);  // metadata only

  // Lookup matches the whole prompt without fetching anything.
  EXPECT_EQ(Matched(1, p), p.size());
  EXPECT_EQ(Matched(1, Cat(p, RandomTokens(11, 9))), p.size());
  EXPECT_EQ(F(1).calls(), 0u);

  // Listed as a remote increment owned by node 0, before the load.
  std::vector<PrefixNodeInfo> tree = Tree(1);
  ASSERT_EQ(tree.size(), 1u);
  EXPECT_EQ(tree[0].tier, kTierRemote);
  EXPECT_EQ(tree[0].tensor.owner().value, 0u);
  EXPECT_EQ(tree[0].cache_class, CacheClass::kReplica);
  EXPECT_EQ(tree[0].tokens, p.size());
  EXPECT_EQ(tree[0].bytes, 12 * kBb);
  EXPECT_EQ(tree[0].start_token, 0u);

  // The owner's own listing names itself.
  std::vector<PrefixNodeInfo> own = Tree(0);
  ASSERT_EQ(own.size(), 1u);
  EXPECT_EQ(own[0].tier, kTierDram);
  EXPECT_EQ(own[0].tensor.owner().value, 0u);

  // Pin: fetched from node 0, byte-exact.
  const uint64_t hits_before = N(1).Stats().hits;  // (lookups count too)
  EXPECT_EQ(PinCheck(1, Cat(p, RandomTokens(12, 2))), p.size());
  EXPECT_EQ(F(1).calls(), 1u);
  EXPECT_EQ(F(1).segments(), 1u);
  std::vector<SeenCall> log = F(1).log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].ns, kNs);
  EXPECT_EQ(log[0].salt, kSalt);
  EXPECT_EQ(log[0].block_tokens, kBt);
  EXPECT_EQ(log[0].tokens, p.size());  // the prompt up to the last segment's end
  ASSERT_EQ(log[0].requests.size(), 1u);
  EXPECT_EQ(log[0].requests[0].owner, 0u);
  EXPECT_EQ(log[0].requests[0].segments, (std::vector<SeenSegment>{{0, 12}}));

  StoreStats s1 = N(1).Stats();
  EXPECT_EQ(s1.remote_fetches, 1u);
  EXPECT_EQ(s1.remote_fetch_bytes, 12 * kBb);
  EXPECT_EQ(s1.remote_hits, 1u);
  EXPECT_EQ(s1.remote_fetch_failures, 0u);
  EXPECT_EQ(s1.hits, hits_before + 1);
  StoreStats s0 = N(0).Stats();
  EXPECT_EQ(s0.peer_served_bytes, 12 * kBb);
  EXPECT_EQ(s0.hits, 0u);  // serving a peer is not a client hit
  EXPECT_EQ(s0.pinned_bytes, 0u);
  EXPECT_EQ(s0.active_leases, 0u);
}

TEST_F(StoreRemoteTest, TreeShowsTheFetchedBytesWhilePinned) {
  const Tokens p = RandomTokens(15, 6 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  Result<PrefixResult> pin = N(1).Pin(kNs, p, kSession);
  ASSERT_OK(pin);
  ASSERT_EQ(pin->matched_tokens, p.size());
  ASSERT_EQ(pin->extents.size(), 1u);
  EXPECT_EQ(pin->extents[0].tensor.owner().value, 0u);
  EXPECT_TRUE(Read(1, pin->extents) == Kv(p, 0, p.size()));
  std::optional<PrefixNodeInfo> n = NodeAt(1, 0);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->tier, kTierRemote | kTierDram);
  EXPECT_EQ(n->pins, 1u);
  EXPECT_GT(N(1).Stats().replica_bytes, 0u);
  EXPECT_GT(N(1).Stats().pinned_bytes, 0u);
  ASSERT_OK(N(1).Release(pin->lease_id, kSession));
  // First load of two (replicate_after = 2): transient, gone with the pin.
  n = NodeAt(1, 0);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->tier, kTierRemote);
  EXPECT_EQ(N(1).Stats().replica_bytes, 0u);
  EXPECT_EQ(N(1).Stats().used_bytes, 0u);
  EXPECT_EQ(N(1).Stats().pinned_bytes, 0u);
}

TEST_F(StoreRemoteTest, InsertRemoteValidatesAndSkipsWhatIsHeld) {
  const Tokens p = RandomTokens(16, 8 * kBt);
  // Ranges must grow within the prompt.
  EXPECT_ERROR(N(1).InsertRemote(kNs, p, std::vector<OwnedRange>{{0, 0}}), Code::kInvalidArgument);
  EXPECT_ERROR(N(1).InsertRemote(kNs, p, std::vector<OwnedRange>{{9, 0}}), Code::kInvalidArgument);
  EXPECT_ERROR(N(1).InsertRemote("nope", p, std::vector<OwnedRange>{{8, 0}}), Code::kNotFound);
  EXPECT_EQ(Matched(1, p), 0u);
  // (A range that does not grow after valid ones is refused too; the valid
  // ranges before it may have been filed by then: they are valid ownership.)
  EXPECT_ERROR(N(1).InsertRemote(kNs, Head(p, 2 * kBt), std::vector<OwnedRange>{{1, 0}, {1, 2}}), Code::kInvalidArgument);
  ASSERT_OK(N(1).RemoveFrom(kNs, p, 0));
  EXPECT_EQ(Matched(1, p), 0u);

  // Ranges naming this node are stale: nothing at or past them is filed.
  Result<uint64_t> r = N(1).InsertRemote(kNs, p, std::vector<OwnedRange>{{2, 0}, {4, 1}, {8, 2}});
  ASSERT_OK(r);
  EXPECT_EQ(*r, 2u);
  EXPECT_EQ(Matched(1, p), 2 * kBt);

  // Blocks held here already are skipped; the rest is filed after them.
  r = N(1).InsertRemote(kNs, p, std::vector<OwnedRange>{{6, 0}, {8, 2}});
  ASSERT_OK(r);
  EXPECT_EQ(*r, 8u);
  std::vector<PrefixNodeInfo> tree = Tree(1);
  ASSERT_EQ(tree.size(), 3u);
  EXPECT_EQ(tree[0].start_token, 0u);
  EXPECT_EQ(tree[0].tensor.owner().value, 0u);
  EXPECT_EQ(tree[1].start_token, 2 * kBt);  // blocks [2, 6) of node 0's range
  EXPECT_EQ(tree[1].tensor.owner().value, 0u);
  EXPECT_EQ(tree[2].start_token, 6 * kBt);
  EXPECT_EQ(tree[2].tensor.owner().value, 2u);
  for (const PrefixNodeInfo& n : tree) EXPECT_EQ(n.tier, kTierRemote);
  // Inserting the same again changes nothing.
  r = N(1).InsertRemote(kNs, p, std::vector<OwnedRange>{{8, 0}});
  ASSERT_OK(r);
  EXPECT_EQ(*r, 8u);
  EXPECT_EQ(Tree(1).size(), 3u);
  EXPECT_EQ(N(1).Stats().remote_tensors, 3u);

  // Resolve reports the owners as filed, adjacent ranges of one owner merged.
  Ownership o = ResolveOn(1, p);
  EXPECT_EQ(o.blocks, 8u);
  EXPECT_EQ(o.ranges, (std::vector<OwnedRange>{{6, 0}, {8, 2}}));
}

// ---------------------------------------------------- one request per owner

TEST_F(StoreRemoteTest, OneRequestPerOwnerCarriesAllItsSegments) {
  // Blocks [0,2) and [4,6) are node 0's, [2,4) node 1's, [6,8) node 2's own.
  const Tokens p = RandomTokens(20, 8 * kBt);
  const Tokens p2 = Head(p, 2 * kBt), p4 = Head(p, 4 * kBt), p6 = Head(p, 6 * kBt);
  SaveOn(0, p2);
  EXPECT_EQ(Share(0, 1, p2), 2u);
  // Node 1 saves past the remote prefix: only blocks [2,4) are new.
  SaveResult s = SaveOn(1, p4);
  EXPECT_EQ(s.matched_tokens, 2 * kBt);
  EXPECT_EQ(s.stored_tokens, 2 * kBt);
  EXPECT_EQ(s.new_bytes, 2 * kBb);
  EXPECT_EQ(Share(1, 0, p4), 4u);
  s = SaveOn(0, p6, /*first_block=*/4);
  EXPECT_EQ(s.matched_tokens, 4 * kBt);
  EXPECT_EQ(s.stored_tokens, 2 * kBt);
  EXPECT_EQ(ResolveOn(0, p6).ranges, (std::vector<OwnedRange>{{2, 0}, {4, 1}, {6, 0}}));
  EXPECT_EQ(Share(0, 2, p6), 6u);
  s = SaveOn(2, p, /*first_block=*/6);
  EXPECT_EQ(s.matched_tokens, 6 * kBt);
  EXPECT_EQ(s.stored_tokens, 2 * kBt);
  EXPECT_EQ(ResolveOn(2, p).ranges, (std::vector<OwnedRange>{{2, 0}, {4, 1}, {6, 0}, {8, 2}}));

  EXPECT_EQ(PinCheck(2, p), p.size());
  EXPECT_EQ(F(2).calls(), 1u);
  EXPECT_EQ(F(2).segments(), 3u);
  std::vector<SeenCall> log = F(2).log();
  ASSERT_EQ(log.size(), 1u);
  ASSERT_EQ(log[0].requests.size(), 2u);
  std::map<uint32_t, std::vector<SeenSegment>> by_owner;
  for (const SeenRequest& r : log[0].requests) {
    EXPECT_FALSE(by_owner.count(r.owner)) << "two requests to node " << r.owner;
    by_owner[r.owner] = r.segments;
  }
  EXPECT_EQ(by_owner[0], (std::vector<SeenSegment>{{0, 2}, {4, 6}}));
  EXPECT_EQ(by_owner[1], (std::vector<SeenSegment>{{2, 4}}));
  EXPECT_EQ(log[0].tokens, 6 * kBt);  // up to the last remote segment's end
  EXPECT_EQ(N(2).Stats().remote_fetches, 3u);
  EXPECT_EQ(N(2).Stats().remote_fetch_bytes, 6 * kBb);
  EXPECT_EQ(N(0).Stats().peer_served_bytes, 4 * kBb);
  EXPECT_EQ(N(1).Stats().peer_served_bytes, 2 * kBb);
}

// ----------------------------------------- prompts that end or branch inside

// A prompt that ends inside a remote increment loads the part it matches:
// a local increment serves any prefix of itself, and so must a remote one.
TEST_F(StoreRemoteTest, PrefixEndingInsideARemoteIncrementLoads) {
  const Tokens p = RandomTokens(25, 8 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  const Tokens head = Head(p, 5 * kBt);
  EXPECT_EQ(Matched(1, head), head.size());
  EXPECT_EQ(PinCheck(1, head), head.size());
  EXPECT_EQ(N(1).Stats().remote_fetch_failures, 0u);
  // The same prompt with other tokens after block 5 (it branches there).
  const Tokens branch = Cat(head, RandomTokens(26, 3 * kBt));
  EXPECT_EQ(Matched(1, branch), head.size());
  EXPECT_EQ(PinCheck(1, branch), head.size());
  EXPECT_EQ(N(1).Stats().remote_fetch_failures, 0u);
}

// Two prompts share blocks [0,3) and branch at block 3; node 1 knows only
// p's remote increment [0,8). A load of q matches [0,3) inside that
// increment; whatever it fetches must be p's bytes (the increment's own
// tokens), never q's blocks [3,8) filed as p's: once kept as a replica,
// those would be served to every later load of p.
TEST_F(StoreRemoteTest, BranchInsideARemoteIncrementNeverFillsItWithTheOtherBranch) {
  StoreOptions o = NodeOptions(1);
  o.replicate_after = 1;  // the first fetch is kept
  Reopen(1, o);
  const Tokens base = RandomTokens(27, 3 * kBt);
  const Tokens p = Cat(base, RandomTokens(28, 5 * kBt));
  const Tokens q = Cat(base, RandomTokens(29, 5 * kBt));
  SaveOn(0, p);
  SaveOn(0, q);
  Share(0, 1, p);
  EXPECT_EQ(Matched(1, q), base.size());
  EXPECT_EQ(PinCheck(1, q), base.size());  // q's first 3 blocks, from p's increment
  EXPECT_EQ(PinCheck(1, p), p.size());     // p's bytes, all 8 blocks
}

TEST_F(StoreRemoteTest, BranchInsideARemoteIncrementThenSecondLoadKeepsTheRightBytes) {
  // The same with the default replicate_after = 2: p loaded once, then q
  // (its load is the increment's second, which keeps it), then p again.
  const Tokens base = RandomTokens(35, 3 * kBt);
  const Tokens p = Cat(base, RandomTokens(36, 5 * kBt));
  const Tokens q = Cat(base, RandomTokens(37, 7 * kBt));
  SaveOn(0, p);
  SaveOn(0, q);
  Share(0, 1, p);
  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(PinCheck(1, q), base.size());
  EXPECT_EQ(PinCheck(1, p), p.size());
}

TEST_F(StoreRemoteTest, BothBranchesOfARemoteIncrementFetchEachWithItsOwnBytes) {
  // Node 1 knows p as one remote increment, then learns q, which branches
  // inside it: p's tensor now has two tree nodes, the shared head and p's
  // tail, and q's tail is a second remote tensor. A pin of q needs both
  // tensors, which are not on one path: each must be named by its own
  // prefix (found by bench_e2e: q's tail came back with p's bytes).
  for (uint32_t replicate_after : {0u, 1u, 2u}) {
    SCOPED_TRACE(replicate_after);
    StoreOptions o = NodeOptions(1);
    o.replicate_after = replicate_after;
    Reopen(1, o);
    const Tokens base = RandomTokens(50 + replicate_after, 2 * kBt);
    const Tokens p = Cat(base, RandomTokens(60 + replicate_after, 6 * kBt));
    const Tokens q = Cat(base, RandomTokens(70 + replicate_after, 6 * kBt));
    SaveOn(0, p);
    SaveOn(0, q);
    Share(0, 1, p);
    Share(0, 1, q);
    EXPECT_EQ(Matched(1, q), q.size());
    EXPECT_EQ(PinCheck(1, q), q.size());
    EXPECT_EQ(PinCheck(1, p), p.size());
    EXPECT_EQ(PinCheck(1, q), q.size());
  }
}

// ------------------------------------------------------------------ PinHeld

TEST_F(StoreRemoteTest, PinHeldPastRemotePlaceholdersPinsOnlyHeldBlocks) {
  const Tokens p = RandomTokens(80, 8 * kBt);
  SaveOn(1, Head(p, 4 * kBt));
  EXPECT_EQ(Share(1, 0, Head(p, 4 * kBt)), 4u);
  SaveResult s = SaveOn(0, p, 4);  // node 0 holds blocks [4,8)
  EXPECT_EQ(s.matched_tokens, 4 * kBt);
  const uint64_t hits_before = N(0).Stats().hits;

  for (uint64_t from : {4u, 5u, 7u}) {
    SCOPED_TRACE("from_block " + std::to_string(from));
    Result<PrefixResult> pin = N(0).PinHeld(kNs, p, from, kPeerSession);
    ASSERT_OK(pin);
    EXPECT_EQ(pin->matched_tokens, p.size());
    EXPECT_NE(pin->lease_id, 0u);
    uint64_t len = 0;
    for (const Extent& x : pin->extents) len += x.length;
    EXPECT_EQ(len, (8 - from) * kBb);
    EXPECT_TRUE(Read(0, pin->extents) == Kv(p, from * kBt, p.size()));
    EXPECT_EQ(N(0).Stats().pinned_bytes, 4096u);  // blocks [4,8), nothing of the placeholder
    EXPECT_OK(N(0).Release(pin->lease_id, kPeerSession));
  }
  EXPECT_EQ(N(0).Stats().peer_served_bytes, (4 + 3 + 1) * kBb);
  EXPECT_EQ(N(0).Stats().hits, hits_before);  // not client hits
  EXPECT_EQ(F(0).calls(), 0u);                // PinHeld never fetches

  // Blocks it does not hold: nothing pinned, nothing fetched, no error.
  for (uint64_t from : {0u, 2u, 8u, 9u}) {
    SCOPED_TRACE("from_block " + std::to_string(from));
    Result<PrefixResult> pin = N(0).PinHeld(kNs, p, from, kPeerSession);
    ASSERT_OK(pin);
    EXPECT_EQ(pin->matched_tokens, 0u);
    EXPECT_EQ(pin->lease_id, 0u);
    EXPECT_TRUE(pin->extents.empty());
  }
  EXPECT_EQ(F(0).calls(), 0u);
  EXPECT_EQ(N(0).Stats().active_leases, 0u);
  // Prompt shorter than the held part: up to the prompt's end.
  Result<PrefixResult> pin = N(0).PinHeld(kNs, Head(p, 6 * kBt), 4, kPeerSession);
  ASSERT_OK(pin);
  EXPECT_EQ(pin->matched_tokens, 6 * kBt);
  EXPECT_TRUE(Read(0, pin->extents) == Kv(p, 4 * kBt, 6 * kBt));
  EXPECT_OK(N(0).Release(pin->lease_id, kPeerSession));
}

TEST_F(StoreRemoteTest, PinHeldAcrossTwoOwnIncrementsAfterAPlaceholder) {
  // [0,2) remote (node 1), [2,5) and [5,7) node 0's own: from_block 3 starts
  // inside the first own increment.
  const Tokens p = RandomTokens(81, 7 * kBt);
  SaveOn(1, Head(p, 2 * kBt));
  Share(1, 0, Head(p, 2 * kBt));
  SaveOn(0, Head(p, 5 * kBt), 2);
  SaveOn(0, p, 5);
  Result<PrefixResult> pin = N(0).PinHeld(kNs, p, 3, kPeerSession);
  ASSERT_OK(pin);
  EXPECT_EQ(pin->matched_tokens, p.size());
  uint64_t len = 0;
  for (const Extent& x : pin->extents) len += x.length;
  EXPECT_EQ(len, 4 * kBb);
  EXPECT_EQ(pin->extents.size(), 2u);
  EXPECT_TRUE(Read(0, pin->extents) == Kv(p, 3 * kBt, p.size()));
  EXPECT_OK(N(0).Release(pin->lease_id, kPeerSession));
}

// ------------------------------------------------- save past a remote prefix

TEST_F(StoreRemoteTest, SaveAfterARemotePrefixStoresOnlyTheNewBlocks) {
  const Tokens p = RandomTokens(120, 8 * kBt);
  SaveOn(0, Head(p, 5 * kBt));
  Share(0, 1, Head(p, 5 * kBt));
  // The whole KV, from block 0: only blocks [5,8) are stored.
  SaveResult s = SaveOn(1, p);
  EXPECT_EQ(s.matched_tokens, 5 * kBt);
  EXPECT_EQ(s.stored_tokens, 3 * kBt);
  EXPECT_EQ(s.new_bytes, 3 * kBb);
  StoreStats st = N(1).Stats();
  EXPECT_EQ(st.saved_bytes, 3 * kBb);
  EXPECT_EQ(st.remote_tensors, 1u);
  EXPECT_EQ(st.replica_bytes, 0u);
  EXPECT_EQ(F(1).calls(), 0u);  // saving never fetches
  // Saving again: nothing new.
  s = SaveOn(1, p);
  EXPECT_EQ(s.matched_tokens, p.size());
  EXPECT_EQ(s.new_bytes, 0u);
  // Only the new part, with first_block at the end of the remote prefix.
  const Tokens q = Cat(Head(p, 5 * kBt), RandomTokens(121, 2 * kBt));
  s = SaveOn(1, q, 5);
  EXPECT_EQ(s.matched_tokens, 5 * kBt);
  EXPECT_EQ(s.stored_tokens, 2 * kBt);
  EXPECT_EQ(ResolveOn(1, p).ranges, (std::vector<OwnedRange>{{5, 0}, {8, 1}}));
  EXPECT_EQ(ResolveOn(1, q).ranges, (std::vector<OwnedRange>{{5, 0}, {7, 1}}));
  // Loads: the remote head is fetched, the rest is local, all byte-exact.
  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(PinCheck(1, q), q.size());
  // ListOwned names only node 1's increments, from block 5.
  std::vector<HeldIncrement> held = N(1).ListOwned();
  ASSERT_EQ(held.size(), 2u);
  for (const HeldIncrement& h : held) EXPECT_EQ(h.first_block, 5u);
}

TEST_F(StoreRemoteTest, RemoteNodeHitsCountOnTheTreeNodes) {
  const Tokens p = RandomTokens(122, 4 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  EXPECT_EQ(PinCheck(1, p), p.size());
  std::optional<PrefixNodeInfo> n = NodeAt(1, 0);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->hits, 1u);
}

// ------------------------------------------------------------ threads smoke

TEST_F(StoreRemoteTest, ConcurrentRemotePinsWithSavesAndRemovals) {
  core::SetLogLevel(core::LogLevel::kError);  // (TearDown restores it)
  StoreOptions o1 = NodeOptions(1, 2 * kMiB);
  o1.replica_share = 0.3;
  Reopen(1, o1);
  // Prompts without shared heads: a prompt never matches part of another's
  // remote increment (that case is the Branch... tests above), so any wrong
  // byte here comes from a race.
  constexpr int kPrompts = 12;
  std::vector<Tokens> prompts;
  for (int i = 0; i < kPrompts; ++i) {
    prompts.push_back(RandomTokens(131 + i, (6 + i) * kBt));
    SaveOn(0, prompts.back());
  }
  for (const Tokens& t : prompts) Share(0, 1, t);
  F(1).Record(false);

  std::atomic<bool> stop{false};
  std::atomic<uint64_t> pins{0}, full{0}, bad{0}, errors{0};
  std::vector<std::thread> readers;
  for (int t = 0; t < 4; ++t) {
    readers.emplace_back([&, t] {
      std::mt19937_64 rng(1000 + t);
      const uint64_t session = 500 + t;
      while (!stop.load()) {
        const Tokens& p = prompts[rng() % kPrompts];
        Result<PrefixResult> pin = N(1).Pin(kNs, p, session);
        if (!pin.ok()) {
          errors++;
          continue;
        }
        pins++;
        if (pin->matched_tokens == p.size()) full++;
        std::vector<uint8_t> got;
        for (const Extent& x : pin->extents) {
          const uint8_t* b = N(1).arena_base() + x.arena_offset;
          got.insert(got.end(), b, b + x.length);
        }
        if (std::vector<uint8_t> want = Kv(p, 0, pin->matched_tokens); got != want) {
          if (bad++ < 3) {
            size_t at = 0;
            while (at < got.size() && got[at] == want[at]) ++at;
            std::string xs;
            for (const Extent& x : pin->extents) {
              xs += " {owner " + std::to_string(x.tensor.owner().value) + " seq " + std::to_string(x.tensor.seq()) +
                    " off " + std::to_string(x.offset) + " len " + std::to_string(x.length) + " arena " +
                    std::to_string(x.arena_offset) + "}";
            }
            ADD_FAILURE() << "wrong bytes: prompt of " << p.size() << " tokens, matched " << pin->matched_tokens
                          << ", first wrong byte " << at << " (block " << at / kBb << ");" << xs;
          }
        }
        if (pin->lease_id && !N(1).Release(pin->lease_id, session).ok()) errors++;
      }
    });
  }
  std::thread writer([&] {
    std::mt19937_64 rng(7);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
    while (std::chrono::steady_clock::now() < until) {
      const Tokens& p = prompts[rng() % kPrompts];
      const uint64_t from = rng() % Blocks(p);
      switch (rng() % 5) {
        case 0:  // the owner drops part of it (fetches then see gone or short)
          if (!N(0).RemoveFrom(kNs, p, from).ok()) errors++;
          break;
        case 1:  // and the removal reaches node 1
          if (!N(1).RemoveFrom(kNs, p, from).ok()) errors++;
          break;
        case 2:  // the owner saves it again (same bytes)
          SaveOn(0, p);
          break;
        default:  // the index shard tells node 1 again
          Share(0, 1, p);
          break;
      }
      // Node 1's own saves hanging below remote data.
      if (rng() % 4 == 0) {
        const Tokens own = Cat(p, RandomTokens(rng() % 1000, 2 * kBt));
        std::vector<uint8_t> data = Kv(own, 0, own.size());
        Result<SaveResult> s = N(1).Save(kNs, own, data.data(), data.size(), 0);
        if (!s.ok() && s.status().code() != Code::kResourceExhausted) errors++;
      }
    }
    stop = true;
  });
  writer.join();
  for (auto& r : readers) r.join();

  EXPECT_EQ(bad.load(), 0u);
  EXPECT_EQ(errors.load(), 0u);
  EXPECT_GT(pins.load(), 100u);
  EXPECT_GT(full.load(), 0u);
  StoreStats s1 = N(1).Stats();
  EXPECT_EQ(s1.active_leases, 0u);
  EXPECT_EQ(s1.pinned_bytes, 0u);
  StoreStats s0 = N(0).Stats();
  EXPECT_EQ(s0.active_leases, 0u);
  EXPECT_EQ(s0.pinned_bytes, 0u);
  RecordProperty("pins", static_cast<int>(pins.load()));
  RecordProperty("fetches", static_cast<int>(F(1).calls()));
  // Everything still loads byte-exact once the owner holds it all again.
  for (const Tokens& p : prompts) {
    SaveOn(0, p);
    Share(0, 1, p);
  }
  for (const Tokens& p : prompts) EXPECT_EQ(PinCheck(1, p), p.size());
}

}  // namespace
}  // namespace ptstore::storage

// Replicas in the node store's cluster part (storage/cache/store_remote.cc):
// replicate_after (which load keeps a fetched copy, transient copies shared
// by pins, a kept replica of a restarted owner), replica eviction (the
// replica share, owned pressure, loads that cannot keep their copy), and
// kept replicas under a namespace's DRAM quota. Fixture: store_remote_testing.h.
#include "tests/storage/store_remote_testing.h"

namespace ptstore::storage {
namespace {

using namespace store_remote_testing;  // NOLINT: the shared fixture (StoreRemoteTest)

// ---------------------------------------------------------- replicate_after

TEST_F(StoreRemoteTest, SecondLoadKeepsAReplicaAndTheThirdDoesNotFetch) {
  const Tokens p = RandomTokens(30, 10 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  ASSERT_EQ(N(1).options().replicate_after, 2u);

  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(F(1).calls(), 1u);
  StoreStats s = N(1).Stats();
  EXPECT_EQ(s.replicas_kept, 0u);
  EXPECT_EQ(s.replica_bytes, 0u);
  EXPECT_EQ(s.used_bytes, 0u);  // the transient copy was freed with the pin

  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(F(1).calls(), 2u);
  s = N(1).Stats();
  EXPECT_EQ(s.replicas_kept, 1u);
  EXPECT_GE(s.replica_bytes, 10 * kBb);
  EXPECT_EQ(s.used_bytes, s.replica_bytes);
  EXPECT_EQ(s.pinned_bytes, 0u);
  std::optional<PrefixNodeInfo> n = NodeAt(1, 0);
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->tier, kTierRemote | kTierDram);

  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(F(1).calls(), 2u);  // served from the replica
  s = N(1).Stats();
  EXPECT_EQ(s.remote_fetches, 2u);
  EXPECT_EQ(s.remote_hits, 2u);
  EXPECT_EQ(s.hits, 3u);  // (no lookups in this test)
  // The replica is still owned by node 0, and Resolve says so.
  EXPECT_EQ(ResolveOn(1, p).ranges, (std::vector<OwnedRange>{{10, 0}}));
}

TEST_F(StoreRemoteTest, ReplicateAfterZeroNeverKeeps) {
  StoreOptions o = NodeOptions(1);
  o.replicate_after = 0;
  Reopen(1, o);
  const Tokens p = RandomTokens(31, 5 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  for (int i = 1; i <= 4; ++i) {
    EXPECT_EQ(PinCheck(1, p), p.size());
    EXPECT_EQ(F(1).calls(), static_cast<uint64_t>(i));
    StoreStats s = N(1).Stats();
    EXPECT_EQ(s.replicas_kept, 0u);
    EXPECT_EQ(s.replica_bytes, 0u);
    EXPECT_EQ(s.used_bytes, 0u);
  }
}

TEST_F(StoreRemoteTest, ReplicateAfterOneKeepsTheFirstLoad) {
  StoreOptions o = NodeOptions(1);
  o.replicate_after = 1;
  Reopen(1, o);
  const Tokens p = RandomTokens(32, 5 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(F(1).calls(), 1u);
  EXPECT_EQ(N(1).Stats().replicas_kept, 1u);
}

TEST_F(StoreRemoteTest, AKeptReplicaOfARestartedOwnerBecomesOwnedAndListed) {
  StoreOptions o = NodeOptions(1);
  o.replicate_after = 1;
  Reopen(1, o);
  const Tokens p = RandomTokens(33, 5 * kBt);
  const Tokens q = RandomTokens(34, 3 * kBt);
  SaveOn(0, p);
  SaveOn(0, q);
  Share(0, 1, p);
  Share(0, 1, q);
  EXPECT_EQ(PinCheck(1, p), p.size());  // kept; q stays a placeholder
  const StoreStats before = N(1).Stats();
  ASSERT_GT(before.replica_bytes, 0u);
  ASSERT_EQ(before.owned_bytes, 0u);
  ASSERT_TRUE(N(1).ListOwned().empty());

  EXPECT_EQ(N(1).AdoptReplicasOf(2), 0u);  // not the owner
  EXPECT_EQ(N(1).AdoptReplicasOf(0), 1u);
  const StoreStats after = N(1).Stats();
  EXPECT_EQ(after.replica_bytes, 0u);
  EXPECT_EQ(after.owned_bytes, before.replica_bytes);
  EXPECT_EQ(after.remote_tensors, before.remote_tensors - 1);
  const std::vector<HeldIncrement> owned = N(1).ListOwned();
  ASSERT_EQ(owned.size(), 1u);
  EXPECT_EQ(owned[0].tokens, p);
  // Served from here without a fetch, as this node's own; the placeholder
  // of q still fetches from node 0.
  const uint64_t calls = F(1).calls();
  EXPECT_EQ(PinCheck(1, p), p.size());
  EXPECT_EQ(F(1).calls(), calls);
  EXPECT_EQ(PinCheck(1, q), q.size());
  EXPECT_EQ(F(1).calls(), calls + 1);
  EXPECT_EQ(N(1).AdoptReplicasOf(0), 1u);  // q was kept by that load: adopted too
}

TEST_F(StoreRemoteTest, TwoPinsOfATransientFetchShareItUntilTheLastRelease) {
  const Tokens p = RandomTokens(33, 4 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  Result<PrefixResult> a = N(1).Pin(kNs, p, kSession);
  ASSERT_OK(a);
  ASSERT_EQ(a->matched_tokens, p.size());
  // The second pin finds the bytes in DRAM (no fetch) even though the first
  // load's copy is transient.
  Result<PrefixResult> b = N(1).Pin(kNs, p, kSession);
  ASSERT_OK(b);
  ASSERT_EQ(b->matched_tokens, p.size());
  EXPECT_EQ(F(1).calls(), 1u);
  ASSERT_OK(N(1).Release(a->lease_id, kSession));
  EXPECT_TRUE(Read(1, b->extents) == Kv(p, 0, p.size()));  // still there for b
  EXPECT_GT(N(1).Stats().replica_bytes, 0u);
  ASSERT_OK(N(1).Release(b->lease_id, kSession));
  EXPECT_EQ(N(1).Stats().replica_bytes, 0u);
}

// ---------------------------------------------------------- replica eviction

TEST_F(StoreRemoteTest, ReplicaShareEvictsBytesButKeepsTheRemoteEntry) {
  StoreOptions o = NodeOptions(1, 1 * kMiB);
  o.replica_share = 0.25;  // 256 KiB
  o.replicate_after = 1;   // every fetch is kept
  Reopen(1, o);
  const Tokens a = RandomTokens(50, 160 * kBt), b = RandomTokens(51, 160 * kBt);  // 160 KiB each
  SaveOn(0, a);
  SaveOn(0, b);
  Share(0, 1, a);
  Share(0, 1, b);
  EXPECT_EQ(PinCheck(1, a), a.size());
  EXPECT_EQ(N(1).Stats().replicas_kept, 1u);

  // b does not fit next to a in the replica share: a's bytes go.
  EXPECT_EQ(PinCheck(1, b), b.size());
  StoreStats s = N(1).Stats();
  EXPECT_EQ(s.replicas_kept, 2u);
  EXPECT_LE(s.replica_bytes, 256 * kKiB);
  EXPECT_GE(s.evictions, 1u);
  EXPECT_EQ(s.remote_tensors, 2u);
  // a is still known, as a remote increment without bytes.
  EXPECT_EQ(Matched(1, a), a.size());
  int remote_only = 0;
  for (const PrefixNodeInfo& n : Tree(1)) remote_only += n.tier == kTierRemote;
  EXPECT_EQ(remote_only, 1);
  // A later pin of a fetches it again.
  EXPECT_EQ(PinCheck(1, a), a.size());
  EXPECT_EQ(F(1).calls(), 3u);
  // b is served from its replica, or fetched again if a pushed it out.
  EXPECT_EQ(PinCheck(1, b), b.size());
}

// A load must be served whether or not its fetched bytes may be kept: a
// copy that cannot be a replica (larger than the replica share, or the share
// full of pinned replicas) can still serve the load transiently, as the first
// load did (AllocateLocked: "A transient replica ... may exceed the replica
// share").
TEST_F(StoreRemoteTest, HotIncrementLargerThanTheReplicaShareStillLoads) {
  StoreOptions o = NodeOptions(1, 1 * kMiB);
  o.replica_share = 0.1;  // ~102 KiB
  Reopen(1, o);           // replicate_after = 2
  const Tokens a = RandomTokens(52, 200 * kBt);  // 200 KiB
  SaveOn(0, a);
  Share(0, 1, a);
  EXPECT_EQ(PinCheck(1, a), a.size());  // first load: transient
  EXPECT_EQ(F(1).calls(), 1u);
  // Second load: it would be kept, but cannot be; it must still load.
  EXPECT_EQ(PinCheck(1, a), a.size());
  EXPECT_EQ(PinCheck(1, a), a.size());
  EXPECT_LE(N(1).Stats().replica_bytes, 102 * kKiB);
  EXPECT_EQ(N(1).Stats().replicas_kept, 0u);
  EXPECT_EQ(N(1).Stats().pinned_bytes, 0u);
}

TEST_F(StoreRemoteTest, ReplicaShareFullOfPinnedReplicasStillLoads) {
  StoreOptions o = NodeOptions(1, 1 * kMiB);
  o.replica_share = 0.25;  // 256 KiB
  o.replicate_after = 1;
  Reopen(1, o);
  const Tokens a = RandomTokens(54, 160 * kBt), b = RandomTokens(55, 160 * kBt);
  SaveOn(0, a);
  SaveOn(0, b);
  Share(0, 1, a);
  Share(0, 1, b);
  Result<PrefixResult> pa = N(1).Pin(kNs, a, kSession);  // a's replica stays pinned
  ASSERT_OK(pa);
  ASSERT_EQ(pa->matched_tokens, a.size());
  // b cannot be kept next to the pinned a; the load must still be served.
  EXPECT_EQ(PinCheck(1, b), b.size());
  EXPECT_TRUE(Read(1, pa->extents) == Kv(a, 0, a.size()));
  ASSERT_OK(N(1).Release(pa->lease_id, kSession));
  EXPECT_EQ(PinCheck(1, b), b.size());  // now it can be kept
  EXPECT_EQ(N(1).Stats().pinned_bytes, 0u);
}

TEST_F(StoreRemoteTest, OwnedSavesPushAReplicaOutButNotItsIndexEntry) {
  StoreOptions o = NodeOptions(1, 1 * kMiB);
  o.replicate_after = 1;
  Reopen(1, o);
  const Tokens r = RandomTokens(53, 160 * kBt);  // 160 KiB replica
  SaveOn(0, r);
  Share(0, 1, r);
  // 4 x 200 KiB of owned data, then the replica after them, then a fifth
  // 200 KiB save that fits only where the replica is.
  std::vector<Tokens> owned;
  for (int i = 0; i < 5; ++i) owned.push_back(RandomTokens(60 + i, 200 * kBt));
  for (int i = 0; i < 4; ++i) SaveOn(1, owned[i]);
  EXPECT_EQ(PinCheck(1, r), r.size());
  ASSERT_GE(N(1).Stats().replica_bytes, 160 * kKiB);
  SaveOn(1, owned[4]);
  StoreStats s = N(1).Stats();
  EXPECT_EQ(s.replica_bytes, 0u);
  EXPECT_EQ(s.owned_bytes, 5 * 200 * kKiB);
  for (const Tokens& t : owned) EXPECT_EQ(Matched(1, t), t.size());
  EXPECT_EQ(Matched(1, r), r.size());  // still known, as remote
  std::optional<PrefixNodeInfo> n;
  for (const PrefixNodeInfo& x : Tree(1)) {
    if (x.tensor.owner().value == 0) n = x;
  }
  ASSERT_TRUE(n.has_value());
  EXPECT_EQ(n->tier, kTierRemote);
}

// Quotas (ptstore/quota.h) on a node that fetches: the bytes of another
// node's increments kept here count against the namespace's DRAM quota
// like its own, and make room among the namespace's data only.
TEST_F(StoreRemoteTest, KeptReplicasCountAgainstTheNamespaceQuotaAndEvictOnlyItsOwn) {
  ASSERT_OK(N(1).CreateNamespace("other", SmallLayout(), "", 1000, 1000, 0755, false));
  std::vector<uint8_t> kv;
  std::vector<Tokens> others;
  for (int i = 0; i < 4; ++i) {
    others.push_back(RandomTokens(900 + i, 16 * kBt));
    kv = Kv(others.back(), 0, others.back().size());
    ASSERT_OK(N(1).Save("other", others.back(), kv.data(), kv.size(), 0));
  }
  // 16 blocks of 1 KiB: one 16 KiB allocation per prompt; room for 3.
  ASSERT_OK(N(1).SetQuota(kNs, QuotaChange{48 * kKiB, {}}));
  std::vector<Tokens> prompts;
  for (int i = 0; i < 8; ++i) {
    prompts.push_back(RandomTokens(800 + i, 16 * kBt));
    SaveOn(0, prompts.back());
    Share(0, 1, prompts.back());
    EXPECT_EQ(PinCheck(1, prompts.back()), prompts.back().size());
    EXPECT_EQ(PinCheck(1, prompts.back()), prompts.back().size());  // the second load keeps it
    auto q = N(1).GetQuota(kNs);
    ASSERT_OK(q);
    EXPECT_LE(q->dram_bytes, 48 * kKiB) << i;
  }
  auto q = N(1).GetQuota(kNs);
  ASSERT_OK(q);
  EXPECT_EQ(q->dram_bytes, 48 * kKiB);
  EXPECT_GT(q->dram_evictions, 0u);
  EXPECT_EQ(N(1).Stats().replica_bytes, 48 * kKiB);
  // The other namespace kept everything; every prompt still loads (fetched
  // again where the quota evicted its replica).
  for (const Tokens& t : others) {
    std::vector<uint8_t> out(t.size() * kBpt);
    auto r = N(1).LoadCopy("other", t, out.data(), out.size());
    ASSERT_OK(r);
    EXPECT_EQ(*r, t.size());
  }
  for (const Tokens& t : prompts) EXPECT_EQ(PinCheck(1, t), t.size());
}

}  // namespace
}  // namespace ptstore::storage

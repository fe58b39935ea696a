// Removal and lost increments in the node store's cluster part
// (storage/cache/store_remote.cc RemoveFrom, track_lost, TakeLostIncrements,
// ListOwned, GetNamespaceDef): RemoveFrom splits an increment and fetches only
// the head of a remote one; an evicted owned increment is reported lost,
// removals and replica evictions are not; a namespace dropped while a pin
// reads its owned part back from SSD is not fetched from peers after it.
// Fixture: store_remote_testing.h.
#include <cerrno>
#include <chrono>
#include <thread>
#include <tuple>

#include "storage/ssd/fault_env.h"
#include "tests/testing/temp_dir.h"

#include "tests/storage/store_remote_testing.h"

namespace ptstore::storage {
namespace {

using namespace store_remote_testing;  // NOLINT: the shared fixture (StoreRemoteTest)

// ---------------------------------------------------------------- RemoveFrom

TEST_F(StoreRemoteTest, RemoveFromSplitsAnIncrement) {
  const Tokens p = RandomTokens(70, 8 * kBt);
  const Tokens q = Cat(p, RandomTokens(71, 4 * kBt));
  const Tokens other = Cat(Head(p, 2 * kBt), RandomTokens(72, 3 * kBt));  // branches at block 2
  SaveOn(0, p);
  SaveOn(0, q);
  SaveOn(0, other);
  ASSERT_EQ(Matched(0, q), q.size());

  // From block 3, inside [2,8) (p's tensor split at 2 by `other`).
  Result<RemoveResult> r = N(0).RemoveFrom(kNs, q, 3);
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 2u);                 // the tail [3,8) and q's [8,12)
  EXPECT_EQ(r->bytes, (5 + 4) * kBb);
  EXPECT_EQ(Matched(0, p), 3 * kBt);       // the head stays matchable
  EXPECT_EQ(Matched(0, q), 3 * kBt);
  EXPECT_EQ(Matched(0, other), other.size());  // the other branch stays
  EXPECT_EQ(PinCheck(0, p), 3 * kBt);
  EXPECT_EQ(PinCheck(0, other), other.size());
  // The head is one listed increment of 1 block below [0,2).
  int heads = 0;
  for (const PrefixNodeInfo& n : Tree(0)) heads += n.start_token == 2 * kBt && n.tokens == kBt;
  EXPECT_EQ(heads, 1);
  EXPECT_EQ(Tree(0).size(), 3u);  // [0,2), its head [2,3), other's [2,5)

  // Idempotent: a second call removes nothing.
  r = N(0).RemoveFrom(kNs, q, 3);
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 0u);
  EXPECT_EQ(r->bytes, 0u);
  // A prompt not stored that far: a no-op.
  r = N(0).RemoveFrom(kNs, q, 5);
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 0u);
  r = N(0).RemoveFrom(kNs, RandomTokens(73, 16), 0);
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 0u);
  r = N(0).RemoveFrom(kNs, Head(p, 2 * kBt), 3);  // tokens shorter than from_block
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 0u);
  EXPECT_EQ(Matched(0, p), 3 * kBt);
  EXPECT_ERROR(N(0).RemoveFrom("nope", p, 0), Code::kNotFound);

  // At an increment boundary nothing is split.
  r = N(0).RemoveFrom(kNs, other, 2);
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 1u);
  EXPECT_EQ(r->bytes, 3 * kBb);
  EXPECT_EQ(Matched(0, other), 2 * kBt);
  EXPECT_EQ(Matched(0, p), 3 * kBt);
  // From 0: everything.
  r = N(0).RemoveFrom(kNs, p, 0);
  ASSERT_OK(r);
  EXPECT_EQ(Matched(0, p), 0u);
  EXPECT_TRUE(Tree(0).empty());
  StoreStats s = N(0).Stats();
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.owned_bytes, 0u);
  EXPECT_EQ(s.tensors, 0u);
}

TEST_F(StoreRemoteTest, RemoveFromARemoteIncrementFetchesOnlyTheHead) {
  const Tokens p = RandomTokens(74, 8 * kBt);
  SaveOn(0, p);
  Share(0, 1, p);
  Result<RemoveResult> r = N(1).RemoveFrom(kNs, p, 3);
  ASSERT_OK(r);
  EXPECT_EQ(r->nodes, 1u);
  EXPECT_EQ(Matched(1, p), 3 * kBt);
  EXPECT_EQ(N(1).Stats().remote_tensors, 1u);
  EXPECT_EQ(PinCheck(1, p), 3 * kBt);
  std::vector<SeenCall> log = F(1).log();
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].requests.at(0).segments, (std::vector<SeenSegment>{{0, 3}}));
  EXPECT_EQ(N(1).Stats().remote_fetch_bytes, 3 * kBb);
  // All of it: the remote tensor leaves.
  ASSERT_OK(N(1).RemoveFrom(kNs, p, 0));
  EXPECT_EQ(N(1).Stats().remote_tensors, 0u);
  EXPECT_EQ(N(1).Stats().tensors, 0u);
}

// ----------------------------------------------------- track_lost, ListOwned

TEST_F(StoreRemoteTest, EvictedOwnedIncrementIsReportedLost) {
  StoreOptions o = NodeOptions(0, 1 * kMiB);
  o.track_lost = true;
  Reopen(0, o);
  const Tokens z = RandomTokens(90, 300 * kBt);                // 300 KiB, kept hot
  const Tokens x = RandomTokens(91, 4 * kBt);                  // 4 KiB
  const Tokens y = Cat(x, RandomTokens(92, 300 * kBt));        // + 300 KiB below x
  SaveOn(0, z);
  SaveOn(0, x);
  SaveOn(0, y);
  // A remote increment (node 1's) is not owned: never listed nor lost.
  const Tokens r = RandomTokens(93, 3 * kBt);
  SaveOn(1, r);
  Share(1, 0, r);

  auto sorted = [](std::vector<HeldIncrement> v) {
    std::sort(v.begin(), v.end(), [](const HeldIncrement& a, const HeldIncrement& b) {
      return std::tie(a.first_block, a.tokens) < std::tie(b.first_block, b.tokens);
    });
    return v;
  };
  std::vector<HeldIncrement> held = sorted(N(0).ListOwned());
  ASSERT_EQ(held.size(), 3u);
  for (const HeldIncrement& h : held) EXPECT_EQ(h.ns, kNs);
  EXPECT_EQ(held[0].first_block, 0u);
  EXPECT_EQ(held[1].first_block, 0u);
  EXPECT_TRUE((held[0].tokens == x && held[1].tokens == z) || (held[0].tokens == z && held[1].tokens == x));
  EXPECT_EQ(held[2].first_block, 4u);
  EXPECT_EQ(held[2].tokens, y);  // the whole prefix, not just its own blocks
  EXPECT_TRUE(N(0).TakeLostIncrements().empty());

  for (int i = 0; i < 3; ++i) EXPECT_EQ(PinCheck(0, z), z.size());  // hits: z outranks y
  // 500 KiB more do not fit: y (the cheapest leaf) is evicted, with no SSD.
  const Tokens w = RandomTokens(94, 500 * kBt);
  SaveOn(0, w);
  EXPECT_EQ(Matched(0, y), x.size());
  EXPECT_EQ(Matched(0, z), z.size());
  EXPECT_EQ(Matched(0, w), w.size());
  std::vector<RemovalPoint> lost = N(0).TakeLostIncrements();
  ASSERT_EQ(lost.size(), 1u);
  EXPECT_EQ(lost[0].ns, kNs);
  EXPECT_EQ(lost[0].from_block, 4u);
  EXPECT_EQ(lost[0].tokens, Head(y, 5 * kBt));  // up to from_block + 1 blocks
  EXPECT_TRUE(N(0).TakeLostIncrements().empty());  // taken

  held = sorted(N(0).ListOwned());
  ASSERT_EQ(held.size(), 3u);
  std::set<Tokens> owned_prefixes;
  for (const HeldIncrement& h : held) {
    EXPECT_EQ(h.first_block, 0u);
    owned_prefixes.insert(h.tokens);
  }
  EXPECT_EQ(owned_prefixes, (std::set<Tokens>{x, z, w}));
}

TEST_F(StoreRemoteTest, WithoutTrackLostNothingIsRecorded) {
  StoreOptions o = NodeOptions(0, 1 * kMiB);
  Reopen(0, o);
  for (int i = 0; i < 6; ++i) SaveOn(0, RandomTokens(95 + i, 300 * kBt));
  EXPECT_GE(N(0).Stats().evictions, 1u);
  EXPECT_TRUE(N(0).TakeLostIncrements().empty());
}

TEST_F(StoreRemoteTest, RemovalsAndReplicaEvictionsAreNotLost) {
  StoreOptions o = NodeOptions(1, 1 * kMiB);
  o.track_lost = true;
  o.replicate_after = 1;
  o.replica_share = 0.25;
  Reopen(1, o);
  const Tokens a = RandomTokens(110, 160 * kBt), b = RandomTokens(111, 160 * kBt);
  SaveOn(0, a);
  SaveOn(0, b);
  Share(0, 1, a);
  Share(0, 1, b);
  EXPECT_EQ(PinCheck(1, a), a.size());
  EXPECT_EQ(PinCheck(1, b), b.size());  // evicts a's replica bytes
  const Tokens own = RandomTokens(112, 8 * kBt);
  SaveOn(1, own);
  ASSERT_OK(N(1).RemoveFrom(kNs, own, 0));
  EXPECT_TRUE(N(1).TakeLostIncrements().empty());
}

TEST_F(StoreRemoteTest, GetNamespaceDefCarriesTheSalt) {
  Result<NamespaceDef> d = N(0).GetNamespaceDef(kNs);
  ASSERT_OK(d);
  EXPECT_EQ(d->salt, kSalt);
  EXPECT_EQ(d->info.name, kNs);
  EXPECT_TRUE(d->info.salted);
  EXPECT_EQ(d->info.layout, SmallLayout());
  EXPECT_ERROR(N(0).GetNamespaceDef("nope"), Code::kNotFound);
}

// A pin of a prompt whose owned head is on SSD and whose tail another node
// owns fills the head (the store's lock released), then fetches the tail.
// A namespace dropped during the fill is not fetched for after it (commit
// 4c4a135: the fetch read the dropped namespace's freed struct). FaultEnv
// holds the fill's read until the drop is done.
TEST_F(StoreRemoteTest, ANamespaceDroppedWhileAPinFillsIsNotFetchedFor) {
  testing::TempDir tmp("ptstore-store-remote-ssd");
  FaultEnv env(Env::Default());
  StoreOptions o = NodeOptions(0, 1 * kMiB);
  o.ssd.dir = tmp.path() + "/ssd";
  o.ssd.capacity = 64 * kMiB;
  o.ssd.segment_bytes = 1 * kMiB;
  o.ssd.sync = SsdOptions::Sync::kNone;
  o.ssd.background_compaction = false;  // no reads but the fill's
  o.env = &env;
  Reopen(0, o);
  const Tokens head = RandomTokens(120, 16 * kBt);
  const Tokens whole = Cat(head, RandomTokens(121, 16 * kBt));
  SaveOn(0, head);
  SaveOn(1, whole);
  Share(1, 0, whole);  // node 0: its own head, node 1's tail below it
  ASSERT_EQ(Matched(0, whole), whole.size());
  // Other prompts until GDSF spills the head (its remote tail's priority
  // keeps it above the first few arenas' worth).
  auto head_tier = [&] {
    std::optional<PrefixNodeInfo> h = NodeAt(0, 0);
    return h ? h->tier : uint8_t{0};
  };
  for (int i = 0; i < 400 && head_tier() != kTierSsd; ++i) SaveOn(0, RandomTokens(130 + i, 64 * kBt));
  ASSERT_EQ(head_tier(), kTierSsd) << "the head did not spill";
  const uint64_t calls = F(0).calls();

  env.HoldReads();
  Result<PrefixResult> pin = Internal("not run");
  std::thread pinner([&] { pin = N(0).Pin(kNs, whole, kSession); });
  while (env.reads_held() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  // The drop takes the lock the fill released, erases the namespace, then
  // waits (unlocked) for its record rewrites; the fill waits for the drop.
  std::thread dropper([&] { EXPECT_OK(N(0).DropNamespace(kNs)); });
  while (N(0).Stats().namespaces != 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  env.ReleaseReads();
  pinner.join();
  dropper.join();

  EXPECT_EQ(F(0).calls(), calls) << "the pin fetched for a dropped namespace";
  // The pin of a namespace gone meanwhile: an error naming it, nothing pinned.
  ASSERT_FALSE(pin.ok()) << pin->matched_tokens << " tokens pinned";
  EXPECT_EQ(pin.status().code(), Code::kNotFound) << pin.status().ToString();
  EXPECT_NE(pin.status().message().find(kNs), std::string::npos) << pin.status().ToString();
  EXPECT_EQ(N(0).Stats().active_leases, 0u);
  EXPECT_EQ(N(0).Stats().tensors, 0u);
  // Node 1 is untouched and node 0 serves again once the namespace is back.
  EXPECT_EQ(PinCheck(1, whole), whole.size());
  ASSERT_OK(N(0).CreateNamespace(kNs, SmallLayout(), kSalt, 1000, 1000, 0755, false));
  SaveOn(0, head);
  EXPECT_EQ(PinCheck(0, head), head.size());
}

}  // namespace
}  // namespace ptstore::storage

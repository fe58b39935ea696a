// GDSF eviction in the node store (storage/cache/store.h): priority, later
// tokens worth more, replicas before owned data (within replica_share),
// ancestors after descendants, one leaf tensor at a time, pinned data never,
// hot prefixes surviving a scan of cold ones; and a clear ResourceExhausted
// when pins leave no room.
#include <random>

#include "tests/storage/store_testing.h"

namespace ptstore::storage {
namespace {

using namespace store_testing;  // NOLINT: the shared fixture (StoreTest)

// ------------------------------------------------------------------- eviction
//
// A 1 MiB arena with 1 KiB alignment: 1024 blocks, and a tensor's allocation
// is exactly its bytes. Prompts of 16 blocks (16 KiB): 64 fill the arena.

constexpr uint64_t kPromptBlocks = 16;
constexpr uint64_t kPromptBytes = kPromptBlocks * kBb;

class StoreEvictionTest : public StoreTest {
 protected:
  StoreOptions Options() override {
    StoreOptions o = SmallOptions(kMiB);
    o.alignment = 1024;
    o.replica_share = replica_share_;
    return o;
  }
  static Tokens Prompt(uint64_t id, uint64_t blocks = kPromptBlocks) { return RandomTokens(1000 + id, blocks * kBt); }
  // Counts a hit on every tensor of the prefix (as a load does).
  void Hit(const Tokens& t, int times) {
    for (int i = 0; i < times; ++i) {
      auto p = store_->Pin("ns", t, kSession);
      ASSERT_OK(p);
      ASSERT_GT(p->matched_tokens, 0u);
      ASSERT_OK(store_->Release(p->lease_id, kSession));
    }
  }
  bool Present(const Tokens& t) { return Matched(t) == t.size() / kBt * kBt; }

  double replica_share_ = 0.25;
};

TEST_F(StoreEvictionTest, TheArenaFillsExactlyWithoutEviction) {
  for (uint64_t i = 0; i < 64; ++i) Save(Prompt(i));
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.used_bytes, kMiB);
  EXPECT_EQ(s.evictions, 0u);
  for (uint64_t i = 0; i < 64; ++i) EXPECT_TRUE(Present(Prompt(i)));
  Save(Prompt(64));
  s = store_->Stats();
  EXPECT_EQ(s.evictions, 1u);
  EXPECT_EQ(s.evicted_bytes, kPromptBytes);
  EXPECT_EQ(s.used_bytes, kMiB);
  EXPECT_EQ(s.tensors, 64u);
  ExpectStored(Prompt(64), kPromptBlocks * kBt);
}

TEST_F(StoreEvictionTest, LowPriorityGoesFirst) {
  for (uint64_t i = 0; i < 64; ++i) Save(Prompt(i));
  for (uint64_t i = 0; i < 16; ++i) Hit(Prompt(i), 2);
  for (uint64_t i = 100; i < 116; ++i) Save(Prompt(i));
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.evictions, 16u);
  for (uint64_t i = 0; i < 16; ++i) EXPECT_TRUE(Present(Prompt(i))) << "hot prompt " << i << " was evicted";
  uint64_t cold_left = 0;
  for (uint64_t i = 16; i < 64; ++i) cold_left += Present(Prompt(i));
  EXPECT_EQ(cold_left, 48u - 16u);
  for (uint64_t i = 100; i < 116; ++i) EXPECT_TRUE(Present(Prompt(i)));
  for (uint64_t i = 0; i < 16; ++i) ExpectStored(Prompt(i), kPromptBlocks * kBt);
}

TEST_F(StoreEvictionTest, LaterTokensAreWorthMoreThanEarlierOnes) {
  // Same size, no hits: an increment deep in a prompt costs more to
  // recompute than one at its start, so the shallow ones go first.
  Tokens base = Prompt(0, 32);  // 32 KiB, kept hot
  Save(base);
  Hit(base, 50);
  std::vector<Tokens> deep, shallow;
  for (uint64_t i = 0; i < 20; ++i) {
    deep.push_back(Cat(base, Prompt(100 + i)));
    Save(deep.back());
  }
  for (uint64_t i = 0; i < 20; ++i) {
    shallow.push_back(Prompt(200 + i));
    Save(shallow.back());
  }
  // 32 + 40 * 16 = 672 KiB used; 22 more prompts force 2 * 16 + ... evictions.
  for (uint64_t i = 0; i < 32; ++i) Save(Prompt(300 + i));
  StoreStats s = store_->Stats();
  ASSERT_GE(s.evictions, 10u);
  ASSERT_LE(s.evictions, 20u);
  for (const Tokens& d : deep) EXPECT_TRUE(Present(d)) << "a deep increment went before a shallow one";
  EXPECT_TRUE(Present(base));
}

TEST_F(StoreEvictionTest, ReplicasGoBeforeOwnedEvenWhenHotter) {
  replica_share_ = 0.5;
  Reopen(Options());
  ASSERT_OK(store_->CreateNamespace("rep", SmallLayout(), "", 0, 0, 0755, false));
  std::vector<Tokens> replicas;
  for (uint64_t i = 0; i < 8; ++i) {
    replicas.push_back(Prompt(500 + i));
    Save(replicas.back(), 0, CacheClass::kReplica, "rep");
    for (int h = 0; h < 5; ++h) {
      auto p = store_->Pin("rep", replicas.back(), kSession);
      ASSERT_OK(p);
      ASSERT_OK(store_->Release(p->lease_id, kSession));
    }
  }
  for (uint64_t i = 0; i < 56; ++i) Save(Prompt(i));
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.used_bytes, kMiB);
  EXPECT_EQ(s.replica_bytes, 8 * kPromptBytes);
  for (uint64_t i = 100; i < 104; ++i) Save(Prompt(i));
  s = store_->Stats();
  EXPECT_EQ(s.evictions, 4u);
  EXPECT_EQ(s.replica_bytes, 4 * kPromptBytes) << "the hot replicas went first";
  EXPECT_EQ(s.owned_bytes, 60 * kPromptBytes);
  for (uint64_t i = 0; i < 56; ++i) EXPECT_TRUE(Present(Prompt(i)));
  uint64_t left = 0;
  for (const Tokens& r : replicas) left += Matched(r, "rep") == r.size();
  EXPECT_EQ(left, 4u);
}

TEST_F(StoreEvictionTest, ReplicaShareIsRespected) {
  replica_share_ = 0.25;  // 256 KiB: 16 prompts
  Reopen(Options());
  ASSERT_OK(store_->CreateNamespace("rep", SmallLayout(), "", 0, 0, 0755, false));
  for (uint64_t i = 0; i < 8; ++i) Save(Prompt(i));  // owned, cold
  for (uint64_t i = 0; i < 40; ++i) {
    Save(Prompt(600 + i), 0, CacheClass::kReplica, "rep");
    StoreStats s = store_->Stats();
    ASSERT_LE(s.replica_bytes, kMiB / 4) << "after replica " << i;
  }
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.replica_bytes, kMiB / 4);
  EXPECT_EQ(s.evictions, 40u - 16u) << "replicas evicted replicas although the arena had room";
  EXPECT_EQ(s.owned_bytes, 8 * kPromptBytes) << "owned data untouched";
  for (uint64_t i = 0; i < 8; ++i) EXPECT_TRUE(Present(Prompt(i)));
  // GDSF ages by inflation: the oldest replicas went first, the newest stay.
  uint64_t replicas_left = 0;
  for (uint64_t i = 0; i < 40; ++i) replicas_left += Matched(Prompt(600 + i), "rep") == kPromptBlocks * kBt;
  EXPECT_EQ(replicas_left, 16u);
  for (uint64_t i = 0; i < 16; ++i) EXPECT_EQ(Matched(Prompt(600 + i), "rep"), 0u);
  for (uint64_t i = 32; i < 40; ++i) EXPECT_EQ(Matched(Prompt(600 + i), "rep"), kPromptBlocks * kBt);
  // A replica larger than the share cannot be stored at all.
  Result<SaveResult> big = TrySave("rep", Prompt(700, 257), 0, CacheClass::kReplica);
  EXPECT_ERROR(big, Code::kResourceExhausted);
  EXPECT_NE(big.status().message().find("replica share"), std::string::npos) << big.status().ToString();
  // Owned saves may use the rest of the arena.
  for (uint64_t i = 8; i < 48; ++i) Save(Prompt(i));
  s = store_->Stats();
  EXPECT_EQ(s.used_bytes, kMiB);
  EXPECT_EQ(s.owned_bytes, 48 * kPromptBytes);
}

TEST_F(StoreEvictionTest, ReplicasNeverEvictOwnedData) {
  replica_share_ = 1.0;
  Reopen(Options());
  ASSERT_OK(store_->CreateNamespace("rep", SmallLayout(), "", 0, 0, 0755, false));
  for (uint64_t i = 0; i < 64; ++i) Save(Prompt(i));
  Result<SaveResult> r = TrySave("rep", Prompt(900), 0, CacheClass::kReplica);
  EXPECT_ERROR(r, Code::kResourceExhausted);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.evictions, 0u);
  EXPECT_EQ(s.owned_bytes, kMiB);
  for (uint64_t i = 0; i < 64; ++i) EXPECT_TRUE(Present(Prompt(i)));
}

TEST_F(StoreEvictionTest, AReplicaBelowOwnedDataGoesFirstAndIsCountedAsAReplica) {
  Tokens a = Prompt(0, 8);
  Tokens ar = Cat(a, Prompt(1, 8));  // fetched from a peer: a replica below owned data
  Save(a);
  SaveResult r = Save(ar, 0, CacheClass::kReplica);
  EXPECT_EQ(r.matched_tokens, 8 * kBt);
  EXPECT_EQ(r.new_bytes, 8 * kBb);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.owned_bytes, 8 * kBb);
  EXPECT_EQ(s.replica_bytes, 8 * kBb);
  ExpectStored(ar, 16 * kBt);
  auto nodes = Tree();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes[0].cache_class, CacheClass::kOwned);
  EXPECT_EQ(nodes[1].cache_class, CacheClass::kReplica);
  // Fill the arena with cold owned data: the replica goes, its owned parent stays.
  for (uint64_t i = 10; i < 73; ++i) Save(Prompt(i));  // exactly full
  ASSERT_EQ(store_->Stats().evictions, 0u);
  Save(Prompt(73));
  EXPECT_EQ(Matched(ar), 8 * kBt);
  EXPECT_EQ(store_->Stats().replica_bytes, 0u);
  EXPECT_EQ(store_->Stats().evictions, 2u) << "the replica, then one cold owned prompt next to it";
  ExpectStatsConsistent();
}

TEST_F(StoreEvictionTest, AnAncestorGoesOnlyAfterItsDescendants) {
  // A (4 blocks) <- AB (4 blocks): both cold. Everything else is hot.
  // (Saved last, so that they sit next to the free tail of the arena.)
  for (uint64_t i = 10; i < 73; ++i) {
    Save(Prompt(i));
    Hit(Prompt(i), 1);
  }
  Tokens a = Prompt(0, 4);
  Tokens ab = Cat(a, Prompt(1, 4));
  Save(a);
  Save(ab);
  ASSERT_EQ(store_->Stats().used_bytes, kMiB - 8 * kKiB);
  ASSERT_EQ(store_->Stats().evictions, 0u);
  Save(Prompt(200, 12));  // needs 4 KiB more: one eviction
  EXPECT_EQ(store_->Stats().evictions, 1u);
  EXPECT_TRUE(Present(a)) << "the ancestor went before its descendant";
  EXPECT_EQ(Matched(ab), 4 * kBt);
  Save(Prompt(201, 4));  // one more: now the ancestor is a leaf and the coldest
  EXPECT_EQ(store_->Stats().evictions, 2u);
  EXPECT_FALSE(Present(a));
  for (uint64_t i = 10; i < 73; ++i) EXPECT_TRUE(Present(Prompt(i)));
}

TEST_F(StoreEvictionTest, EachEvictionTakesExactlyOneLeafTensor) {
  // Families of chains of 4-block increments, saved at random depths with
  // random loads, through an arena too small for them: if an ancestor were
  // ever evicted with descendants below it, more tensors would vanish than
  // evictions were counted.
  std::mt19937_64 rng(42);
  constexpr uint64_t kFamilies = 48, kDepth = 8;
  auto chain = [](uint64_t f, uint64_t depth, uint64_t variant) {
    Tokens t;
    for (uint64_t d = 0; d < depth; ++d) {
      t = Cat(t, RandomTokens(f * 1000 + d * 10 + (d + 1 == depth ? variant : 0), 4 * kBt));
    }
    return t;
  };
  for (int step = 0; step < 1500; ++step) {
    const uint64_t f = rng() % kFamilies, depth = 1 + rng() % kDepth, variant = rng() % 3;
    Tokens t = chain(f, depth, variant);
    if (rng() % 3 == 0) {
      auto p = store_->Pin("ns", t, kSession);
      ASSERT_OK(p);
      if (p->lease_id != 0) {
        ASSERT_OK(store_->Release(p->lease_id, kSession));
      }
      continue;
    }
    const StoreStats before = store_->Stats();
    SaveResult r = Save(t);
    const StoreStats after = store_->Stats();
    const uint64_t evicted = after.evictions - before.evictions;
    const uint64_t added = r.stored_tokens > 0 ? 1 : 0;
    ASSERT_EQ(after.tensors, before.tensors + added - evicted) << "step " << step;
    ASSERT_EQ(after.used_bytes, before.used_bytes + r.new_bytes - (after.evicted_bytes - before.evicted_bytes))
        << "step " << step;
    ASSERT_EQ(Matched(t), Blocks(t) * kBt) << "a save must leave its prefix stored (step " << step << ")";
  }
  StoreStats s = store_->Stats();
  EXPECT_GT(s.evictions, 100u);
  ExpectStatsConsistent();
  // Every stored prefix still loads byte-exact.
  for (uint64_t f = 0; f < kFamilies; ++f) {
    for (uint64_t v = 0; v < 3; ++v) {
      Tokens t = chain(f, kDepth, v);
      ExpectStored(t, Matched(t));
    }
  }
}

TEST_F(StoreEvictionTest, PinnedDataIsNeverEvictedAndStaysByteExact) {
  std::vector<Tokens> pinned_prompts;
  std::vector<PrefixResult> pins;
  for (uint64_t i = 0; i < 8; ++i) {
    pinned_prompts.push_back(Prompt(i));
    Save(pinned_prompts.back());
    auto p = store_->Pin("ns", pinned_prompts.back(), kSession);
    ASSERT_OK(p);
    pins.push_back(*p);
  }
  const uint64_t pinned = store_->Stats().pinned_bytes;
  EXPECT_EQ(pinned, 8 * kPromptBytes);
  for (uint64_t i = 100; i < 400; ++i) {
    Save(Prompt(i));
    ASSERT_EQ(store_->Stats().pinned_bytes, pinned);
  }
  StoreStats s = store_->Stats();
  EXPECT_GE(s.evictions, 300u - 56u);
  for (size_t i = 0; i < pins.size(); ++i) {
    EXPECT_TRUE(Present(pinned_prompts[i])) << "a pinned prefix left the index";
    EXPECT_TRUE(Read(pins[i].extents) == Kv(pinned_prompts[i], 0, kPromptBlocks * kBt))
        << "pinned bytes were overwritten";
  }
  store_->ReleaseSession(kSession);
  EXPECT_EQ(store_->Stats().pinned_bytes, 0u);
  for (uint64_t i = 400; i < 470; ++i) Save(Prompt(i));
  uint64_t left = 0;
  for (const Tokens& t : pinned_prompts) left += Present(t);
  EXPECT_EQ(left, 0u) << "once released, cold data is evictable again";
}

TEST_F(StoreEvictionTest, AnArenaFullOfPinnedDataIsResourceExhaustedAndLosesNothing) {
  std::vector<Tokens> prompts;
  std::vector<PrefixResult> pins;
  for (uint64_t i = 0; i < 64; ++i) {
    prompts.push_back(Prompt(i));
    Save(prompts.back());
  }
  for (uint64_t i = 0; i < 60; ++i) {
    auto p = store_->Pin("ns", prompts[i], kSession);
    ASSERT_OK(p);
    pins.push_back(*p);
  }
  // 128 KiB cannot fit next to 960 KiB of pinned data: refused up front.
  Result<SaveResult> big = TrySave("ns", Prompt(100, 128));
  ASSERT_ERROR(big, Code::kResourceExhausted);
  const std::string msg = big.status().message();
  EXPECT_NE(msg.find("pinned"), std::string::npos) << msg;
  EXPECT_NE(msg.find(std::to_string(128 * kBb)), std::string::npos) << "the message names the size asked for: " << msg;
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.evictions, 0u) << "a save that cannot succeed must not evict";
  for (const Tokens& t : prompts) EXPECT_TRUE(Present(t));
  EXPECT_EQ(Matched(Prompt(100, 128)), 0u);
  // 64 KiB fits once the 4 unpinned prompts go.
  SaveResult r = Save(Prompt(101, 64));
  EXPECT_EQ(r.new_bytes, 64 * kBb);
  s = store_->Stats();
  EXPECT_EQ(s.evictions, 4u);
  EXPECT_EQ(s.used_bytes, kMiB);
  // Now nothing at all is evictable but the new prompt.
  Result<SaveResult> more = TrySave("ns", Prompt(102, 80));
  EXPECT_ERROR(more, Code::kResourceExhausted);
  for (size_t i = 0; i < pins.size(); ++i) {
    EXPECT_TRUE(Present(prompts[i]));
    EXPECT_TRUE(Read(pins[i].extents) == Kv(prompts[i], 0, kPromptBlocks * kBt)) << "pinned prompt " << i;
  }
  EXPECT_EQ(store_->Stats().pinned_bytes, 60 * kPromptBytes) << "a failed save leaves no pin behind";
  store_->ReleaseSession(kSession);
  EXPECT_EQ(store_->Stats().pinned_bytes, 0u);
  EXPECT_EQ(Save(Prompt(100, 128)).new_bytes, 128 * kBb) << "the store works again after the release";
  ExpectStored(Prompt(100, 128), 128 * kBt);
  ExpectStatsConsistent();
}

TEST_F(StoreEvictionTest, FragmentedByPinsIsResourceExhaustedWithAClearMessage) {
  std::vector<Tokens> prompts;
  for (uint64_t i = 0; i < 64; ++i) {
    prompts.push_back(Prompt(i));
    Save(prompts.back());
  }
  std::vector<PrefixResult> pins;
  for (uint64_t i = 0; i < 64; i += 2) {  // every other prompt: 16 KiB holes at most
    auto p = store_->Pin("ns", prompts[i], kSession);
    ASSERT_OK(p);
    pins.push_back(*p);
  }
  Result<SaveResult> r = TrySave("ns", Prompt(100, 32));  // 32 KiB: no hole is that large
  ASSERT_ERROR(r, Code::kResourceExhausted);
  EXPECT_NE(r.status().message().find("largest free extent"), std::string::npos) << r.status().ToString();
  for (size_t i = 0; i < pins.size(); ++i) {
    EXPECT_TRUE(Present(prompts[2 * i]));
    EXPECT_TRUE(Read(pins[i].extents) == Kv(prompts[2 * i], 0, kPromptBlocks * kBt));
  }
  // A prompt that fits a hole still saves.
  EXPECT_EQ(Save(Prompt(101)).new_bytes, kPromptBytes);
  store_->ReleaseSession(kSession);
  EXPECT_EQ(Save(Prompt(100, 32)).new_bytes, 32 * kBb);
  ExpectStatsConsistent();
}

TEST_F(StoreEvictionTest, ASaveNeverEvictsThePrefixItExtends) {
  Tokens a = Prompt(0);
  Save(a);  // cold: the lowest priority in the arena
  for (uint64_t i = 1; i < 64; ++i) {
    Save(Prompt(i));
    Hit(Prompt(i), 1);
  }
  Tokens ab = Cat(a, Prompt(100));
  SaveResult r = Save(ab);
  EXPECT_EQ(r.matched_tokens, kPromptBlocks * kBt);
  EXPECT_EQ(r.new_bytes, kPromptBytes);
  EXPECT_EQ(store_->Stats().evictions, 1u);
  ExpectStored(ab, 2 * kPromptBlocks * kBt);
}

TEST_F(StoreEvictionTest, HotPrefixesSurviveAScanOfColdOnes) {
  std::vector<Tokens> hot, same_age;
  for (uint64_t i = 0; i < 16; ++i) {
    hot.push_back(Prompt(i));
    Save(hot.back());
    same_age.push_back(Prompt(50 + i));
    Save(same_age.back());
  }
  for (const Tokens& t : hot) Hit(t, 8);
  for (uint64_t i = 0; i < 200; ++i) Save(Prompt(1000 + i));  // a scan three times the arena
  StoreStats s = store_->Stats();
  EXPECT_GE(s.evictions, 150u);
  for (const Tokens& t : hot) EXPECT_TRUE(Present(t)) << "a hot prefix was evicted by a scan";
  for (const Tokens& t : same_age) EXPECT_FALSE(Present(t)) << "cold data as old as the hot data should be gone";
  for (const Tokens& t : hot) ExpectStored(t, kPromptBlocks * kBt);
}

}  // namespace
}  // namespace ptstore::storage

// Tests of the node store against a real memfd arena: opening, namespaces and
// salts, saves past the LCP, lookups with byte-exact loads, and the counters.
// Pins, leases and LoadCopy are in store_pin_test.cc, removal in
// store_removal_test.cc, GDSF eviction in store_eviction_test.cc; the fixture
// in store_testing.h.
//
// Layout: layers=2 kv_heads=2 head_dim=16 bf16, 4 tokens a block: 256 B a
// token, 1 KiB a block. The KV of token i depends on its position and on
// every token id up to it (as real KV does), so a load that returned another
// branch's bytes, or bytes at the wrong offset, is caught.
#include <algorithm>
#include <random>
#include <set>

#include "tests/storage/store_testing.h"

namespace ptstore::storage {
namespace {

using namespace store_testing;  // NOLINT: the shared fixture (StoreTest)

// ------------------------------------------------------------- open, namespaces

TEST_F(StoreTest, OpenRejectsBadOptions) {
  StoreOptions o = SmallOptions();
  o.arena_bytes = kMiB - 1;
  EXPECT_ERROR(Store::Open(o), Code::kInvalidArgument);
  o = SmallOptions();
  o.replica_share = 1.5;
  EXPECT_ERROR(Store::Open(o), Code::kInvalidArgument);
  o.replica_share = -0.1;
  EXPECT_ERROR(Store::Open(o), Code::kInvalidArgument);
  o = SmallOptions();
  o.alignment = 3000;
  EXPECT_ERROR(Store::Open(o), Code::kInvalidArgument);
  o.alignment = 32;
  EXPECT_ERROR(Store::Open(o), Code::kInvalidArgument);
}

TEST_F(StoreTest, OpenMakesAnEmptyArenaOfTheAskedSize) {
  EXPECT_EQ(store_->arena_bytes(), 16 * kMiB);
  EXPECT_GE(store_->arena_fd(), 0);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.arena_bytes, 16 * kMiB);
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.tensors, 0u);
  EXPECT_EQ(s.namespaces, 1u);
}

TEST_F(StoreTest, CreateNamespaceRejectsBadNamesLayoutsAndModes) {
  const Layout l = SmallLayout();
  for (const std::string& bad : {std::string(), std::string(".hidden"), std::string("a/b"), std::string("a b"),
                                 std::string("x\n"), std::string(129, 'a')}) {
    auto r = store_->CreateNamespace(bad, l, "", 0, 0, 0755, false);
    EXPECT_ERROR(r, Code::kInvalidArgument) << "name '" << bad << "'";
  }
  EXPECT_OK(store_->CreateNamespace(std::string(128, 'a'), l, "", 0, 0, 0755, false));
  EXPECT_OK(store_->CreateNamespace("Mistral-7B_v0.2", l, "", 0, 0, 0755, false));

  auto bad_layout = [&](auto mutate) {
    Layout b = SmallLayout();
    mutate(b);
    return store_->CreateNamespace("bad-layout", b, "", 0, 0, 0755, false).status();
  };
  EXPECT_ERROR(bad_layout([](Layout& b) { b.layers = 0; }), Code::kInvalidArgument);
  EXPECT_ERROR(bad_layout([](Layout& b) { b.kv_heads = 0; }), Code::kInvalidArgument);
  EXPECT_ERROR(bad_layout([](Layout& b) { b.head_dim = 0; }), Code::kInvalidArgument);
  EXPECT_ERROR(bad_layout([](Layout& b) { b.block_tokens = 0; }), Code::kInvalidArgument);
  EXPECT_ERROR(bad_layout([](Layout& b) { b.dtype = static_cast<DType>(99); }), Code::kInvalidArgument);
  Status huge = bad_layout([](Layout& b) {
    b.layers = 1024;
    b.kv_heads = 1024;
    b.head_dim = 16384;
    b.block_tokens = 65536;
  });
  EXPECT_ERROR(huge, Code::kInvalidArgument);
  EXPECT_ERROR(store_->GetNamespace("bad-layout"), Code::kNotFound) << "nothing half-created";

  EXPECT_ERROR(store_->CreateNamespace("bad-mode", l, "", 0, 0, 010000, false), Code::kInvalidArgument);
  EXPECT_EQ(store_->ListNamespaces().size(), 3u);
}

TEST_F(StoreTest, CreateNamespaceExistOkAcceptsOnlyTheSameLayoutAndSalt) {
  const Layout l = SmallLayout();
  auto first = store_->CreateNamespace("tenant", l, "salt-a", 5, 6, 0750, false);
  ASSERT_OK(first);
  EXPECT_TRUE(first->salted);
  EXPECT_EQ(first->uid, 5u);
  EXPECT_EQ(first->gid, 6u);
  EXPECT_EQ(first->mode, 0750u);
  EXPECT_EQ(first->layout, l);

  auto again = store_->CreateNamespace("tenant", l, "salt-a", 5, 6, 0750, false);
  EXPECT_ERROR(again, Code::kAlreadyExists) << "without exist_ok an existing namespace is an error";

  auto same = store_->CreateNamespace("tenant", l, "salt-a", 9, 9, 0700, true);
  ASSERT_OK(same);
  EXPECT_EQ(same->uid, 5u) << "exist_ok returns the existing namespace unchanged";
  EXPECT_EQ(same->mode, 0750u);

  Layout other = l;
  other.head_dim = 32;
  auto diff_layout = store_->CreateNamespace("tenant", other, "salt-a", 5, 6, 0750, true);
  EXPECT_ERROR(diff_layout, Code::kAlreadyExists);
  EXPECT_NE(diff_layout.status().message().find(l.ToString()), std::string::npos) << diff_layout.status().ToString();
  EXPECT_NE(diff_layout.status().message().find(other.ToString()), std::string::npos);

  auto diff_salt = store_->CreateNamespace("tenant", l, "salt-b", 5, 6, 0750, true);
  EXPECT_ERROR(diff_salt, Code::kAlreadyExists);
  EXPECT_EQ(diff_salt.status().message().find("salt-a"), std::string::npos) << "the salt must never leave the server";
  auto no_salt = store_->CreateNamespace("tenant", l, "", 5, 6, 0750, true);
  EXPECT_ERROR(no_salt, Code::kAlreadyExists);

  auto got = store_->GetNamespace("tenant");
  ASSERT_OK(got);
  EXPECT_TRUE(got->salted);
  EXPECT_EQ(got->layout, l);
}

TEST_F(StoreTest, UnknownNamespaceIsNotFoundEverywhere) {
  Tokens t = RandomTokens(1, 8);
  std::vector<uint8_t> data = Kv(t, 0, 8);
  uint8_t buf[4096];
  EXPECT_ERROR(store_->Save("nope", t, data.data(), data.size(), 0), Code::kNotFound);
  EXPECT_ERROR(store_->Lookup("nope", t), Code::kNotFound);
  EXPECT_ERROR(store_->Pin("nope", t, kSession), Code::kNotFound);
  EXPECT_ERROR(store_->LoadCopy("nope", t, buf, sizeof(buf)), Code::kNotFound);
  EXPECT_ERROR(store_->Remove("nope", t), Code::kNotFound);
  EXPECT_ERROR(store_->RemoveByKey("nope", KeyAt(t, 0)), Code::kNotFound);
  EXPECT_ERROR(store_->ListTree("nope", ChainKey{}, true), Code::kNotFound);
  EXPECT_ERROR(store_->DropNamespace("nope"), Code::kNotFound);
  Result<NamespaceInfo> g = store_->GetNamespace("nope");
  EXPECT_ERROR(g, Code::kNotFound);
  EXPECT_NE(g.status().message().find("nope"), std::string::npos) << "the message names the namespace";
  EXPECT_EQ(store_->Stats().active_leases, 0u);
}

// ----------------------------------------------------------------------- save

TEST_F(StoreTest, SaveThenLookupAndPinAreByteExact) {
  Tokens t = RandomTokens(1, 10 * kBt + 3);  // 10 whole blocks and a partial one
  SaveResult r = Save(t);
  EXPECT_EQ(r.matched_tokens, 0u);
  EXPECT_EQ(r.stored_tokens, 10 * kBt);
  EXPECT_EQ(r.new_bytes, 10 * kBb);
  ExpectStored(t, 10 * kBt);
  Result<PrefixResult> l = store_->Lookup("ns", t);
  ASSERT_OK(l);
  ASSERT_EQ(l->extents.size(), 1u) << "one save, one tensor, one extent";
  EXPECT_EQ(l->extents[0].offset, 0u);
  EXPECT_EQ(l->extents[0].length, 10 * kBb);
  EXPECT_EQ(l->extents[0].tensor.owner(), NodeId{0});
  // Shorter and longer queries.
  ExpectStored(Head(t, 7 * kBt + 1), 7 * kBt);
  ExpectStored(Cat(Head(t, 10 * kBt), RandomTokens(2, 20)), 10 * kBt);
  ExpectStored(Head(t, 3), 0);
  ExpectStored(RandomTokens(3, 10 * kBt), 0);  // same length, other tokens
  Tokens one_off = t;
  one_off[0] ^= 1;
  ExpectStored(one_off, 0);
  Tokens late_diff = t;
  late_diff[6 * kBt + 2] ^= 1;
  ExpectStored(late_diff, 6 * kBt);
  ExpectStatsConsistent();
}

TEST_F(StoreTest, SaveStoresOnlyTheBlocksPastTheLongestCommonPrefix) {
  Tokens a = RandomTokens(1, 5 * kBt);
  Tokens ab = Cat(a, RandomTokens(2, 3 * kBt + 1));
  Tokens abc = Cat(Head(ab, 8 * kBt), RandomTokens(3, 6 * kBt));
  EXPECT_EQ(Save(a).new_bytes, 5 * kBb);
  SaveResult r = Save(ab);
  EXPECT_EQ(r.matched_tokens, 5 * kBt);
  EXPECT_EQ(r.stored_tokens, 3 * kBt);
  EXPECT_EQ(r.new_bytes, 3 * kBb);
  r = Save(abc);
  EXPECT_EQ(r.matched_tokens, 8 * kBt);
  EXPECT_EQ(r.stored_tokens, 6 * kBt);
  EXPECT_EQ(r.new_bytes, 6 * kBb);
  Result<PrefixResult> l = store_->Lookup("ns", abc);
  ASSERT_OK(l);
  ASSERT_EQ(l->extents.size(), 3u);
  EXPECT_EQ(l->extents[0].length, 5 * kBb);
  EXPECT_EQ(l->extents[1].length, 3 * kBb);
  EXPECT_EQ(l->extents[2].length, 6 * kBb);
  for (const Extent& x : l->extents) EXPECT_EQ(x.offset, 0u);
  ExpectStored(a, 5 * kBt);
  ExpectStored(ab, 8 * kBt);
  ExpectStored(abc, 14 * kBt);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.saved_bytes, 14 * kBb);
  EXPECT_EQ(s.tensors, 3u);
  EXPECT_EQ(s.prefix_nodes, 3u);
  ExpectStatsConsistent();
}

TEST_F(StoreTest, ResavingAStoredPrefixStoresNothingAndCountsDedup) {
  Tokens t = RandomTokens(1, 6 * kBt);
  Save(t);
  StoreStats before = store_->Stats();
  SaveResult r = Save(t);
  EXPECT_EQ(r.matched_tokens, 6 * kBt);
  EXPECT_EQ(r.stored_tokens, 0u);
  EXPECT_EQ(r.new_bytes, 0u);
  r = Save(Head(t, 4 * kBt + 2));  // a stored prefix of it, with a partial block
  EXPECT_EQ(r.matched_tokens, 4 * kBt);
  EXPECT_EQ(r.stored_tokens, 0u);
  StoreStats after = store_->Stats();
  EXPECT_EQ(after.saved_bytes, before.saved_bytes);
  EXPECT_EQ(after.used_bytes, before.used_bytes);
  EXPECT_EQ(after.tensors, 1u);
  EXPECT_EQ(after.saves, before.saves + 2);
  EXPECT_EQ(after.dedup_bytes, before.dedup_bytes + 6 * kBb + 4 * kBb);
  ExpectStored(t, 6 * kBt);
}

TEST_F(StoreTest, PartialLastBlockIsIgnoredNotAnError) {
  Tokens t = RandomTokens(1, 3 * kBt + kBt - 1);
  SaveResult r = Save(t);
  EXPECT_EQ(r.stored_tokens, 3 * kBt);
  EXPECT_EQ(r.new_bytes, 3 * kBb);
  // Fewer tokens than a block: nothing to store, not an error, length 0.
  Tokens tiny = RandomTokens(2, kBt - 1);
  Result<SaveResult> z = store_->Save("ns", tiny, nullptr, 0, 0);
  ASSERT_OK(z);
  EXPECT_EQ(z->stored_tokens, 0u);
  EXPECT_EQ(z->new_bytes, 0u);
  Result<SaveResult> e = store_->Save("ns", {}, nullptr, 0, 0);
  ASSERT_OK(e);
  EXPECT_EQ(e->stored_tokens, 0u);
  EXPECT_EQ(Matched(tiny), 0u);
  EXPECT_EQ(store_->Stats().tensors, 1u);
  // Bytes for the partial block are a size error: the buffer holds whole blocks.
  std::vector<uint8_t> with_partial = Kv(t, 0, t.size());
  Result<SaveResult> bad = store_->Save("ns", t, with_partial.data(), with_partial.size(), 0);
  EXPECT_ERROR(bad, Code::kInvalidArgument);
}

TEST_F(StoreTest, WrongBufferSizeIsInvalidArgumentNamingTheSizes) {
  Tokens t = RandomTokens(1, 5 * kBt);
  std::vector<uint8_t> data = Kv(t, 0, t.size());
  for (uint64_t len : {uint64_t{0}, 5 * kBb - 1, 5 * kBb + 1, 4 * kBb, 6 * kBb}) {
    std::vector<uint8_t> buf(std::max<uint64_t>(len, 1));
    Result<SaveResult> r = store_->Save("ns", t, buf.data(), len, 0);
    ASSERT_ERROR(r, Code::kInvalidArgument) << len;
    EXPECT_NE(r.status().message().find(std::to_string(len)), std::string::npos) << r.status().ToString();
    EXPECT_NE(r.status().message().find(std::to_string(5 * kBb)), std::string::npos) << r.status().ToString();
  }
  // With first_block, the buffer holds only the blocks from there on.
  Result<SaveResult> r = store_->Save("ns", t, data.data(), data.size(), 2);
  ASSERT_ERROR(r, Code::kInvalidArgument);
  EXPECT_NE(r.status().message().find(std::to_string(3 * kBb)), std::string::npos) << r.status().ToString();
  EXPECT_ERROR(store_->Save("ns", t, data.data(), 0, 6), Code::kInvalidArgument)
      << "first_block past the prompt";
  EXPECT_ERROR(store_->Save("ns", t, nullptr, 5 * kBb, 0), Code::kInvalidArgument) << "null buffer";
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.used_bytes, 0u);
  EXPECT_EQ(s.tensors, 0u);
  EXPECT_EQ(s.saved_bytes, 0u);
  EXPECT_EQ(Matched(t), 0u);
}

TEST_F(StoreTest, SaveFromFirstBlockUsesTheRightBytesOfTheBuffer) {
  Tokens a = RandomTokens(1, 6 * kBt);
  Tokens ab = Cat(a, RandomTokens(2, 4 * kBt));
  Save(a);
  // The client knows 4 blocks are stored (it looked up earlier); 6 are.
  SaveResult r = Save(ab, 4);
  EXPECT_EQ(r.matched_tokens, 6 * kBt);
  EXPECT_EQ(r.stored_tokens, 4 * kBt);
  EXPECT_EQ(r.new_bytes, 4 * kBb);
  ExpectStored(ab, 10 * kBt);
  // Exactly at the match.
  Tokens abc = Cat(ab, RandomTokens(3, 2 * kBt));
  r = Save(abc, 10);
  EXPECT_EQ(r.stored_tokens, 2 * kBt);
  ExpectStored(abc, 12 * kBt);
  // Everything already stored.
  r = Save(abc, 11);
  EXPECT_EQ(r.stored_tokens, 0u);
  EXPECT_EQ(r.matched_tokens, 12 * kBt);
  ExpectStored(abc, 12 * kBt);
}

TEST_F(StoreTest, SaveFromFirstBlockAbortsWhenTheEarlierBlocksAreGone) {
  Tokens a = RandomTokens(1, 4 * kBt);
  Tokens ab = Cat(a, RandomTokens(2, 4 * kBt));
  Save(a);
  ASSERT_OK(store_->Remove("ns", a));
  Result<SaveResult> r = TrySave("ns", ab, 4);
  EXPECT_ERROR(r, Code::kAborted);
  EXPECT_EQ(Matched(ab), 0u);
  EXPECT_EQ(store_->Stats().used_bytes, 0u);
  // Retrying from block 0, as the message says, works.
  EXPECT_EQ(Save(ab).stored_tokens, 8 * kBt);
  ExpectStored(ab, 8 * kBt);
}

TEST_F(StoreTest, NamespacesAndSaltsDoNotShare) {
  const Layout l = SmallLayout();
  ASSERT_OK(store_->CreateNamespace("ns2", l, "", 0, 0, 0755, false));
  ASSERT_OK(store_->CreateNamespace("salted", l, "tenant-a", 0, 0, 0755, false));
  ASSERT_OK(store_->CreateNamespace("salted-b", l, "tenant-b", 0, 0, 0755, false));
  Tokens t = RandomTokens(1, 6 * kBt);
  Save(t);
  EXPECT_EQ(Matched(t, "ns2"), 0u);
  EXPECT_EQ(Matched(t, "salted"), 0u);
  SaveResult r = Save(t, 0, CacheClass::kOwned, "salted");
  EXPECT_EQ(r.matched_tokens, 0u) << "no dedup across tenants";
  EXPECT_EQ(r.new_bytes, 6 * kBb);
  EXPECT_EQ(Matched(t, "salted-b"), 0u);
  ExpectStored(t, 6 * kBt, "salted");
  ExpectStored(t, 6 * kBt, "ns");
  // Names come from the namespace's own root (name and salt).
  auto in_ns = Tree("ns");
  auto in_salted = Tree("salted");
  ASSERT_EQ(in_ns.size(), 1u);
  ASSERT_EQ(in_salted.size(), 1u);
  EXPECT_EQ(in_ns[0].key, KeyAt(t, 5, "ns", ""));
  EXPECT_EQ(in_salted[0].key, KeyAt(t, 5, "salted", "tenant-a"));
  EXPECT_NE(in_ns[0].key, in_salted[0].key);
  EXPECT_NE(in_ns[0].tensor, in_salted[0].tensor);
  EXPECT_ERROR(store_->RemoveByKey("salted", in_ns[0].key), Code::kNotFound);
  // Removing in one namespace leaves the other alone.
  ASSERT_OK(store_->Remove("salted", t));
  EXPECT_EQ(Matched(t, "salted"), 0u);
  ExpectStored(t, 6 * kBt, "ns");
  EXPECT_EQ(store_->GetNamespace("ns")->bytes, 6 * kBb);
  EXPECT_EQ(store_->GetNamespace("salted")->bytes, 0u);
}

TEST_F(StoreTest, LookupMergesAdjacentSlicesOfOneTensor) {
  Tokens a = RandomTokens(1, 8 * kBt);
  Save(a);
  // Three branches inside `a` split its node into four slices of one tensor.
  for (uint64_t at : {2u, 5u, 7u}) Save(Cat(Head(a, at * kBt), RandomTokens(10 + at, 2 * kBt)));
  ASSERT_EQ(store_->Stats().prefix_nodes, 4u + 3u);
  Result<PrefixResult> l = store_->Lookup("ns", a);
  ASSERT_OK(l);
  ASSERT_EQ(l->extents.size(), 1u) << "the split is metadata only: still one extent";
  EXPECT_EQ(l->extents[0].offset, 0u);
  EXPECT_EQ(l->extents[0].length, 8 * kBb);
  ExpectStored(a, 8 * kBt);
  // A branch: a slice of a's tensor, then its own tensor.
  Tokens b = Cat(Head(a, 5 * kBt), RandomTokens(15, 2 * kBt));
  Result<PrefixResult> lb = store_->Lookup("ns", b);
  ASSERT_OK(lb);
  ASSERT_EQ(lb->extents.size(), 2u);
  EXPECT_EQ(lb->extents[0].tensor, l->extents[0].tensor);
  EXPECT_EQ(lb->extents[0].offset, 0u);
  EXPECT_EQ(lb->extents[0].length, 5 * kBb);
  EXPECT_EQ(lb->extents[1].offset, 0u);
  EXPECT_EQ(lb->extents[1].length, 2 * kBb);
  ExpectStored(b, 7 * kBt);
  // A prefix ending in the middle of a slice.
  ExpectStored(Head(a, 6 * kBt), 6 * kBt);
  ExpectStored(Head(a, 1 * kBt), 1 * kBt);
}

TEST_F(StoreTest, BranchInsideAnIncrementSplitsMetadataOnlyAndNamesByChainKeys) {
  Tokens a = RandomTokens(1, 8 * kBt);
  Save(a);
  const uint64_t used = store_->Stats().used_bytes;
  Tokens b = Cat(Head(a, 3 * kBt), RandomTokens(2, 5 * kBt));
  SaveResult r = Save(b);
  EXPECT_EQ(r.matched_tokens, 3 * kBt);
  EXPECT_EQ(r.new_bytes, 5 * kBb);
  EXPECT_EQ(store_->Stats().used_bytes, used + 5 * kBb + (4096 - 5 * kBb % 4096) % 4096)
      << "the branch adds its own bytes only (rounded to the 4 KiB alignment)";
  ExpectStored(a, 8 * kBt);
  ExpectStored(b, 8 * kBt);

  std::vector<PrefixNodeInfo> nodes = Tree();
  ASSERT_EQ(nodes.size(), 3u);
  // Depth-first, children sorted by key: the upper part first.
  const PrefixNodeInfo& up = nodes[0];
  EXPECT_EQ(up.key, KeyAt(a, 2));
  EXPECT_EQ(up.parent, ChainKey{});
  EXPECT_EQ(up.start_token, 0u);
  EXPECT_EQ(up.tokens, 3 * kBt);
  EXPECT_EQ(up.bytes, 3 * kBb);
  EXPECT_EQ(up.children, 2u);
  std::map<ChainKey, PrefixNodeInfo> by_key;
  for (const auto& n : nodes) by_key[n.key] = n;
  ASSERT_TRUE(by_key.count(KeyAt(a, 7)));
  ASSERT_TRUE(by_key.count(KeyAt(b, 7)));
  const PrefixNodeInfo& lower = by_key[KeyAt(a, 7)];
  const PrefixNodeInfo& branch = by_key[KeyAt(b, 7)];
  EXPECT_EQ(lower.parent, up.key);
  EXPECT_EQ(lower.start_token, 3 * kBt);
  EXPECT_EQ(lower.tokens, 5 * kBt);
  EXPECT_EQ(lower.tensor, up.tensor) << "both halves of the split still point into one tensor";
  EXPECT_EQ(branch.parent, up.key);
  EXPECT_NE(branch.tensor, up.tensor);
  EXPECT_EQ(branch.start_token, 3 * kBt);
  // Non-recursive listing and listing below a node.
  auto top = store_->ListTree("ns", ChainKey{}, false);
  ASSERT_OK(top);
  ASSERT_EQ(top->size(), 1u);
  EXPECT_EQ((*top)[0].key, up.key);
  auto below = store_->ListTree("ns", up.key, false);
  ASSERT_OK(below);
  EXPECT_EQ(below->size(), 2u);
  auto leaf = store_->ListTree("ns", lower.key, true);
  ASSERT_OK(leaf);
  EXPECT_TRUE(leaf->empty());
  EXPECT_ERROR(store_->ListTree("ns", KeyAt(a, 4), false), Code::kNotFound)
      << "a key inside an increment names nothing";
  // A pin shows on every node of its tensors.
  Result<PrefixResult> p = store_->Pin("ns", a, kSession);
  ASSERT_OK(p);
  for (const auto& n : Tree()) {
    if (n.tensor == up.tensor) {
      EXPECT_EQ(n.pins, 1u);
    } else {
      EXPECT_EQ(n.pins, 0u);
    }
  }
  EXPECT_OK(store_->Release(p->lease_id, kSession));
}

TEST_F(StoreTest, EveryNodeIsNamedByTheChainKeyOfItsLastBlock) {
  std::vector<Tokens> prompts;
  Tokens base = RandomTokens(1, 12 * kBt);
  prompts.push_back(base);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 30; ++i) {
    const Tokens& from = prompts[rng() % prompts.size()];
    uint64_t at = 1 + rng() % Blocks(from);
    prompts.push_back(Cat(Head(from, at * kBt), RandomTokens(100 + i, (1 + rng() % 6) * kBt)));
  }
  for (const Tokens& p : prompts) Save(p);
  std::set<ChainKey> all_keys;
  for (const Tokens& p : prompts) {
    auto ks = ChainKeys(RootKey("ns", ""), p, kBt);
    all_keys.insert(ks.begin(), ks.end());
  }
  auto nodes = Tree();
  EXPECT_EQ(nodes.size(), store_->Stats().prefix_nodes);
  std::set<ChainKey> seen;
  for (const PrefixNodeInfo& n : nodes) {
    EXPECT_TRUE(all_keys.count(n.key)) << "node " << n.key.ToHex() << " is not a chain key of any saved prompt";
    EXPECT_TRUE(seen.insert(n.key).second) << "two nodes with one name";
    // Find a prompt through this node and recompute both names.
    bool found = false;
    for (const Tokens& p : prompts) {
      const uint64_t end = (n.start_token + n.tokens) / kBt;
      if (Blocks(p) < end) continue;
      auto ks = ChainKeys(RootKey("ns", ""), p, kBt);
      if (ks[end - 1] != n.key) continue;
      found = true;
      EXPECT_EQ(n.parent, n.start_token == 0 ? ChainKey{} : ks[n.start_token / kBt - 1]);
      break;
    }
    EXPECT_TRUE(found);
    EXPECT_EQ(n.bytes, n.tokens * kBpt);
  }
  for (const Tokens& p : prompts) ExpectStored(p, Blocks(p) * kBt);
  ExpectStatsConsistent();
}

// ------------------------------------------------------------------- counters

TEST_F(StoreTest, CountersAddUp) {
  ASSERT_OK(store_->CreateNamespace("rep", SmallLayout(), "", 0, 0, 0755, false));
  Tokens a = RandomTokens(1, 4 * kBt);
  Tokens ab = Cat(a, RandomTokens(2, 2 * kBt));
  Tokens abc = Cat(ab, RandomTokens(3, 3 * kBt));
  uint64_t offered = 0;
  auto save = [&](const Tokens& t, uint64_t first_block, CacheClass cls = CacheClass::kOwned,
                  const std::string& ns = "ns") {
    // A save offers every whole block of its prompt, also those the client
    // did not copy because it knew they were stored (first_block > 0).
    offered += Blocks(t) * kBb;
    return Save(t, first_block, cls, ns);
  };
  save(a, 0);                               // 4 new
  save(a, 0);                               // 4 dedup
  save(ab, 0);                              // 4 dedup, 2 new
  save(ab, 4);                              // 6 dedup (4 of them not sent)
  save(abc, 6);                             // 6 dedup (not sent), 3 new
  save(Head(a, 2), 0);                      // nothing offered
  save(RandomTokens(4, 5 * kBt), 0, CacheClass::kReplica, "rep");  // 5 new replica bytes
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.saves, 7u);
  EXPECT_EQ(s.saved_bytes, (4 + 2 + 3 + 5) * kBb);
  EXPECT_EQ(s.saved_bytes + s.dedup_bytes, offered)
      << "every offered byte is either written or already stored (dedup_bytes=" << s.dedup_bytes << ")";
  EXPECT_EQ(s.dedup_bytes, (4 + 4 + 6 + 6) * kBb);
  EXPECT_EQ(s.tensors, 4u);
  EXPECT_EQ(s.prefix_nodes, 4u);
  EXPECT_EQ(s.namespaces, 2u);
  EXPECT_EQ(s.owned_bytes, 3 * 4096u);
  EXPECT_EQ(s.replica_bytes, 8192u);
  EXPECT_EQ(s.used_bytes, s.owned_bytes + s.replica_bytes);
  EXPECT_EQ(store_->GetNamespace("ns")->bytes, 9 * kBb);
  EXPECT_EQ(store_->GetNamespace("ns")->prefixes, 3u);
  EXPECT_EQ(store_->GetNamespace("rep")->bytes, 5 * kBb);

  // Lookups, pins and loads: each asks for its whole blocks and is one hit
  // (some block matched) or one miss.
  uint64_t asks = 0, hits = 0, misses = 0, requested = 0, hit_tokens = 0;
  auto count = [&](const Tokens& t, uint64_t matched) {
    ++asks;
    requested += Blocks(t) * kBt;
    if (matched > 0) {
      ++hits;
      hit_tokens += matched;
    } else {
      ++misses;
    }
  };
  const StoreStats s0 = store_->Stats();
  EXPECT_EQ(Matched(ab), 6 * kBt);
  count(ab, 6 * kBt);
  EXPECT_EQ(Matched(RandomTokens(8, 3 * kBt)), 0u);
  count(RandomTokens(8, 3 * kBt), 0);
  EXPECT_EQ(Matched(Head(a, 3)), 0u);
  count(Head(a, 3), 0);
  Tokens longer = Cat(abc, RandomTokens(9, 2 * kBt + 1));
  auto p = store_->Pin("ns", longer, kSession);
  ASSERT_OK(p);
  count(longer, 9 * kBt);
  EXPECT_EQ(store_->Stats().pinned_bytes, 3 * 4096u);
  EXPECT_EQ(store_->Stats().active_leases, 1u);
  auto miss = store_->Pin("ns", RandomTokens(10, 4 * kBt), kSession);
  ASSERT_OK(miss);
  count(RandomTokens(10, 4 * kBt), 0);
  std::vector<uint8_t> buf(6 * kBb);
  auto n = store_->LoadCopy("ns", ab, buf.data(), buf.size());
  ASSERT_OK(n);
  count(ab, 6 * kBt);
  EXPECT_OK(store_->Release(p->lease_id, kSession));
  StoreStats s1 = store_->Stats();
  EXPECT_EQ(s1.hits - s0.hits, hits);
  EXPECT_EQ(s1.misses - s0.misses, misses);
  EXPECT_EQ(s1.hit_tokens - s0.hit_tokens, hit_tokens);
  EXPECT_EQ(s1.requested_tokens - s0.requested_tokens, requested);
  EXPECT_EQ((s1.hits + s1.misses) - (s0.hits + s0.misses), asks) << "every lookup or load is a hit or a miss";
  EXPECT_EQ(s1.lookups - s0.lookups, 3u) << "plain lookups";
  EXPECT_EQ(s1.pinned_bytes, 0u);
  EXPECT_EQ(s1.active_leases, 0u);
  EXPECT_EQ(s1.evictions, 0u);
  EXPECT_EQ(s1.evicted_bytes, 0u);
  // Removal gives the bytes back.
  ASSERT_OK(store_->DropNamespace("rep"));
  ASSERT_OK(store_->Remove("ns", a));
  StoreStats s2 = store_->Stats();
  EXPECT_EQ(s2.used_bytes, 0u);
  EXPECT_EQ(s2.owned_bytes, 0u);
  EXPECT_EQ(s2.replica_bytes, 0u);
  EXPECT_EQ(s2.tensors, 0u);
  EXPECT_EQ(s2.prefix_nodes, 0u);
  EXPECT_EQ(s2.saved_bytes, s.saved_bytes) << "saved_bytes is a running total";
}

}  // namespace
}  // namespace ptstore::storage

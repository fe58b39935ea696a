// Tests of the node store against a real memfd arena: saves past the LCP,
// lookups and pins with byte-exact loads, leases, removal, namespaces and
// salts, GDSF eviction (replicas, pins, ancestors, frequency) and the
// counters.
//
// Layout: layers=2 kv_heads=2 head_dim=16 bf16, 4 tokens a block: 256 B a
// token, 1 KiB a block. The KV of token i depends on its position and on
// every token id up to it (as real KV does), so a load that returned another
// branch's bytes, or bytes at the wrong offset, is caught.
#include "storage/cache/store.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <span>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "tests/storage/kv_fixture.h"

#include "ptstore/keys.h"
#include "ptstore/layout.h"
#include "ptstore/status.h"
#include "ptstore/types.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

using namespace testkv;  // NOLINT: the shared test fixture

constexpr uint64_t kSession = 77;








uint64_t Blocks(const Tokens& t) { return t.size() / kBt; }

StoreOptions SmallOptions(uint64_t arena = 16 * kMiB) {
  StoreOptions o;
  o.arena_bytes = arena;
  o.prefault = false;
  o.try_huge_pages = false;
  return o;
}

class StoreTest : public ::testing::Test {
 protected:
  virtual StoreOptions Options() { return SmallOptions(); }

  void SetUp() override { Reopen(Options()); }

  void Reopen(const StoreOptions& o) {
    store_.reset();
    auto s = Store::Open(o);
    ASSERT_OK(s);
    store_ = std::move(*s);
    auto ns = store_->CreateNamespace("ns", SmallLayout(), "", 1000, 1000, 0755, false);
    ASSERT_OK(ns);
  }

  Result<SaveResult> TrySave(const std::string& ns, const Tokens& tokens, uint64_t first_block = 0,
                             CacheClass cls = CacheClass::kOwned) {
    const uint64_t blocks = Blocks(tokens);
    std::vector<uint8_t> data = Kv(tokens, first_block * kBt, blocks * kBt);
    return store_->Save(ns, tokens, data.data(), data.size(), first_block, cls);
  }

  SaveResult Save(const Tokens& tokens, uint64_t first_block = 0, CacheClass cls = CacheClass::kOwned,
                  const std::string& ns = "ns") {
    Result<SaveResult> r = TrySave(ns, tokens, first_block, cls);
    EXPECT_OK(r);
    return r.ok() ? *r : SaveResult{};
  }

  // Matched tokens by a plain lookup (no hit is counted on the tensors).
  uint64_t Matched(const Tokens& tokens, const std::string& ns = "ns") {
    Result<PrefixResult> r = store_->Lookup(ns, tokens);
    EXPECT_OK(r);
    return r.ok() ? r->matched_tokens : 0;
  }

  std::vector<uint8_t> Read(const std::vector<Extent>& xs) const {
    std::vector<uint8_t> out;
    for (const Extent& x : xs) {
      EXPECT_LE(x.arena_offset + x.length, store_->arena_bytes());
      const uint8_t* p = store_->arena_base() + x.arena_offset;
      out.insert(out.end(), p, p + x.length);
    }
    return out;
  }

  // Pins `tokens`, checks that `want` tokens match, that the extent list is
  // well formed and equal to Lookup's, and that its bytes are the KV of the
  // tokens; then releases the pin.
  void ExpectStored(const Tokens& tokens, uint64_t want, const std::string& ns = "ns") {
    SCOPED_TRACE("prefix of " + std::to_string(tokens.size()) + " tokens");
    Result<PrefixResult> look = store_->Lookup(ns, tokens);
    ASSERT_OK(look);
    Result<PrefixResult> pin = store_->Pin(ns, tokens, kSession);
    ASSERT_OK(pin);
    EXPECT_EQ(look->matched_tokens, want);
    EXPECT_EQ(pin->matched_tokens, want);
    ASSERT_EQ(look->extents.size(), pin->extents.size());
    uint64_t total = 0;
    std::map<uint64_t, uint64_t> base_of;  // tensor -> arena offset of its byte 0
    for (size_t i = 0; i < pin->extents.size(); ++i) {
      const Extent& l = look->extents[i];
      const Extent& p = pin->extents[i];
      EXPECT_EQ(l.tensor, p.tensor);
      EXPECT_EQ(l.offset, p.offset);
      EXPECT_EQ(l.length, p.length);
      EXPECT_EQ(l.arena_offset, 0u) << "a plain lookup has no arena offsets";
      EXPECT_GT(p.length, 0u);
      EXPECT_EQ(p.length % kBb, 0u);
      EXPECT_EQ(p.offset % kBb, 0u);
      auto [it, fresh] = base_of.emplace(p.tensor.value, p.arena_offset - p.offset);
      EXPECT_EQ(it->second, p.arena_offset - p.offset) << "one tensor, one place in the arena";
      if (i > 0) {
        const Extent& prev = pin->extents[i - 1];
        EXPECT_FALSE(prev.tensor == p.tensor && prev.offset + prev.length == p.offset)
            << "adjacent slices of one tensor must be merged into one extent";
      }
      total += p.length;
    }
    EXPECT_EQ(total, want * kBpt);
    if (want > 0) {
      EXPECT_NE(pin->lease_id, 0u);
      std::vector<uint8_t> got = Read(pin->extents);
      std::vector<uint8_t> expect = Kv(tokens, 0, want);
      EXPECT_TRUE(got == expect) << "loaded bytes differ from the saved KV";
      EXPECT_OK(store_->Release(pin->lease_id, kSession));
    } else {
      EXPECT_EQ(pin->lease_id, 0u);
      EXPECT_TRUE(pin->extents.empty());
    }
  }

  std::vector<PrefixNodeInfo> Tree(const std::string& ns = "ns") {
    auto r = store_->ListTree(ns, ChainKey{}, true);
    EXPECT_OK(r);
    return r.ok() ? *r : std::vector<PrefixNodeInfo>{};
  }

  ChainKey KeyAt(const Tokens& tokens, uint64_t block, const std::string& ns = "ns", const std::string& salt = "") {
    return ChainKeys(RootKey(ns, salt), tokens, kBt).at(block);
  }

  void ExpectStatsConsistent() {
    StoreStats s = store_->Stats();
    EXPECT_EQ(s.used_bytes, s.owned_bytes + s.replica_bytes);
    EXPECT_LE(s.pinned_bytes, s.used_bytes);
    EXPECT_LE(s.used_bytes, s.arena_bytes);
    if (s.active_leases == 0) {
      EXPECT_EQ(s.pinned_bytes, 0u);
    }
    uint64_t ns_bytes = 0, ns_nodes = 0;
    for (const NamespaceInfo& n : store_->ListNamespaces()) {
      ns_bytes += n.bytes;
      ns_nodes += n.prefixes;
    }
    EXPECT_LE(ns_bytes, s.used_bytes);
    EXPECT_EQ(ns_nodes, s.prefix_nodes);
  }

  std::unique_ptr<Store> store_;
};

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
  Tokens t = Gen(1, 8);
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
  Tokens t = Gen(1, 10 * kBt + 3);  // 10 whole blocks and a partial one
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
  ExpectStored(Cat(Head(t, 10 * kBt), Gen(2, 20)), 10 * kBt);
  ExpectStored(Head(t, 3), 0);
  ExpectStored(Gen(3, 10 * kBt), 0);  // same length, other tokens
  Tokens one_off = t;
  one_off[0] ^= 1;
  ExpectStored(one_off, 0);
  Tokens late_diff = t;
  late_diff[6 * kBt + 2] ^= 1;
  ExpectStored(late_diff, 6 * kBt);
  ExpectStatsConsistent();
}

TEST_F(StoreTest, SaveStoresOnlyTheBlocksPastTheLongestCommonPrefix) {
  Tokens a = Gen(1, 5 * kBt);
  Tokens ab = Cat(a, Gen(2, 3 * kBt + 1));
  Tokens abc = Cat(Head(ab, 8 * kBt), Gen(3, 6 * kBt));
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
  Tokens t = Gen(1, 6 * kBt);
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
  Tokens t = Gen(1, 3 * kBt + kBt - 1);
  SaveResult r = Save(t);
  EXPECT_EQ(r.stored_tokens, 3 * kBt);
  EXPECT_EQ(r.new_bytes, 3 * kBb);
  // Fewer tokens than a block: nothing to store, not an error, length 0.
  Tokens tiny = Gen(2, kBt - 1);
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
  Tokens t = Gen(1, 5 * kBt);
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
  Tokens a = Gen(1, 6 * kBt);
  Tokens ab = Cat(a, Gen(2, 4 * kBt));
  Save(a);
  // The client knows 4 blocks are stored (it looked up earlier); 6 are.
  SaveResult r = Save(ab, 4);
  EXPECT_EQ(r.matched_tokens, 6 * kBt);
  EXPECT_EQ(r.stored_tokens, 4 * kBt);
  EXPECT_EQ(r.new_bytes, 4 * kBb);
  ExpectStored(ab, 10 * kBt);
  // Exactly at the match.
  Tokens abc = Cat(ab, Gen(3, 2 * kBt));
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
  Tokens a = Gen(1, 4 * kBt);
  Tokens ab = Cat(a, Gen(2, 4 * kBt));
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
  Tokens t = Gen(1, 6 * kBt);
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
  Tokens a = Gen(1, 8 * kBt);
  Save(a);
  // Three branches inside `a` split its node into four slices of one tensor.
  for (uint64_t at : {2u, 5u, 7u}) Save(Cat(Head(a, at * kBt), Gen(10 + at, 2 * kBt)));
  ASSERT_EQ(store_->Stats().prefix_nodes, 4u + 3u);
  Result<PrefixResult> l = store_->Lookup("ns", a);
  ASSERT_OK(l);
  ASSERT_EQ(l->extents.size(), 1u) << "the split is metadata only: still one extent";
  EXPECT_EQ(l->extents[0].offset, 0u);
  EXPECT_EQ(l->extents[0].length, 8 * kBb);
  ExpectStored(a, 8 * kBt);
  // A branch: a slice of a's tensor, then its own tensor.
  Tokens b = Cat(Head(a, 5 * kBt), Gen(15, 2 * kBt));
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
  Tokens a = Gen(1, 8 * kBt);
  Save(a);
  const uint64_t used = store_->Stats().used_bytes;
  Tokens b = Cat(Head(a, 3 * kBt), Gen(2, 5 * kBt));
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
  Tokens base = Gen(1, 12 * kBt);
  prompts.push_back(base);
  std::mt19937_64 rng(5);
  for (int i = 0; i < 30; ++i) {
    const Tokens& from = prompts[rng() % prompts.size()];
    uint64_t at = 1 + rng() % Blocks(from);
    prompts.push_back(Cat(Head(from, at * kBt), Gen(100 + i, (1 + rng() % 6) * kBt)));
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

// ----------------------------------------------------------- pins and leases

TEST_F(StoreTest, PinHoldsUntilReleaseAndOnlyItsSessionMayRelease) {
  Tokens t = Gen(1, 4 * kBt);
  Save(t);
  Result<PrefixResult> p = store_->Pin("ns", t, kSession);
  ASSERT_OK(p);
  EXPECT_EQ(p->matched_tokens, 4 * kBt);
  EXPECT_NE(p->lease_id, 0u);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.pinned_bytes, 4096u);
  EXPECT_EQ(s.active_leases, 1u);
  Status wrong = store_->Release(p->lease_id, kSession + 1);
  EXPECT_ERROR(wrong, Code::kNotFound);
  EXPECT_EQ(store_->Stats().active_leases, 1u) << "a foreign release must not drop the lease";
  EXPECT_OK(store_->Release(p->lease_id, kSession));
  EXPECT_ERROR(store_->Release(p->lease_id, kSession), Code::kNotFound) << "double release";
  EXPECT_ERROR(store_->Release(123456, kSession), Code::kNotFound);
  s = store_->Stats();
  EXPECT_EQ(s.pinned_bytes, 0u);
  EXPECT_EQ(s.active_leases, 0u);
  // Two pins of one tensor: pinned once, unpinned after the second release.
  auto p1 = store_->Pin("ns", t, 1);
  auto p2 = store_->Pin("ns", t, 2);
  ASSERT_TRUE(p1.ok() && p2.ok());
  EXPECT_NE(p1->lease_id, p2->lease_id);
  EXPECT_EQ(store_->Stats().pinned_bytes, 4096u);
  EXPECT_OK(store_->Release(p1->lease_id, 1));
  EXPECT_EQ(store_->Stats().pinned_bytes, 4096u);
  EXPECT_OK(store_->Release(p2->lease_id, 2));
  EXPECT_EQ(store_->Stats().pinned_bytes, 0u);
}

TEST_F(StoreTest, PinOfAMissHoldsNothing) {
  Result<PrefixResult> p = store_->Pin("ns", Gen(1, 8 * kBt), kSession);
  ASSERT_OK(p) << "a miss is not an error";
  EXPECT_EQ(p->matched_tokens, 0u);
  EXPECT_EQ(p->lease_id, 0u);
  EXPECT_TRUE(p->extents.empty());
  EXPECT_EQ(store_->Stats().active_leases, 0u);
  EXPECT_ERROR(store_->Release(0, kSession), Code::kNotFound);
}

TEST_F(StoreTest, ReleaseSessionDropsOnlyThatSessionsLeases) {
  Tokens a = Gen(1, 4 * kBt), b = Gen(2, 4 * kBt);
  Save(a);
  Save(b);
  auto a1 = store_->Pin("ns", a, 1);
  auto a2 = store_->Pin("ns", a, 1);
  auto b1 = store_->Pin("ns", b, 1);
  auto b2 = store_->Pin("ns", b, 2);
  ASSERT_TRUE(a1.ok() && a2.ok() && b1.ok() && b2.ok());
  EXPECT_EQ(store_->Stats().active_leases, 4u);
  store_->ReleaseSession(1);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.active_leases, 1u);
  EXPECT_EQ(s.pinned_bytes, 4096u) << "b is still pinned by session 2";
  EXPECT_ERROR(store_->Release(a1->lease_id, 1), Code::kNotFound);
  EXPECT_OK(store_->Release(b2->lease_id, 2));
  EXPECT_EQ(store_->Stats().pinned_bytes, 0u);
  store_->ReleaseSession(99);  // nothing to do
}

TEST_F(StoreTest, ExpireLeasesDropsOnlyLeasesPastTheirTime) {
  Tokens a = Gen(1, 4 * kBt), b = Gen(2, 4 * kBt);
  Save(a);
  Save(b);
  auto short_lease = store_->Pin("ns", a, 1, /*lease_ms=*/1);
  auto long_lease = store_->Pin("ns", b, 1, /*lease_ms=*/3600 * 1000);
  auto default_lease = store_->Pin("ns", b, 2);  // 30 s by default
  ASSERT_TRUE(short_lease.ok() && long_lease.ok() && default_lease.ok());
  EXPECT_EQ(store_->ExpireLeases(Store::Clock::now() - std::chrono::seconds(1)), 0u);
  EXPECT_EQ(store_->ExpireLeases(Store::Clock::now() + std::chrono::milliseconds(50)), 1u);
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.expired_leases, 1u);
  EXPECT_EQ(s.active_leases, 2u);
  EXPECT_EQ(s.pinned_bytes, 4096u);
  EXPECT_ERROR(store_->Release(short_lease->lease_id, 1), Code::kNotFound) << "an expired lease is gone";
  EXPECT_EQ(store_->ExpireLeases(Store::Clock::now() + std::chrono::seconds(60)), 1u);
  EXPECT_EQ(store_->ExpireLeases(Store::Clock::now() + std::chrono::hours(2)), 1u);
  s = store_->Stats();
  EXPECT_EQ(s.expired_leases, 3u);
  EXPECT_EQ(s.active_leases, 0u);
  EXPECT_EQ(s.pinned_bytes, 0u);
  ExpectStored(a, 4 * kBt);
}

TEST_F(StoreTest, AVeryLongLeaseDoesNotWrapIntoThePast) {
  Tokens t = Gen(1, 4 * kBt);
  Save(t);
  auto p = store_->Pin("ns", t, kSession, UINT64_MAX);
  ASSERT_OK(p);
  auto q = store_->Pin("ns", t, kSession, uint64_t{1} << 62);
  ASSERT_OK(q);
  EXPECT_EQ(store_->ExpireLeases(Store::Clock::now() + std::chrono::hours(24 * 365)), 0u);
  EXPECT_EQ(store_->Stats().active_leases, 2u);
  EXPECT_OK(store_->Release(p->lease_id, kSession));
  EXPECT_OK(store_->Release(q->lease_id, kSession));
}

TEST_F(StoreTest, MaxLeasesIsEnforcedAndAMissNeedsNoLease) {
  StoreOptions o = SmallOptions();
  o.max_leases = 2;
  Reopen(o);
  Tokens t = Gen(1, 4 * kBt);
  Save(t);
  auto p1 = store_->Pin("ns", t, 1);
  auto p2 = store_->Pin("ns", t, 1);
  ASSERT_TRUE(p1.ok() && p2.ok());
  auto p3 = store_->Pin("ns", t, 1);
  EXPECT_ERROR(p3, Code::kResourceExhausted);
  EXPECT_OK(store_->Pin("ns", Gen(2, 4 * kBt), 1)) << "a miss takes no lease";
  std::vector<uint8_t> buf(4 * kBb);
  EXPECT_ERROR(store_->LoadCopy("ns", t, buf.data(), buf.size()), Code::kResourceExhausted);
  EXPECT_EQ(store_->Stats().pinned_bytes, 4096u);
  EXPECT_OK(store_->Release(p1->lease_id, 1));
  auto p4 = store_->LoadCopy("ns", t, buf.data(), buf.size());
  ASSERT_OK(p4);
  EXPECT_EQ(*p4, 4 * kBt);
  EXPECT_OK(store_->Release(p2->lease_id, 1));
  EXPECT_EQ(store_->Stats().pinned_bytes, 0u);
}

// ------------------------------------------------------------------ LoadCopy

TEST_F(StoreTest, LoadCopyIsByteExactAndCopiesOnlyWholeBlocksThatFit) {
  Tokens a = Gen(1, 5 * kBt);
  Tokens ab = Cat(a, Gen(2, 6 * kBt));
  Save(a);
  Save(ab);
  Save(Cat(Head(ab, 7 * kBt), Gen(3, kBt)));  // splits the second tensor's node
  const Tokens query = Cat(ab, Gen(4, 9));     // longer than stored, partial tail
  const std::vector<uint8_t> expect = Kv(query, 0, 11 * kBt);
  for (uint64_t capacity : {11 * kBb, 11 * kBb + 100, 20 * kBb, 10 * kBb + kBb - 1, 5 * kBb, 5 * kBb + 1,
                            3 * kBb + kBb / 2, kBb, kBb - 1, uint64_t{0}}) {
    SCOPED_TRACE("capacity " + std::to_string(capacity));
    std::vector<uint8_t> buf(capacity + 64, 0xAB);
    Result<uint64_t> n = store_->LoadCopy("ns", query, buf.data(), capacity);
    ASSERT_OK(n);
    const uint64_t fit = std::min<uint64_t>(11, capacity / kBb) * kBt;
    EXPECT_EQ(*n, fit);
    EXPECT_TRUE(std::equal(buf.begin(), buf.begin() + fit * kBpt, expect.begin())) << "bytes differ";
    EXPECT_TRUE(std::all_of(buf.begin() + fit * kBpt, buf.end(), [](uint8_t c) { return c == 0xAB; }))
        << "LoadCopy wrote past the whole blocks it reported";
  }
  // A miss copies nothing.
  std::vector<uint8_t> buf(4 * kBb, 0xCD);
  Result<uint64_t> miss = store_->LoadCopy("ns", Gen(9, 4 * kBt), buf.data(), buf.size());
  ASSERT_OK(miss);
  EXPECT_EQ(*miss, 0u);
  EXPECT_TRUE(std::all_of(buf.begin(), buf.end(), [](uint8_t c) { return c == 0xCD; }));
  StoreStats s = store_->Stats();
  EXPECT_EQ(s.pinned_bytes, 0u) << "LoadCopy unpins what it pinned";
  EXPECT_EQ(s.active_leases, 0u);
}

// ------------------------------------------------------------------- removal

TEST_F(StoreTest, RemoveTakesTheIncrementAndItsDescendantsOnly) {
  Tokens a = Gen(1, 4 * kBt);
  Tokens ab = Cat(a, Gen(2, 4 * kBt));
  Tokens abd = Cat(ab, Gen(3, 2 * kBt));
  Tokens ac = Cat(a, Gen(4, 3 * kBt));
  Tokens other = Gen(5, 2 * kBt);
  for (const Tokens* p : {&a, &ab, &abd, &ac, &other}) Save(*p);
  const StoreStats before = store_->Stats();
  ASSERT_EQ(before.tensors, 5u);
  Result<RemoveResult> r = store_->Remove("ns", Cat(ab, Gen(9, 3)));  // trailing partial block ignored
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
  Tokens a = Gen(1, 4 * kBt);
  Tokens ae = Cat(a, Gen(2, 8 * kBt));
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
  Tokens p = Gen(1, 8 * kBt);
  Tokens q = Cat(Head(p, 3 * kBt), Gen(2, 2 * kBt));
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
  Tokens a = Gen(1, 4 * kBt);
  Save(a);
  EXPECT_ERROR(store_->Remove("ns", Gen(2, 4 * kBt)), Code::kNotFound);
  EXPECT_ERROR(store_->Remove("ns", Cat(a, Gen(3, kBt))), Code::kNotFound)
      << "a prefix longer than what is stored";
  EXPECT_ERROR(store_->Remove("ns", Head(a, kBt - 1)), Code::kInvalidArgument);
  EXPECT_ERROR(store_->Remove("ns", {}), Code::kInvalidArgument);
  ExpectStored(a, 4 * kBt);
}

TEST_F(StoreTest, RemoveByKeyTakesTheNamedIncrementAndItsSubtree) {
  Tokens a = Gen(1, 4 * kBt);
  Tokens ab = Cat(a, Gen(2, 4 * kBt));
  Tokens ac = Cat(a, Gen(3, 4 * kBt));
  Tokens acd = Cat(ac, Gen(4, 4 * kBt));
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
  Tokens a = Gen(1, 6 * kBt);
  Tokens ab = Cat(a, Gen(2, 6 * kBt));
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
  for (int i = 0; i < 50; ++i) Save(Gen(100 + i, 12 * kBt));
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
  Tokens a = Gen(1, 4 * kBt);
  Tokens ab = Cat(a, Gen(2, 3 * kBt));
  Tokens c = Gen(3, 2 * kBt);
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

// ------------------------------------------------------------------- counters

TEST_F(StoreTest, CountersAddUp) {
  ASSERT_OK(store_->CreateNamespace("rep", SmallLayout(), "", 0, 0, 0755, false));
  Tokens a = Gen(1, 4 * kBt);
  Tokens ab = Cat(a, Gen(2, 2 * kBt));
  Tokens abc = Cat(ab, Gen(3, 3 * kBt));
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
  save(Gen(4, 5 * kBt), 0, CacheClass::kReplica, "rep");  // 5 new replica bytes
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
  EXPECT_EQ(Matched(Gen(8, 3 * kBt)), 0u);
  count(Gen(8, 3 * kBt), 0);
  EXPECT_EQ(Matched(Head(a, 3)), 0u);
  count(Head(a, 3), 0);
  Tokens longer = Cat(abc, Gen(9, 2 * kBt + 1));
  auto p = store_->Pin("ns", longer, kSession);
  ASSERT_OK(p);
  count(longer, 9 * kBt);
  EXPECT_EQ(store_->Stats().pinned_bytes, 3 * 4096u);
  EXPECT_EQ(store_->Stats().active_leases, 1u);
  auto miss = store_->Pin("ns", Gen(10, 4 * kBt), kSession);
  ASSERT_OK(miss);
  count(Gen(10, 4 * kBt), 0);
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
  static Tokens Prompt(uint64_t id, uint64_t blocks = kPromptBlocks) { return Gen(1000 + id, blocks * kBt); }
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
    for (uint64_t d = 0; d < depth; ++d) t = Cat(t, Gen(f * 1000 + d * 10 + (d + 1 == depth ? variant : 0), 4 * kBt));
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

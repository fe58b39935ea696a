// What the node store's tests share (tests/storage/store*_test.cc split from
// store_test.cc): StoreTest, a fixture over a real memfd arena of 16 MiB with
// one namespace "ns" of the small layout (kv_fixture.h), and its helpers: saves
// of a prompt's KV, plain lookups, byte-exact checks of a stored prefix
// through a pin (ExpectStored), the prefix tree, chain keys and the stats'
// invariants. Test-only; one fixture per test, not thread-safe.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "ptstore/keys.h"
#include "ptstore/layout.h"
#include "ptstore/status.h"
#include "ptstore/types.h"
#include "storage/cache/store.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage::store_testing {

using namespace testkv;  // NOLINT: the shared test fixture

inline constexpr uint64_t kSession = 77;

inline uint64_t Blocks(const Tokens& t) { return t.size() / kBt; }

inline StoreOptions SmallOptions(uint64_t arena = 16 * kMiB) {
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

}  // namespace ptstore::storage::store_testing

// Store::Increment: an increment by its chain key, its token ids, and pins
// of its own bytes or of the whole prefix that ends with it (also when SSD
// holds them), as the filesystem view and its ioctl use them.
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "storage/cache/store.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

using namespace testkv;  // NOLINT: the shared test fixture

constexpr uint64_t kSession = 9;

class StoreIncrementTest : public ::testing::Test {
 protected:
  void Open(bool ssd) {
    StoreOptions o;
    o.arena_bytes = 1 * kMiB;
    o.prefault = false;
    o.try_huge_pages = false;
    if (ssd) {
      o.ssd.dir = dir_.path() + "/ssd";
      o.ssd.capacity = 64 * kMiB;
      o.ssd.segment_bytes = 1 * kMiB;
      o.ssd.sync = SsdOptions::Sync::kNone;
    }
    auto s = Store::Open(o);
    ASSERT_OK(s);
    store_ = std::move(*s);
    ASSERT_OK(store_->CreateNamespace("m", SmallLayout(), "", 0, 0, 0755, false));
  }
  void Save(const Tokens& t) {
    std::vector<uint8_t> kv = Kv(t, 0, t.size());
    ASSERT_OK(store_->Save("m", t, kv.data(), kv.size(), 0));
  }
  // The listing entry whose increment ends at token `end` of a prompt.
  PrefixNodeInfo NodeEndingAt(uint64_t end) {
    auto tree = store_->ListTree("m", ChainKey{}, true);
    EXPECT_OK(tree);
    for (const auto& n : *tree) {
      if (n.start_token + n.tokens == end) return n;
    }
    ADD_FAILURE() << "no increment ends at " << end;
    return {};
  }
  std::vector<uint8_t> Bytes(const std::vector<Extent>& extents) {
    std::vector<uint8_t> out;
    for (const Extent& x : extents) {
      const uint8_t* p = store_->arena_base() + x.arena_offset;
      out.insert(out.end(), p, p + x.length);
    }
    return out;
  }

  ptstore::testing::TempDir dir_;
  std::unique_ptr<Store> store_;
};

TEST_F(StoreIncrementTest, InfoTokensAndPinsOfOwnBytesAndWholePrefix) {
  Open(false);
  Tokens a = RandomTokens(1, 64);
  Tokens b = Cat(Head(a, 32), RandomTokens(2, 16));  // splits a's increment at 32
  Save(a);
  Save(b);
  const PrefixNodeInfo lower = NodeEndingAt(64);  // a's tokens 32..64
  ASSERT_EQ(lower.start_token, 32u);
  auto info = store_->Increment("m", lower.key, false, false, kSession);
  ASSERT_OK(info);
  EXPECT_EQ(info->node.key, lower.key);
  EXPECT_EQ(info->node.bytes, 32 * kBpt);
  EXPECT_EQ(info->tokens, Tokens(a.begin() + 32, a.end()));
  EXPECT_EQ(info->lease_id, 0u);
  EXPECT_TRUE(info->extents.empty());

  auto own = store_->Increment("m", lower.key, true, false, kSession);
  ASSERT_OK(own);
  EXPECT_NE(own->lease_id, 0u);
  EXPECT_EQ(Bytes(own->extents), Kv(a, 32, 64));
  auto whole = store_->Increment("m", lower.key, true, true, kSession);
  ASSERT_OK(whole);
  EXPECT_EQ(Bytes(whole->extents), Kv(a, 0, 64));
  // The pins hold the bytes until released.
  EXPECT_GT(store_->Stats().pinned_bytes, 0u);
  EXPECT_OK(store_->Release(own->lease_id, kSession));
  EXPECT_OK(store_->Release(whole->lease_id, kSession));
  EXPECT_EQ(store_->Stats().pinned_bytes, 0u);
  // b's own increment: 16 tokens below the split.
  const PrefixNodeInfo bn = NodeEndingAt(48);
  auto bo = store_->Increment("m", bn.key, true, false, kSession);
  ASSERT_OK(bo);
  EXPECT_EQ(Bytes(bo->extents), Kv(b, 32, 48));
}

TEST_F(StoreIncrementTest, UnknownKeyOrNamespaceIsNotFound) {
  Open(false);
  Save(RandomTokens(3, 16));
  auto r = store_->Increment("m", ChainKey{1, 2}, true, false, kSession);
  EXPECT_ERROR(r, Code::kNotFound);
  EXPECT_NE(r.status().message().find("00000000000000010000000000000002"), std::string::npos) << r.status().message();
  EXPECT_ERROR(store_->Increment("nope", ChainKey{1, 2}, false, false, kSession), Code::kNotFound);
}

TEST_F(StoreIncrementTest, PinReadsSsdOnlyIncrementsBack) {
  Open(true);
  std::vector<Tokens> prompts;
  for (int i = 0; i < 24; ++i) prompts.push_back(RandomTokens(100 + i, 256));  // 64 KiB each: 1.5 MiB
  for (const auto& p : prompts) Save(p);
  auto tree = store_->ListTree("m", ChainKey{}, true);
  ASSERT_OK(tree);
  int ssd_only = 0;
  for (const auto& n : *tree) {
    if (n.tier == kTierSsd) ++ssd_only;
    auto r = store_->Increment("m", n.key, true, false, kSession);
    ASSERT_OK(r);
    auto info = store_->Increment("m", n.key, false, false, kSession);
    ASSERT_OK(info);
    const std::vector<uint8_t> got = Bytes(r->extents);
    bool matched = false;
    for (const auto& p : prompts) {
      if (Tokens(p.begin(), p.begin() + info->tokens.size()) == info->tokens) {
        matched = got == Kv(p, 0, p.size());
      }
    }
    EXPECT_TRUE(matched) << "increment " << n.key.ToHex();
    ASSERT_OK(store_->Release(r->lease_id, kSession));
  }
  EXPECT_GT(ssd_only, 0);
  EXPECT_GT(store_->Stats().ssd_fills, 0u);
}

}  // namespace
}  // namespace ptstore::storage

// Tests of chain keys (include/ptstore/keys.h): hex form, the exact hash
// recipe, and the chain properties the radix tree relies on.
#include "ptstore/keys.h"
#include "tests/testing/generators.h"
#include "tests/testing/status_matchers.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>
#include <ostream>
#include <random>
#include <string>
#include <unordered_set>
#include <vector>

namespace ptstore {

// gtest printer: failures show the key, not its bytes.
void PrintTo(const ChainKey& k, std::ostream* os) { *os << k.ToHex(); }

namespace {

using testing::RandomTokens;

// Ids of a 128k vocabulary: above 2^16 too.
constexpr uint32_t kVocab = 128000;

TEST(ChainKeyTest, HexFormat) {
  ChainKey k{0x0123456789abcdefULL, 0xfedcba9876543210ULL};
  EXPECT_EQ(k.ToHex(), "0123456789abcdeffedcba9876543210");
  EXPECT_EQ(ChainKey{}.ToHex(), std::string(32, '0'));
  EXPECT_EQ((ChainKey{~0ULL, ~0ULL}).ToHex(), std::string(32, 'f'));
  EXPECT_EQ((ChainKey{0, 1}).ToHex(), std::string(31, '0') + "1");
  EXPECT_EQ((ChainKey{1, 0}).ToHex(), std::string(15, '0') + "1" + std::string(16, '0'));
}

TEST(ChainKeyTest, HexRoundTrip) {
  std::mt19937_64 rng(42);
  for (int i = 0; i < 1000; ++i) {
    ChainKey k{rng(), rng()};
    std::string hex = k.ToHex();
    ASSERT_EQ(hex.size(), 32u);
    Result<ChainKey> back = ChainKey::FromHex(hex);
    ASSERT_OK(back);
    EXPECT_EQ(*back, k);
  }
}

TEST(ChainKeyTest, FromHexAcceptsUpperCase) {
  Result<ChainKey> k = ChainKey::FromHex("0123456789ABCDEFFEDCBA9876543210");
  ASSERT_OK(k);
  EXPECT_EQ(*k, (ChainKey{0x0123456789abcdefULL, 0xfedcba9876543210ULL}));
}

TEST(ChainKeyTest, BadHexRejected) {
  const std::string good = "0123456789abcdeffedcba9876543210";
  std::vector<std::string> bad = {
      "",
      good.substr(0, 31),
      good + "0",
      "0x23456789abcdeffedcba9876543210",
      good.substr(0, 31) + "g",
      good.substr(0, 16) + " " + good.substr(17),
      good.substr(0, 31) + "-",
      std::string(32, 'z'),
      std::string("0123456789abcdef\0edcba9876543210", 32),
  };
  for (const auto& h : bad) {
    Result<ChainKey> k = ChainKey::FromHex(h);
    EXPECT_FALSE(k.ok()) << h;
    EXPECT_ERROR(k, Code::kInvalidArgument) << h;
    EXPECT_NE(k.status().message().find("chain key"), std::string::npos) << k.status().message();
  }
  EXPECT_NE(ChainKey::FromHex("abc").status().message().find("32 hex digits"), std::string::npos);
  EXPECT_NE(ChainKey::FromHex(good.substr(0, 31) + "g").status().message().find("non-hex"), std::string::npos);
}

TEST(ChainKeyTest, OrderingIsHiThenLo) {
  EXPECT_LT((ChainKey{0, ~0ULL}), (ChainKey{1, 0}));
  EXPECT_LT((ChainKey{1, 0}), (ChainKey{1, 1}));
  EXPECT_EQ((ChainKey{3, 4}), (ChainKey{3, 4}));
  EXPECT_NE((ChainKey{3, 4}), (ChainKey{4, 3}));
}

// The recipe is part of the on-disk and wire format (keys name directories
// and are sent by clients), so pin it down with an independent computation.
TEST(ChainKeyTest, RecipeMatchesDocumentedFormula) {
  std::string seed = std::string("ptstore.v1") + '\0' + "mistral" + '\0' + "tenant-a";
  XXH128_hash_t r = XXH3_128bits(seed.data(), seed.size());
  ChainKey root = RootKey("mistral", "tenant-a");
  EXPECT_EQ(root.hi, r.high64);
  EXPECT_EQ(root.lo, r.low64);

  std::vector<uint32_t> block = {1, 2, 3, 0xdeadbeef};
  std::vector<uint8_t> buf(16 + block.size() * 4);
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<uint8_t>(root.hi >> (8 * i));      // u64 LE
  for (int i = 0; i < 8; ++i) buf[8 + i] = static_cast<uint8_t>(root.lo >> (8 * i));  // u64 LE
  for (size_t t = 0; t < block.size(); ++t)
    for (int i = 0; i < 4; ++i) buf[16 + 4 * t + i] = static_cast<uint8_t>(block[t] >> (8 * i));
  XXH128_hash_t n = XXH3_128bits(buf.data(), buf.size());
  ChainKey next = NextKey(root, block);
  EXPECT_EQ(next.hi, n.high64);
  EXPECT_EQ(next.lo, n.low64);
}

TEST(ChainKeyTest, NextKeyOfABlockLargerThanItsBufferIsTheSameHash) {
  // NextKey hashes small blocks in one call from a stack buffer and streams
  // larger ones: both are XXH3_128 of (prev, tokens).
  const ChainKey root = RootKey("ns", "");
  for (size_t n : {size_t{1}, size_t{1020}, size_t{1021}, size_t{5000}}) {
    std::vector<uint32_t> block(n);
    for (size_t i = 0; i < n; ++i) block[i] = static_cast<uint32_t>(i * 2654435761u);
    std::vector<uint8_t> buf(16 + n * 4);
    std::memcpy(buf.data(), &root.hi, 8);
    std::memcpy(buf.data() + 8, &root.lo, 8);
    std::memcpy(buf.data() + 16, block.data(), n * 4);
    XXH128_hash_t want = XXH3_128bits(buf.data(), buf.size());
    EXPECT_EQ(NextKey(root, block), (ChainKey{want.high64, want.low64})) << n << " tokens";
  }
}

TEST(ChainKeyTest, RootSeparatesNamespaceAndSalt) {
  ChainKey a = RootKey("mistral", "");
  EXPECT_EQ(a, RootKey("mistral", ""));
  EXPECT_NE(a, RootKey("mistral", "s"));
  EXPECT_NE(a, RootKey("llama", ""));
  // The separator keeps (name, salt) splits apart.
  EXPECT_NE(RootKey("ab", "c"), RootKey("a", "bc"));
  EXPECT_NE(RootKey("a", ""), RootKey("", "a"));
}

TEST(ChainKeyTest, ChainKeysCountsWholeBlocksOnly) {
  ChainKey root = RootKey("ns", "");
  auto t = RandomTokens(1, 100, kVocab);
  EXPECT_EQ(ChainKeys(root, t, 16).size(), 6u);
  EXPECT_EQ(ChainKeys(root, std::span(t).first(15), 16).size(), 0u);
  EXPECT_EQ(ChainKeys(root, std::span(t).first(16), 16).size(), 1u);
  EXPECT_EQ(ChainKeys(root, std::span(t).first(0), 16).size(), 0u);
  EXPECT_EQ(ChainKeys(root, t, 1).size(), 100u);
  EXPECT_EQ(ChainKeys(root, t, 100).size(), 1u);
  EXPECT_EQ(ChainKeys(root, t, 101).size(), 0u);
  EXPECT_TRUE(ChainKeys(root, t, 0).empty());  // no division by zero
}

TEST(ChainKeyTest, ChainKeysIsIteratedNextKey) {
  ChainKey root = RootKey("ns", "salt");
  auto t = RandomTokens(1, 64, kVocab);
  auto keys = ChainKeys(root, t, 16);
  ASSERT_EQ(keys.size(), 4u);
  ChainKey prev = root;
  for (size_t i = 0; i < keys.size(); ++i) {
    prev = NextKey(prev, std::span(t).subspan(i * 16, 16));
    EXPECT_EQ(keys[i], prev) << i;
  }
}

TEST(ChainKeyTest, KeysOfAPrefixAreAPrefixOfTheKeys) {
  ChainKey root = RootKey("ns", "");
  auto t = RandomTokens(1, 16 * 10 + 5, kVocab);
  auto all = ChainKeys(root, t, 16);
  ASSERT_EQ(all.size(), 10u);
  for (size_t n = 0; n <= t.size(); ++n) {
    auto some = ChainKeys(root, std::span(t).first(n), 16);
    ASSERT_EQ(some.size(), n / 16);
    for (size_t i = 0; i < some.size(); ++i) ASSERT_EQ(some[i], all[i]) << "n=" << n << " i=" << i;
  }
}

TEST(ChainKeyTest, PartialLastBlockProducesNoKeyAndDoesNotAffectOthers) {
  ChainKey root = RootKey("ns", "");
  auto t = RandomTokens(1, 48, kVocab);
  auto whole = ChainKeys(root, t, 16);
  auto t2 = t;
  t2.insert(t2.end(), {7, 8, 9});  // 3 extra tokens: a partial block
  auto with_partial = ChainKeys(root, t2, 16);
  EXPECT_EQ(with_partial, whole);
}

TEST(ChainKeyTest, SaltAndNamespaceChangeEveryKey) {
  auto t = RandomTokens(1, 16 * 8, kVocab);
  auto base = ChainKeys(RootKey("ns", ""), t, 16);
  auto salted = ChainKeys(RootKey("ns", "tenant"), t, 16);
  auto other_salt = ChainKeys(RootKey("ns", "tenant2"), t, 16);
  auto other_ns = ChainKeys(RootKey("ns2", ""), t, 16);
  std::unordered_set<ChainKey, ChainKeyHash> seen;
  for (const auto* v : {&base, &salted, &other_salt, &other_ns}) {
    ASSERT_EQ(v->size(), 8u);
    for (const auto& k : *v) EXPECT_TRUE(seen.insert(k).second) << k.ToHex();
  }
}

TEST(ChainKeyTest, ChangingOneTokenChangesKeysFromItsBlockOn) {
  ChainKey root = RootKey("ns", "");
  const uint32_t bt = 16;
  const size_t blocks = 8;
  auto t = RandomTokens(1, bt * blocks, kVocab);
  auto base = ChainKeys(root, t, bt);
  for (size_t pos = 0; pos < t.size(); pos += 5) {
    auto m = t;
    m[pos] ^= 1;
    auto keys = ChainKeys(root, m, bt);
    size_t changed_block = pos / bt;
    for (size_t i = 0; i < blocks; ++i) {
      if (i < changed_block) {
        EXPECT_EQ(keys[i], base[i]) << "pos=" << pos << " i=" << i;
      } else {
        EXPECT_NE(keys[i], base[i]) << "pos=" << pos << " i=" << i;
      }
    }
  }
}

TEST(ChainKeyTest, BlockBoundariesMatter) {
  // The same 32 tokens cut into 2x16 or 1x32 give different last keys, and
  // a block's key depends on the order of its tokens.
  ChainKey root = RootKey("ns", "");
  auto t = RandomTokens(1, 32, kVocab);
  EXPECT_NE(ChainKeys(root, t, 16).back(), ChainKeys(root, t, 32).back());
  auto r = t;
  std::swap(r[0], r[1]);
  EXPECT_NE(ChainKeys(root, r, 32)[0], ChainKeys(root, t, 32)[0]);
}

TEST(ChainKeyTest, NoCollisionsOverManyPrefixes) {
  ChainKey root = RootKey("ns", "");
  std::unordered_set<ChainKey, ChainKeyHash> seen;
  for (uint32_t s = 0; s < 200; ++s) {
    auto t = RandomTokens(s + 100, 16 * 16, kVocab);
    for (const auto& k : ChainKeys(root, t, 16)) ASSERT_TRUE(seen.insert(k).second);
  }
  EXPECT_EQ(seen.size(), 200u * 16);
}

}  // namespace
}  // namespace ptstore

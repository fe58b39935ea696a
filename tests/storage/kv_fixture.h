// Shared by the storage tests: a small layout and deterministic prompts and
// KV bytes (the kit's generators, tests/testing/generators.h), so that every
// load can be checked byte for byte.
//
// Layout: 2 layers, 2 KV heads, head_dim 16, bf16 = 256 B/token; blocks of 4.
// KV of token i of a prompt depends on its position and on every token id up
// to and including it: bytes from a wrong branch or offset never match.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "ptstore/layout.h"
#include "tests/testing/generators.h"

namespace ptstore::storage::testkv {

constexpr uint64_t kKiB = 1024;
constexpr uint64_t kMiB = 1024 * kKiB;
constexpr uint32_t kBt = 4;           // tokens per block
constexpr uint64_t kBpt = 256;        // bytes per token
constexpr uint64_t kBb = kBt * kBpt;  // bytes per block

inline Layout SmallLayout(uint32_t block_tokens = kBt) {
  Layout l;
  l.layers = 2;
  l.kv_heads = 2;
  l.head_dim = 16;
  l.dtype = DType::kBF16;
  l.block_tokens = block_tokens;
  return l;
}

// The kit's generators (tests/testing/generators.h), by the names these
// tests use: Mix (a 64-bit hash), RandomTokens(seed, n) prompts.
using ptstore::testing::Mix;
using ptstore::testing::RandomTokens;

using Tokens = std::vector<uint32_t>;

inline Tokens Cat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline Tokens Head(const Tokens& a, size_t n) { return {a.begin(), a.begin() + std::min(n, a.size())}; }

// KV bytes of tokens [from, to) of `tokens`: the kit's chained bytes
// (testing::ChainedKv) at this layout's kBpt bytes per token.
inline std::vector<uint8_t> Kv(std::span<const uint32_t> tokens, size_t from, size_t to) {
  return ptstore::testing::ChainedKv(tokens, from, to, kBpt);
}

}  // namespace ptstore::storage::testkv

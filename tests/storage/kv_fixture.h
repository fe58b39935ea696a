// Shared by the storage tests: a small layout and deterministic prompts and
// KV bytes, so that every load can be checked byte for byte.
//
// Layout: 2 layers, 2 KV heads, head_dim 16, bf16 = 256 B/token; blocks of 4.
// KV of token i of a prompt depends on its position and on every token id up
// to and including it: bytes from a wrong branch or offset never match.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "ptstore/layout.h"

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

inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

using Tokens = std::vector<uint32_t>;

inline Tokens Gen(uint64_t seed, size_t n) {
  std::mt19937_64 rng(seed * 104729 + 3);
  Tokens t(n);
  for (auto& x : t) x = static_cast<uint32_t>(rng() % 32000);
  return t;
}

inline Tokens Cat(Tokens a, const Tokens& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

inline Tokens Head(const Tokens& a, size_t n) { return {a.begin(), a.begin() + std::min(n, a.size())}; }

// KV bytes of tokens [from, to) of `tokens`.
inline std::vector<uint8_t> Kv(std::span<const uint32_t> tokens, size_t from, size_t to) {
  std::vector<uint8_t> out;
  out.reserve((to - from) * kBpt);
  uint64_t h = 0x5eed;
  for (size_t i = 0; i < to; ++i) {
    h = Mix(h ^ (uint64_t{tokens[i]} << 20) ^ i);
    if (i < from) continue;
    uint64_t s = h;
    for (uint64_t b = 0; b < kBpt; b += 8) {
      s = Mix(s + b);
      uint8_t w[8];
      std::memcpy(w, &s, 8);
      out.insert(out.end(), w, w + 8);
    }
  }
  return out;
}

}  // namespace ptstore::storage::testkv

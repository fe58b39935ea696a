// Deterministic KV bytes for the tests that talk to a real ptstored
// (client, mount, tools): the bytes of a token depend on its id and on its
// position in the prompt, so shared prefixes have equal bytes and a byte from
// a wrong increment, offset or prompt never matches.
//
// Header-only and stateless: safe from any thread. (The in-process storage
// tests use tests/storage/kv_fixture.h, whose bytes also depend on every
// earlier token.)
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

#include "ptstore/layout.h"

namespace ptstore::testing {

// Fills `bpt` bytes at `out`: the KV of token id `tok` at position `pos`.
inline void FillKvAt(uint32_t tok, uint64_t pos, uint64_t bpt, uint8_t* out) {
  uint64_t x = (uint64_t{tok} << 32) ^ (pos * 0x9e3779b97f4a7c15ULL) ^ 0x5bd1e995;
  for (uint64_t b = 0; b < bpt; b += 8) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 29;
    std::memcpy(out + b, &x, std::min<uint64_t>(8, bpt - b));
  }
}

// The KV of `tokens` whose first token sits at position `start`, in layout `l`.
inline std::vector<uint8_t> KvOf(std::span<const uint32_t> tokens, uint64_t start, const Layout& l) {
  const uint64_t bpt = l.BytesPerToken();
  std::vector<uint8_t> kv(tokens.size() * bpt);
  for (size_t i = 0; i < tokens.size(); ++i) FillKvAt(tokens[i], start + i, bpt, kv.data() + i * bpt);
  return kv;
}

}  // namespace ptstore::testing

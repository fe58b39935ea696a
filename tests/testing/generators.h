// The test kit's token and KV generators: deterministic prompts and KV
// bytes, so that every load of a test or a benchmark can be checked byte
// for byte without keeping the saved bytes around. The one place for them
// (tests, benchmarks and ptstore-demo all use these).
//
// Token ids, three shapes (each a pure function of its arguments):
//   RandomTokens(seed, n, vocab)  pseudo-random ids in [0, vocab): prompts.
//                                 A prefix of a longer run of the same seed:
//                                 RandomTokens(s, n) is the first n of
//                                 RandomTokens(s, n + k).
//   SequentialTokens(first, n, step)
//                                 first, first + step, ...: readable ids
//                                 whose values a test spells out (tools'
//                                 output, the fuzzer's seed frames).
//   WideTokens(seed, n)           distinct ids spread over the whole 32-bit
//                                 range ((i + seed) * 2654435761): wire
//                                 encodings see large values.
//
// KV bytes, two definitions with different properties:
//   FillKv / VerifyKv / KvOf      position-only: the bytes of a token depend
//                                 on its id and its position in the prompt. A
//                                 prefix shared by two prompts has the same
//                                 bytes in both (as a real model's would), a
//                                 byte from a wrong offset or prompt never
//                                 matches, and any token can be made alone.
//                                 Counter based, several GB/s per core (the
//                                 benchmarks check every byte they load).
//   ChainedKv                     chained: the bytes of token i depend on its
//                                 position and on every token id up to and
//                                 including it, so two prompts that differ in
//                                 one token differ in every byte after it:
//                                 bytes from a wrong branch of the prefix tree
//                                 never match (the in-process storage tests
//                                 rely on this; tests/storage/kv_fixture.h).
//
// Header-only (no GoogleTest, no library): a test that links only a
// production library can use it. Thread safety: everything here is a value
// or a pure function; a SplitMix64 belongs to one thread.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "ptstore/layout.h"

namespace ptstore::testing {

namespace gen_internal {

constexpr uint64_t kGamma = 0x9e3779b97f4a7c15ULL;
constexpr uint64_t kMixK = 0xe7037ed1a0b428dbULL;

// splitmix64's finalizer.
inline uint64_t Finalize(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// One 64x64->128 multiply folded (wyhash's mum): one multiply per 8 bytes,
// about 9 GB/s on one Zen core, versus 5.5 for a full splitmix per word.
inline uint64_t WyMix(uint64_t a) {
  const __uint128_t p = static_cast<__uint128_t>(a) * kMixK;
  return static_cast<uint64_t>(p) ^ static_cast<uint64_t>(p >> 64);
}

// The stream of a token is WyMix(seed + j * gamma) for word j: counter based,
// so each token (and each word) is made independently of the others.
inline uint64_t TokenSeed(uint32_t token, uint64_t position) {
  return Finalize((position << 32) ^ token ^ 0x5054'5374'6f72'6500ULL);  // "PTStore"
}

}  // namespace gen_internal

// A well-mixed 64-bit hash of `x`: splitmix64's output for state x
// (SplitMix64(x).Next() == Mix(x)).
inline uint64_t Mix(uint64_t x) { return gen_internal::Finalize(x + gen_internal::kGamma); }

// splitmix64: a fast, well-mixed 64-bit PRNG (Steele et al.).
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t Next() {
    state_ += gen_internal::kGamma;
    return gen_internal::Finalize(state_);
  }
  // Uniform in [lo, hi] (inclusive); lo <= hi. Deterministic on every
  // platform (unlike std::uniform_int_distribution).
  uint64_t Range(uint64_t lo, uint64_t hi) {
    const uint64_t span = hi - lo + 1;
    if (span == 0) return Next();  // the full 64-bit range
    return lo + Next() % span;     // the modulo bias is irrelevant here
  }

 private:
  uint64_t state_;
};

// ------------------------------------------------------------ token ids

// `n` token ids in [0, vocab), deterministic from seed. REQUIRES: vocab > 0.
inline std::vector<uint32_t> RandomTokens(uint64_t seed, size_t n, uint32_t vocab = 32000) {
  SplitMix64 rng(seed);
  std::vector<uint32_t> t(n);
  for (auto& x : t) x = static_cast<uint32_t>(rng.Range(0, vocab - 1));
  return t;
}

// first, first + step, ..., first + (n - 1) * step (mod 2^32).
inline std::vector<uint32_t> SequentialTokens(uint32_t first, size_t n, uint32_t step = 1) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = first + step * static_cast<uint32_t>(i);
  return t;
}

// `n` distinct ids (for n <= 2^32) spread over the whole 32-bit range:
// token i is (i + seed) * 2654435761 mod 2^32.
inline std::vector<uint32_t> WideTokens(uint32_t seed, size_t n) {
  std::vector<uint32_t> t(n);
  for (size_t i = 0; i < n; ++i) t[i] = static_cast<uint32_t>((i + seed) * 2654435761u);
  return t;
}

// ---------------------------------------------- KV bytes, position-only

// Fills out[0, tokens.size() * bytes_per_token) with the KV bytes of
// `tokens`, token k sitting at position first_position + k of its prompt.
inline void FillKv(std::span<const uint32_t> tokens, uint64_t first_position, uint64_t bytes_per_token,
                   uint8_t* out) {
  using namespace gen_internal;
  const uint64_t words = bytes_per_token / 8;
  const uint64_t tail = bytes_per_token % 8;
  for (size_t k = 0; k < tokens.size(); ++k) {
    uint8_t* p = out + k * bytes_per_token;
    uint64_t c = TokenSeed(tokens[k], first_position + k);
    for (uint64_t j = 0; j < words; ++j, c += kGamma) {
      const uint64_t v = WyMix(c);
      std::memcpy(p + j * 8, &v, 8);
    }
    if (tail) {
      const uint64_t v = WyMix(c);
      std::memcpy(p + words * 8, &v, tail);
    }
  }
}

// The KV of `tokens` whose first token sits at position `start`, in layout
// `l` (FillKv's bytes, l.BytesPerToken() per token).
inline std::vector<uint8_t> KvOf(std::span<const uint32_t> tokens, uint64_t start, const Layout& l) {
  const uint64_t bpt = l.BytesPerToken();
  std::vector<uint8_t> kv(tokens.size() * bpt);
  FillKv(tokens, start, bpt, kv.data());
  return kv;
}

struct KvMismatch {
  uint64_t token_index = 0;  // index into the checked span
  uint64_t byte_offset = 0;  // offset into `data` of the first wrong byte
  uint8_t expected = 0;
  uint8_t actual = 0;
  std::string ToString() const {
    char buf[160];
    std::snprintf(buf, sizeof(buf), "token %llu, byte %llu: expected 0x%02x, found 0x%02x",
                  static_cast<unsigned long long>(token_index), static_cast<unsigned long long>(byte_offset),
                  expected, actual);
    return buf;
  }
};

// Checks data[0, tokens.size() * bytes_per_token) against FillKv's bytes;
// the first mismatch, or nullopt when every byte is right.
inline std::optional<KvMismatch> VerifyKv(std::span<const uint32_t> tokens, uint64_t first_position,
                                          uint64_t bytes_per_token, const uint8_t* data) {
  using namespace gen_internal;
  const uint64_t words = bytes_per_token / 8;
  const uint64_t tail = bytes_per_token % 8;
  for (size_t k = 0; k < tokens.size(); ++k) {
    const uint8_t* p = data + k * bytes_per_token;
    uint64_t diff = 0;
    uint64_t c = TokenSeed(tokens[k], first_position + k);
    for (uint64_t j = 0; j < words; ++j, c += kGamma) {
      uint64_t v;
      std::memcpy(&v, p + j * 8, 8);
      diff |= v ^ WyMix(c);
    }
    if (tail) {
      uint64_t want = WyMix(c), got = 0;
      std::memcpy(&got, p + words * 8, tail);
      const uint64_t mask = (uint64_t{1} << (tail * 8)) - 1;
      diff |= (got ^ want) & mask;
    }
    if (diff == 0) continue;
    // Slow path: find the first wrong byte of this token.
    std::vector<uint8_t> want(bytes_per_token);
    FillKv(tokens.subspan(k, 1), first_position + k, bytes_per_token, want.data());
    for (uint64_t b = 0; b < bytes_per_token; ++b) {
      if (want[b] != p[b]) return KvMismatch{k, k * bytes_per_token + b, want[b], p[b]};
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------- KV bytes, chained

// The chained KV bytes of tokens [from, to) of `tokens`, `bytes_per_token`
// (a multiple of 8) per token: token i's bytes depend on i and on
// tokens[0..i]. REQUIRES: from <= to <= tokens.size().
inline std::vector<uint8_t> ChainedKv(std::span<const uint32_t> tokens, size_t from, size_t to,
                                      uint64_t bytes_per_token) {
  std::vector<uint8_t> out;
  out.reserve((to - from) * bytes_per_token);
  uint64_t h = 0x5eed;
  for (size_t i = 0; i < to; ++i) {
    h = Mix(h ^ (uint64_t{tokens[i]} << 20) ^ i);
    if (i < from) continue;
    uint64_t s = h;
    for (uint64_t b = 0; b < bytes_per_token; b += 8) {
      s = Mix(s + b);
      uint8_t w[8];
      std::memcpy(w, &s, 8);
      out.insert(out.end(), w, w + 8);
    }
  }
  return out;
}

}  // namespace ptstore::testing

// Chain keys: 128-bit names of prefixes.
//
//   key_root = XXH3_128("ptstore.v1" ‖ 0 ‖ namespace name ‖ 0 ‖ salt)
//   key_i    = XXH3_128(key_{i-1} as 16 bytes ‖ tokens of block i as u32 LE)
//
// key_i names the whole prefix ending at block i. The namespace name and its
// salt are both in the root, so namespaces (and tenants with different salts)
// never share keys. Keys are only names: every match also compares token ids,
// so a hash collision costs at most a miss.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "ptstore/status.h"

namespace ptstore {

struct ChainKey {
  uint64_t hi = 0;
  uint64_t lo = 0;

  // 32 lowercase hex digits, hi first.
  std::string ToHex() const;
  static Result<ChainKey> FromHex(std::string_view hex);
  bool operator==(const ChainKey&) const = default;
  auto operator<=>(const ChainKey&) const = default;
};

ChainKey RootKey(std::string_view namespace_name, std::string_view salt);
// Key of the block that follows `prev`.
ChainKey NextKey(const ChainKey& prev, std::span<const uint32_t> block_tokens);
// Keys of every whole block of `tokens` (tokens.size() / block_tokens keys).
std::vector<ChainKey> ChainKeys(const ChainKey& root, std::span<const uint32_t> tokens,
                                uint32_t block_tokens);

struct ChainKeyHash {
  size_t operator()(const ChainKey& k) const { return static_cast<size_t>(k.lo ^ (k.hi * 0x9e3779b97f4a7c15ULL)); }
};

}  // namespace ptstore

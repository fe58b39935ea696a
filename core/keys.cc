#include "ptstore/keys.h"

#define XXH_STATIC_LINKING_ONLY  // XXH3_state_t on the stack
#include <xxhash.h>

#include <bit>
#include <cstring>

namespace ptstore {

static_assert(std::endian::native == std::endian::little,
              "token bytes are hashed as stored in memory: little-endian hosts only");

std::string ChainKey::ToHex() const {
  static const char kDigits[] = "0123456789abcdef";
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[i] = kDigits[(hi >> (60 - 4 * i)) & 0xf];
    out[16 + i] = kDigits[(lo >> (60 - 4 * i)) & 0xf];
  }
  return out;
}

Result<ChainKey> ChainKey::FromHex(std::string_view hex) {
  if (hex.size() != 32) {
    return InvalidArgument("chain key '" + std::string(hex) + "' must be 32 hex digits");
  }
  ChainKey k;
  for (int i = 0; i < 32; ++i) {
    char c = hex[i];
    uint64_t v;
    if (c >= '0' && c <= '9') v = c - '0';
    else if (c >= 'a' && c <= 'f') v = c - 'a' + 10;
    else if (c >= 'A' && c <= 'F') v = c - 'A' + 10;
    else return InvalidArgument("chain key '" + std::string(hex) + "' has a non-hex digit");
    uint64_t& word = i < 16 ? k.hi : k.lo;
    word = (word << 4) | v;
  }
  return k;
}

ChainKey RootKey(std::string_view namespace_name, std::string_view salt) {
  std::string seed = "ptstore.v1";
  seed.push_back('\0');
  seed.append(namespace_name);
  seed.push_back('\0');
  seed.append(salt);
  XXH128_hash_t h = XXH3_128bits(seed.data(), seed.size());
  return ChainKey{h.high64, h.low64};
}

ChainKey NextKey(const ChainKey& prev, std::span<const uint32_t> block_tokens) {
  // One XXH3 call over (prev, tokens) laid out in a stack buffer: the same
  // hash as the streaming API gives for those bytes, without its state's
  // setup and copies (a third of the time for a 16-token block). Blocks
  // larger than the buffer stream.
  constexpr size_t kBuf = 4096;
  if (16 + block_tokens.size_bytes() <= kBuf) {
    alignas(64) unsigned char buf[kBuf];
    const uint64_t words[2] = {prev.hi, prev.lo};
    std::memcpy(buf, words, sizeof(words));
    std::memcpy(buf + sizeof(words), block_tokens.data(), block_tokens.size_bytes());
    XXH128_hash_t h = XXH3_128bits(buf, sizeof(words) + block_tokens.size_bytes());
    return ChainKey{h.high64, h.low64};
  }
  XXH3_state_t state;
  XXH3_128bits_reset(&state);
  uint64_t words[2] = {prev.hi, prev.lo};
  XXH3_128bits_update(&state, words, sizeof(words));
  XXH3_128bits_update(&state, block_tokens.data(), block_tokens.size_bytes());
  XXH128_hash_t h = XXH3_128bits_digest(&state);
  return ChainKey{h.high64, h.low64};
}

std::vector<ChainKey> ChainKeys(const ChainKey& root, std::span<const uint32_t> tokens,
                                uint32_t block_tokens) {
  std::vector<ChainKey> keys;
  if (block_tokens == 0) return keys;
  size_t blocks = tokens.size() / block_tokens;
  keys.reserve(blocks);
  ChainKey prev = root;
  for (size_t b = 0; b < blocks; ++b) {
    prev = NextKey(prev, tokens.subspan(b * block_tokens, block_tokens));
    keys.push_back(prev);
  }
  return keys;
}

}  // namespace ptstore

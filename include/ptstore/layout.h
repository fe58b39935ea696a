// Namespace layouts: the geometry of one model's KV cache.
//
// A tensor is token-major: bytes_per_token = layers * 2 (K and V) * kv_heads *
// head_dim * sizeof(dtype), so any block-aligned token range of a tensor is one
// contiguous byte slice. Everything is stored in whole blocks of
// `block_tokens` tokens; a partial last block is ignored, never an error.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "ptstore/status.h"

namespace ptstore {

enum class DType : uint8_t { kBF16 = 1, kFP16 = 2, kFP32 = 3, kFP8 = 4 };

size_t DTypeSize(DType dtype);
std::string_view DTypeName(DType dtype);                 // "bf16"
Result<DType> ParseDType(std::string_view name);         // "bf16", "float16", ...

struct Layout {
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  DType dtype = DType::kBF16;
  uint32_t block_tokens = 16;

  // OK, or InvalidArgument naming the bad field and the accepted range.
  Status Validate() const;
  uint64_t BytesPerToken() const {
    return uint64_t{layers} * 2 * kv_heads * head_dim * DTypeSize(dtype);
  }
  uint64_t BytesPerBlock() const { return BytesPerToken() * block_tokens; }
  // Number of whole blocks in `tokens` tokens.
  uint64_t FullBlocks(uint64_t tokens) const { return tokens / block_tokens; }
  // "layers=32 kv_heads=8 head_dim=128 dtype=bf16 block_tokens=16"
  std::string ToString() const;
  // Parses the ToString() form (fields in any order, all required).
  static Result<Layout> Parse(std::string_view text);

  bool operator==(const Layout&) const = default;
};

// Mistral-7B-Instruct: 32 layers, 8 KV heads, head_dim 128, bf16: 128 KiB/token.
Layout MistralLayout();

// Namespace names: 1..128 chars of [A-Za-z0-9._-], not starting with '.'.
Status ValidateNamespaceName(std::string_view name);

}  // namespace ptstore

// Namespace layouts: the geometry of one model's KV cache.
//
// A dense layout (the common case: one full-attention K/V cache) is five
// fields. A tensor is token-major: bytes_per_token = layers * 2 (K and V) *
// kv_heads * head_dim * sizeof(dtype), so any block-aligned token range of a
// tensor is one contiguous byte slice. Everything is stored in whole blocks of
// `block_tokens` tokens; a partial last block is ignored, never an error.
//
// A grouped layout describes a model whose KV cache has several groups
// (hybrid models: sliding-window plus full attention, Mamba or linear
// attention state beside attention, an MLA latent cache), all in blocks of
// the same `block_tokens` tokens. Its dense fields are zero (dtype kNone) and
// `groups` lists the groups in order. A block is the groups' slices one
// after the other, each slice starting at a multiple of kGroupAlignment (64)
// bytes within the block, zero padding between; the block itself is padded to
// a multiple of lcm(64, block_tokens), so BytesPerToken() = BytesPerBlock() /
// block_tokens is an integer and any block-aligned token range is still one
// contiguous byte slice. Inside each slice:
//
//   full    (block_tokens, layers, 2, kv_heads, head_dim) of dtype: a
//           full-attention K/V cache;
//   window  the same bytes and order, for sliding-window attention of
//           window_tokens tokens: a load needs only the blocks covering the
//           last window_tokens tokens of a prefix (the store keeps every
//           block; readers use this to copy less);
//   latent  (block_tokens, layers, head_dim) of dtype: an MLA latent cache,
//           one vector per token per layer, no K/V pair, kv_heads is 1; one
//           copy serves every tensor-parallel rank;
//   state   (layers, state_bytes): Mamba / linear-attention state after the
//           block's last token (vLLM's "align" mode); a load needs only the
//           prefix's last block. heads, head_dim and dtype are unused (0).
//
// A grouped layout of exactly one full group is not canonical: it is the
// dense layout of that group, and FromGroups, Parse and the wire decoder
// turn it into that (so it compares and encodes as the dense layout does).
//
// Thread safety: plain values.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ptstore/status.h"

namespace ptstore {

// kNone is the dtype of a grouped layout's dense field and of state groups;
// it has size 0, is named "none" and is never parsed.
enum class DType : uint8_t { kNone = 0, kBF16 = 1, kFP16 = 2, kFP32 = 3, kFP8 = 4 };

size_t DTypeSize(DType dtype);                           // 0 for kNone and unknown values
std::string_view DTypeName(DType dtype);                 // "bf16"; "none"; "invalid"
Result<DType> ParseDType(std::string_view name);         // "bf16", "float16", ... (not "none")

enum class GroupKind : uint8_t { kFull = 1, kWindow = 2, kLatent = 3, kState = 4 };

std::string_view GroupKindName(GroupKind kind);          // "full", "window", "latent", "state"; "invalid"
Result<GroupKind> ParseGroupKind(std::string_view name); // InvalidArgument naming the accepted names

// One KV cache group of a grouped layout (see the header comment for what
// each kind holds). Fields a kind does not use are 0 (dtype kNone); a latent
// group's kv_heads is 1.
struct LayoutGroup {
  GroupKind kind = GroupKind::kFull;
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  DType dtype = DType::kNone;
  uint32_t window_tokens = 0;  // window: tokens of the attention window (>= 1)
  uint64_t state_bytes = 0;    // state: bytes per layer per block (1..1 GiB)

  static LayoutGroup Full(uint32_t layers, uint32_t kv_heads, uint32_t head_dim, DType dtype);
  static LayoutGroup Window(uint32_t layers, uint32_t kv_heads, uint32_t head_dim, DType dtype,
                            uint32_t window_tokens);
  static LayoutGroup Latent(uint32_t layers, uint32_t head_dim, DType dtype);
  static LayoutGroup State(uint32_t layers, uint64_t state_bytes);

  // OK, or InvalidArgument naming the bad field and the accepted range (the
  // checks Layout::Validate makes of each of its groups).
  Status Validate() const;
  // Bytes of this group in one block of `block_tokens` tokens, without
  // padding: block_tokens * layers * 2 * kv_heads * head_dim * dtype size
  // (full, window), block_tokens * layers * head_dim * dtype size (latent),
  // layers * state_bytes (state).
  uint64_t BytesPerBlock(uint32_t block_tokens) const;
  // "full:layers=24:kv_heads=8:head_dim=128:dtype=bf16" (what follows
  // "group=" in Layout::ToString()).
  std::string ToString() const;

  bool operator==(const LayoutGroup&) const = default;
};

struct Layout {
  // The dense layout; all zero (dtype kNone) in a grouped layout, except
  // block_tokens, which every group shares.
  uint32_t layers = 0;
  uint32_t kv_heads = 0;
  uint32_t head_dim = 0;
  DType dtype = DType::kBF16;
  uint32_t block_tokens = 16;
  // Empty: a dense layout. Otherwise the groups, in block order.
  std::vector<LayoutGroup> groups = {};

  static constexpr size_t kMaxGroups = 16;
  static constexpr uint64_t kGroupAlignment = 64;  // each group's slice starts at a multiple of this

  // The layout of `groups` in blocks of `block_tokens` tokens: grouped, or
  // the dense layout when `groups` is exactly one full group. Not validated
  // (no groups give an invalid dense layout of 0 layers).
  static Layout FromGroups(std::vector<LayoutGroup> groups, uint32_t block_tokens = 16);

  bool grouped() const { return !groups.empty(); }
  // The groups; a dense layout gives its one full group.
  std::vector<LayoutGroup> AsGroups() const;
  // 1 for a dense layout.
  size_t GroupCount() const { return groups.empty() ? 1 : groups.size(); }

  // OK, or InvalidArgument naming the bad field (and group) and the accepted
  // range.
  Status Validate() const;
  uint64_t BytesPerToken() const {
    if (groups.empty()) return uint64_t{layers} * 2 * kv_heads * head_dim * DTypeSize(dtype);
    return block_tokens == 0 ? 0 : GroupedBytesPerBlock() / block_tokens;
  }
  uint64_t BytesPerBlock() const {
    return groups.empty() ? BytesPerToken() * block_tokens : GroupedBytesPerBlock();
  }
  // Where group `g`'s slice starts within a block, and its bytes (without
  // padding). A dense layout has one group: 0 and BytesPerBlock().
  // REQUIRES: g < GroupCount().
  uint64_t GroupOffset(size_t g) const;
  uint64_t GroupBytesPerBlock(size_t g) const;
  // Number of whole blocks in `tokens` tokens.
  uint64_t FullBlocks(uint64_t tokens) const { return block_tokens == 0 ? 0 : tokens / block_tokens; }
  // Dense: "layers=32 kv_heads=8 head_dim=128 dtype=bf16 block_tokens=16".
  // Grouped: "block_tokens=16 group=full:layers=24:kv_heads=8:head_dim=128:dtype=bf16
  // group=window:layers=24:kv_heads=8:head_dim=128:dtype=bf16:window=1024
  // group=latent:layers=61:head_dim=576:dtype=bf16 group=state:layers=8:bytes=65536"
  // (one line; group= items in block order).
  std::string ToString() const;
  // Parses the ToString() form: items separated by spaces, commas, tabs or
  // newlines, in any order except that group= items keep theirs; every field
  // required. Colons may stand for the spaces (a mount option or an xattr
  // value cannot hold them): "block_tokens=16:group=full:layers=24:...:
  // group=state:layers=8:bytes=65536", where a group's fields run to the
  // next group= or block_tokens=. Validates the result. InvalidArgument
  // naming what is wrong.
  static Result<Layout> Parse(std::string_view text);

  bool operator==(const Layout&) const = default;

 private:
  uint64_t GroupedBytesPerBlock() const;
};

// Mistral-7B-Instruct: 32 layers, 8 KV heads, head_dim 128, bf16: 128 KiB/token.
Layout MistralLayout();

// Namespace names: 1..128 chars of [A-Za-z0-9._-], not starting with '.'.
// The longest namespace name (bytes); also the longest name of anything on the mount (NAME_MAX there).
inline constexpr size_t kMaxNamespaceNameBytes = 128;
Status ValidateNamespaceName(std::string_view name);

}  // namespace ptstore

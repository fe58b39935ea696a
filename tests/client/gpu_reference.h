// The CPU reference of the gather into vLLM's paged KV layout, and the cases
// both gather tests run: gpu_plan_test (the launch plan emulated on the CPU,
// everywhere) and gpu_copy_test (the real kernel, on a GPU).
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "ptstore/gpu.h"

namespace ptstore::testing {

inline std::vector<uint8_t> RandomBytes(size_t n, uint32_t seed) {
  std::vector<uint8_t> v(n);
  std::mt19937 rng(seed);
  for (size_t i = 0; i < n; i += 4) {
    uint32_t x = rng();
    std::memcpy(v.data() + i, &x, std::min<size_t>(4, n - i));
  }
  return v;
}

// Bytes of one layer's tensor under `c`'s strides.
inline uint64_t LayerBytes(const Layout& l, const gpu::PagedKVCache& c) {
  const int64_t head = l.head_dim * static_cast<int64_t>(DTypeSize(l.dtype));
  int64_t last = c.kv_stride + (static_cast<int64_t>(c.num_blocks) - 1) * c.block_stride +
                 (c.block_size - 1) * c.slot_stride + (l.kv_heads - 1) * c.head_stride + head;
  return static_cast<uint64_t>(last);
}

// vLLM's HND variant of FlashAttention: [2, num_blocks, kv_heads, block_size, head_dim].
inline gpu::PagedKVCache HndCache(const Layout& l, uint64_t num_blocks, uint32_t block_size) {
  gpu::PagedKVCache c;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.slot_stride = l.head_dim * static_cast<int64_t>(DTypeSize(l.dtype));
  c.head_stride = c.slot_stride * block_size;
  c.block_stride = c.head_stride * l.kv_heads;
  c.kv_stride = c.block_stride * static_cast<int64_t>(num_blocks);
  return c;
}

// CPU reference: token i of `src` (token-major) into block ids[(base + i) /
// bs], slot (base + i) % bs, of every layer of `dst`, whose bytes are in
// `host` (one vector per layer of dst; dst's pointers are not used).
inline void ReferenceGather(const uint8_t* src, uint64_t n, const Layout& l, const gpu::PagedKVCache& dst,
                            const std::vector<int32_t>& ids, std::vector<std::vector<uint8_t>>& host,
                            uint64_t base = 0) {
  const uint64_t head = l.head_dim * DTypeSize(l.dtype);
  for (uint64_t i = 0; i < n; ++i) {
    const uint8_t* tok = src + i * l.BytesPerToken();
    const int64_t blk = ids[(base + i) / dst.block_size];
    const int64_t slot = static_cast<int64_t>((base + i) % dst.block_size);
    for (size_t li = 0; li < dst.layers.size(); ++li) {
      const uint64_t layer = dst.first_layer + li;
      for (int kv = 0; kv < 2; ++kv) {
        for (uint32_t h = 0; h < l.kv_heads; ++h) {
          const uint8_t* s = tok + ((layer * 2 + kv) * l.kv_heads + h) * head;
          uint8_t* d = host[li].data() + kv * dst.kv_stride + blk * dst.block_stride + slot * dst.slot_stride +
                       h * dst.head_stride;
          std::memcpy(d, s, head);
        }
      }
    }
  }
}

inline std::vector<int32_t> RandomBlockIds(uint64_t count, uint64_t num_blocks, uint32_t seed) {
  std::vector<int32_t> all(num_blocks);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(count);
  return all;
}

struct GatherCase {
  const char* name;
  Layout layout;
  uint32_t block_size;
  uint64_t num_blocks;
  uint64_t tokens;
  int cache;            // 0 FlashAttention, 1 FlashInfer, 2 HND
  uint32_t first_layer;
  uint32_t num_layers;  // 0: all from first_layer
  int segments;         // the source cut into this many pieces
  bool host_source;     // (GPU test) registered host memory instead of device memory
  uint32_t vector_bytes;  // what the plan should pick

  gpu::PagedKVCache Cache() const {
    gpu::PagedKVCache c = cache == 0   ? gpu::PagedKVCache::FlashAttention({}, layout, num_blocks, block_size)
                          : cache == 1 ? gpu::PagedKVCache::FlashInfer({}, layout, num_blocks, block_size)
                                       : HndCache(layout, num_blocks, block_size);
    c.first_layer = first_layer;
    return c;
  }
  uint32_t Layers() const { return num_layers ? num_layers : layout.layers - first_layer; }
  // Tokens in segment s of `segments`.
  uint64_t SegmentTokens(int s, uint64_t at) const {
    return s + 1 == segments ? tokens - at : tokens / segments + s;
  }
};

inline std::vector<GatherCase> GatherCases() {
  return {
      {"bf16 flash_attn", {4, 8, 128, DType::kBF16, 16}, 16, 64, 16 * 20, 0, 0, 0, 1, false, 16},
      {"bf16 partial last block", {4, 8, 128, DType::kBF16, 16}, 16, 64, 16 * 20 + 5, 0, 0, 0, 3, false, 16},
      {"fp16 flashinfer", {3, 4, 64, DType::kFP16, 16}, 16, 40, 16 * 7 + 9, 1, 0, 0, 2, false, 16},
      {"fp32 flash_attn", {2, 2, 64, DType::kFP32, 16}, 16, 32, 16 * 9 + 1, 0, 0, 0, 4, false, 16},
      {"fp32 hnd", {2, 4, 32, DType::kFP32, 16}, 16, 24, 16 * 5 + 15, 2, 0, 0, 1, false, 16},
      {"bf16 layer subset", {6, 2, 64, DType::kBF16, 16}, 16, 32, 16 * 6 + 3, 0, 2, 3, 2, false, 16},
      {"bf16 block 32 vs store blocks of 16", {2, 8, 128, DType::kBF16, 16}, 32, 16, 32 * 4 + 17, 0, 0, 0, 5, false,
       16},
      {"fp16 odd head_dim (2-byte vectors)", {2, 3, 5, DType::kFP16, 16}, 16, 16, 16 * 3 + 2, 2, 0, 0, 2, false, 2},
      {"fp16 head_dim 4 (8-byte vectors)", {2, 3, 4, DType::kFP16, 16}, 16, 16, 16 * 3 + 2, 2, 0, 0, 2, false, 8},
      {"fp8", {2, 8, 128, DType::kFP8, 16}, 16, 16, 16 * 4 + 7, 0, 0, 0, 1, false, 16},
      {"fp8 head_dim 3 (bytes)", {2, 1, 3, DType::kFP8, 16}, 16, 16, 16 * 2 + 7, 0, 0, 0, 2, false, 1},
      {"bf16 registered host source (zero-copy)", {4, 8, 128, DType::kBF16, 16}, 16, 64, 16 * 20 + 11, 0, 0, 0, 3,
       true, 16},
      {"fp32 registered host source, hnd", {2, 4, 32, DType::kFP32, 16}, 16, 24, 16 * 5 + 1, 2, 1, 1, 2, true, 16},
  };
}

}  // namespace ptstore::testing

// The gather kernel of the GPU copy path (gpu_kernels.cu), seen from the
// host code (gpu_copy.cc). C++17 and CUDA's runtime header only: nvcc
// compiles the kernel file without libptstore's headers.
//
// The kernel moves "rows": runs of bytes that are contiguous both in the
// token-major source and in the paged destination. A token's source bytes
// are [layer][kv][head][head_dim]; a row is one head's head_dim elements, or
// all kv_heads of one (layer, kv) when the destination keeps the heads of a
// slot adjacent too (vLLM's NHD layouts). Rows are numbered token by token
// in source order, so consecutive threads read consecutive source bytes.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace ptstore::gpu::detail {

struct GatherParams {
  // Source: segment s holds tokens [seg_first[s], seg_first[s + 1]) of the
  // moved range at device-readable address seg_ptr[s]. num_segs >= 1.
  const uint64_t* seg_ptr = nullptr;
  const uint64_t* seg_first = nullptr;  // num_segs + 1 entries, seg_first[0] = 0
  uint32_t num_segs = 0;
  uint64_t token_bytes = 0;  // source bytes per token (all layers)
  uint64_t layer_bytes = 0;  // source bytes per layer of a token (K and V)
  uint64_t kv_bytes = 0;     // source bytes of K (or V) of a layer of a token

  // Destination: layer_ptr[l] is the paged tensor of source layer
  // first_layer + l; token i of the range lands in block
  // block_ids[(dst_token_base + i) / block_size], slot (dst_token_base + i) % block_size.
  const uint64_t* layer_ptr = nullptr;
  const int32_t* block_ids = nullptr;
  uint32_t first_layer = 0;
  uint32_t num_layers = 0;
  uint32_t block_size = 0;
  uint64_t dst_token_base = 0;
  int64_t kv_stride = 0;
  int64_t block_stride = 0;
  int64_t slot_stride = 0;
  int64_t row_stride = 0;  // between the rows of one (layer, kv): the head stride

  uint64_t tokens = 0;         // tokens moved
  uint32_t rows_per_kv = 0;    // kv_heads, or 1 when a row holds every head
  uint32_t row_bytes = 0;      // a multiple of vector_bytes
  uint32_t vector_bytes = 0;   // 16, 8, 4, 2 or 1: every address and stride is a multiple of it
};

// Launches the kernel on `stream` (blocks: a grid of at most `max_blocks`
// blocks). The tables must be in device-readable memory that lives until the
// kernel has run. Returns the launch's error.
cudaError_t LaunchGather(const GatherParams& p, uint32_t max_blocks, cudaStream_t stream);

}  // namespace ptstore::gpu::detail

// The gather kernel of the GPU copy path (gpu_kernels.cu), seen from the
// host code (gpu_plan.cc, gpu_copy.cc). Plain C++17 without CUDA's headers:
// nvcc compiles the kernel without libptstore's headers, and the address
// arithmetic below also runs on the CPU (RunGatherOnHost, for tests).
//
// The kernel moves "rows": runs of bytes that are contiguous both in the
// token-major source and in the paged destination. A token's source bytes
// are [layer][kv][head][head_dim]; a row is one head's head_dim elements, or
// all kv_heads of one (layer, kv) when the destination keeps the heads of a
// slot adjacent too (vLLM's NHD layouts). Rows are numbered token by token
// in source order, so consecutive threads read consecutive source bytes.
#pragma once

#include <cstdint>

struct CUstream_st;

#if defined(__CUDACC__)
#define PTS_GPU_HD __host__ __device__ __forceinline__
#else
#define PTS_GPU_HD inline
#endif

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

  PTS_GPU_HD uint32_t vectors_per_row() const { return row_bytes / vector_bytes; }
  PTS_GPU_HD uint32_t rows_per_token() const { return num_layers * 2 * rows_per_kv; }
  PTS_GPU_HD uint64_t total_vectors() const { return tokens * rows_per_token() * vectors_per_row(); }
};

struct GatherAddress {
  const unsigned char* src;
  unsigned char* dst;
};

// Where vector g (of total_vectors()) comes from and goes to. The kernel
// moves vector_bytes bytes for each; the CPU emulation (RunGatherOnHost,
// tests) does the same with memcpy.
PTS_GPU_HD GatherAddress AddressOf(const GatherParams& p, uint64_t g, uint32_t vectors_per_row,
                                   uint32_t rows_per_token) {
  const uint64_t row = g / vectors_per_row;
  const uint32_t lane = static_cast<uint32_t>(g - row * vectors_per_row);
  const uint64_t t = row / rows_per_token;
  uint32_t r = static_cast<uint32_t>(row - t * rows_per_token);
  const uint32_t rows_per_layer = 2 * p.rows_per_kv;
  const uint32_t l = r / rows_per_layer;
  r -= l * rows_per_layer;
  const uint32_t kv = r / p.rows_per_kv;
  const uint32_t h = r - kv * p.rows_per_kv;
  // The segment: last s with seg_first[s] <= t (segments are few).
  uint32_t lo = 0, hi = p.num_segs;
  while (hi - lo > 1) {
    const uint32_t mid = (lo + hi) / 2;
    if (p.seg_first[mid] <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  GatherAddress a;
  a.src = reinterpret_cast<const unsigned char*>(p.seg_ptr[lo]) + (t - p.seg_first[lo]) * p.token_bytes +
          uint64_t{p.first_layer + l} * p.layer_bytes + uint64_t{kv} * p.kv_bytes + uint64_t{h} * p.row_bytes +
          uint64_t{lane} * p.vector_bytes;
  const uint64_t i = p.dst_token_base + t;
  const uint64_t b = i / p.block_size;
  const int64_t slot = static_cast<int64_t>(i - b * p.block_size);
  a.dst = reinterpret_cast<unsigned char*>(p.layer_ptr[l]) + int64_t{kv} * p.kv_stride +
          int64_t{p.block_ids[b]} * p.block_stride + slot * p.slot_stride + int64_t{h} * p.row_stride +
          int64_t{lane} * p.vector_bytes;
  return a;
}

// Launches the kernel on `stream` (a grid of at most `max_blocks` blocks of
// 256 threads). The tables must be in device-readable memory that lives
// until the kernel has run. Returns the launch's cudaError_t.
int LaunchGather(const GatherParams& p, uint32_t max_blocks, CUstream_st* stream);

}  // namespace ptstore::gpu::detail

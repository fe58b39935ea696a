// The gather kernel: token-major KV rows (in device memory, or in the
// registered arena read over the bus) into vLLM's paged per-layer tensors.
// See gpu_kernels.h for the row decomposition.
#include "client/gpu_kernels.h"

#include <cuda_runtime.h>

namespace ptstore::gpu::detail {

namespace {

// The unit of a load and a store: 16 bytes when every address allows it.
template <int N>
struct VecOf;
template <>
struct VecOf<16> {
  using T = uint4;
};
template <>
struct VecOf<8> {
  using T = uint2;
};
template <>
struct VecOf<4> {
  using T = unsigned int;
};
template <>
struct VecOf<2> {
  using T = unsigned short;
};
template <>
struct VecOf<1> {
  using T = unsigned char;
};

// Vectors a thread keeps in flight per loop: its loads are all issued before
// its stores, so each thread has this many reads outstanding over the bus.
constexpr int kUnroll = 4;
constexpr int kThreads = 256;

__device__ __forceinline__ uint32_t SegmentOf(const GatherParams& p, uint64_t t) {
  // Last s with seg_first[s] <= t. Segments are few (increments of a prefix).
  uint32_t lo = 0, hi = p.num_segs;
  while (hi - lo > 1) {
    uint32_t mid = (lo + hi) / 2;
    if (p.seg_first[mid] <= t) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return lo;
}

template <int V>
__global__ void __launch_bounds__(kThreads) GatherKernel(GatherParams p, uint64_t total_vectors,
                                                         uint32_t vectors_per_row, uint32_t rows_per_token) {
  using Vec = typename VecOf<V>::T;
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  const uint32_t rows_per_layer = 2 * p.rows_per_kv;
  for (uint64_t base = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; base < total_vectors;
       base += stride * kUnroll) {
    Vec v[kUnroll];
    Vec* dst[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t g = base + u * stride;
      dst[u] = nullptr;
      if (g < total_vectors) {
        const uint64_t row = g / vectors_per_row;
        const uint32_t lane = static_cast<uint32_t>(g - row * vectors_per_row);
        const uint64_t t = row / rows_per_token;
        uint32_t r = static_cast<uint32_t>(row - t * rows_per_token);
        const uint32_t l = r / rows_per_layer;
        r -= l * rows_per_layer;
        const uint32_t kv = r / p.rows_per_kv;
        const uint32_t h = r - kv * p.rows_per_kv;

        const uint32_t s = SegmentOf(p, t);
        const unsigned char* src = reinterpret_cast<const unsigned char*>(p.seg_ptr[s]) +
                                   (t - p.seg_first[s]) * p.token_bytes +
                                   uint64_t{p.first_layer + l} * p.layer_bytes + uint64_t{kv} * p.kv_bytes +
                                   uint64_t{h} * p.row_bytes + uint64_t{lane} * V;
        const uint64_t i = p.dst_token_base + t;
        const uint64_t b = i / p.block_size;
        const int64_t slot = static_cast<int64_t>(i - b * p.block_size);
        unsigned char* d = reinterpret_cast<unsigned char*>(p.layer_ptr[l]) + kv * p.kv_stride +
                           int64_t{p.block_ids[b]} * p.block_stride + slot * p.slot_stride +
                           int64_t{h} * p.row_stride + int64_t{lane} * V;
        v[u] = *reinterpret_cast<const Vec*>(src);
        dst[u] = reinterpret_cast<Vec*>(d);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (dst[u] != nullptr) *dst[u] = v[u];
    }
  }
}

template <int V>
cudaError_t Launch(const GatherParams& p, uint32_t max_blocks, cudaStream_t stream) {
  const uint32_t vectors_per_row = p.row_bytes / V;
  const uint32_t rows_per_token = p.num_layers * 2 * p.rows_per_kv;
  const uint64_t total = p.tokens * rows_per_token * vectors_per_row;
  if (total == 0) return cudaSuccess;
  uint64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > max_blocks) blocks = max_blocks;
  if (blocks == 0) blocks = 1;
  GatherKernel<V><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, total, vectors_per_row,
                                                                          rows_per_token);
  return cudaGetLastError();
}

}  // namespace

cudaError_t LaunchGather(const GatherParams& p, uint32_t max_blocks, cudaStream_t stream) {
  switch (p.vector_bytes) {
    case 16:
      return Launch<16>(p, max_blocks, stream);
    case 8:
      return Launch<8>(p, max_blocks, stream);
    case 4:
      return Launch<4>(p, max_blocks, stream);
    case 2:
      return Launch<2>(p, max_blocks, stream);
    case 1:
      return Launch<1>(p, max_blocks, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace ptstore::gpu::detail

// The gather kernel: token-major KV rows (in device memory, or in the
// registered arena read over the bus) into vLLM's paged per-layer tensors.
// gpu_kernels.h has the row decomposition and the address arithmetic.
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

template <int V>
__global__ void __launch_bounds__(kThreads) GatherKernel(GatherParams p, uint64_t total_vectors,
                                                         uint32_t vectors_per_row, uint32_t rows_per_token) {
  using Vec = typename VecOf<V>::T;
  const uint64_t stride = uint64_t{gridDim.x} * blockDim.x;
  for (uint64_t base = uint64_t{blockIdx.x} * blockDim.x + threadIdx.x; base < total_vectors;
       base += stride * kUnroll) {
    Vec v[kUnroll];
    Vec* dst[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint64_t g = base + u * stride;
      dst[u] = nullptr;
      if (g < total_vectors) {
        const GatherAddress a = AddressOf(p, g, vectors_per_row, rows_per_token);
        v[u] = *reinterpret_cast<const Vec*>(a.src);
        dst[u] = reinterpret_cast<Vec*>(a.dst);
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
  const uint64_t total = p.total_vectors();
  if (total == 0) return cudaSuccess;
  uint64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks > max_blocks) blocks = max_blocks;
  if (blocks == 0) blocks = 1;
  GatherKernel<V><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(p, total, p.vectors_per_row(),
                                                                          p.rows_per_token());
  return cudaGetLastError();
}

}  // namespace

int LaunchGather(const GatherParams& p, uint32_t max_blocks, CUstream_st* stream) {
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

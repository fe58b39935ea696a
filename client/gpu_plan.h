// The CUDA-free half of the gather (library ptstore_gpu_plan, built with or
// without a CUDA toolkit): checking a paged destination, and the plan of one
// kernel launch (its parameters and the table of segment addresses, layer
// addresses and block ids it reads). gpu_copy.cc uploads the table and
// launches; RunGatherOnHost does the kernel's work on the CPU, so that the
// address arithmetic is tested on machines without a GPU.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "client/gpu_kernels.h"
#include "ptstore/gpu.h"
#include "ptstore/types.h"

namespace ptstore::gpu::detail {

// The copy plan knows dense layouts only (one K/V tensor per layer): OK for
// one, InvalidArgument saying so for a grouped layout. `what` names the call.
Status RequireDenseLayout(const Layout& layout, const char* what);

// Checks a destination for `dst_tokens` tokens written from block_ids[0]'s
// first slot on: the layout (valid and dense), the layer range, sizes and strides, the number
// and range of block ids, null layer pointers. (Whether the pointers are
// device memory needs CUDA: gpu_copy.cc checks that.)
Status CheckPagedShape(const Layout& layout, const PagedKVCache& dst, std::span<const int32_t> block_ids,
                       uint64_t dst_tokens);

struct GatherPlan {
  GatherParams params;          // its table pointers set by Bind
  std::vector<uint64_t> table;  // seg_ptr | seg_first | layer_ptr | block ids (int32, packed)
  size_t seg_first_at = 0;
  size_t layer_at = 0;
  size_t ids_at = 0;
  // Points the parameters' tables into a copy of `table` starting at `base`.
  void Bind(const uint64_t* base);
};

// The launch moving `tokens` tokens of `segments` (addresses the kernel can
// read) to destination tokens [dst_token_base, dst_token_base + tokens).
// REQUIRES: CheckPagedShape passed for dst_token_base + tokens tokens; the
// segments hold at least `tokens` tokens, none null.
GatherPlan PlanGather(std::span<const TokenMajorSegment> segments, const Layout& layout, const PagedKVCache& dst,
                      std::span<const int32_t> block_ids, uint64_t tokens, uint64_t dst_token_base);

// A run of a prefix's bytes that is contiguous in the arena.
struct ArenaRun {
  uint64_t arena_offset = 0;
  uint64_t length = 0;
  bool operator==(const ArenaRun&) const = default;
};
// The arena runs holding prefix bytes [begin, end) of `extents` (in prefix
// order), adjacent extents merged: one cudaMemcpyAsync each.
std::vector<ArenaRun> ArenaRuns(const std::vector<Extent>& extents, uint64_t begin, uint64_t end);

// The kernel's work on the CPU, for a plan bound to host memory.
void RunGatherOnHost(const GatherParams& p);

}  // namespace ptstore::gpu::detail

// The gather into vLLM's paged KV layout without a GPU: the launch plan that
// gpu_copy.cc uploads (client/gpu_plan.h) run through the kernel's own
// address arithmetic on the CPU (RunGatherOnHost), against the reference;
// and the destination checks. Built and run with or without CUDA.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "client/gpu_plan.h"
#include "tests/client/gpu_reference.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using gpu::PagedKVCache;
using gpu::TokenMajorSegment;
using namespace ptstore::testing;

// Host "device" memory: sources and layers are plain vectors here. Vectors
// are over-aligned (new of 16-byte aligned storage) like cudaMalloc's.
struct Aligned {
  explicit Aligned(size_t n, uint8_t fill) : bytes(n + 16, fill) {}
  uint8_t* data() {
    auto p = reinterpret_cast<uintptr_t>(bytes.data());
    return bytes.data() + ((16 - p % 16) % 16);
  }
  std::vector<uint8_t> bytes;
};

// Runs one case as LoadToPagedKV would: tokens [0, n) in launches of
// `chunk` tokens (0: one launch), each with its own plan.
void RunCase(const GatherCase& gc, uint64_t chunk) {
  const Layout& l = gc.layout;
  const uint64_t bpt = l.BytesPerToken();
  PagedKVCache c = gc.Cache();
  std::vector<std::unique_ptr<Aligned>> layers;
  std::vector<std::vector<uint8_t>> want;
  for (uint32_t i = 0; i < gc.Layers(); ++i) {
    layers.push_back(std::make_unique<Aligned>(LayerBytes(l, c), 0xA5));
    c.layers.push_back(layers.back()->data());
    want.emplace_back(LayerBytes(l, c), 0xA5);
  }
  std::vector<uint8_t> src = RandomBytes(gc.tokens * bpt, 42);
  std::vector<int32_t> ids = RandomBlockIds((gc.tokens + gc.block_size - 1) / gc.block_size, gc.num_blocks, 7);
  ReferenceGather(src.data(), gc.tokens, l, c, ids, want);
  ASSERT_OK(gpu::detail::CheckPagedShape(l, c, ids, gc.tokens));

  // The source in segments, each its own allocation.
  std::vector<std::unique_ptr<Aligned>> pieces;
  std::vector<TokenMajorSegment> segs;
  uint64_t at = 0;
  for (int s = 0; s < gc.segments; ++s) {
    const uint64_t n = gc.SegmentTokens(s, at);
    pieces.push_back(std::make_unique<Aligned>(n * bpt, 0));
    std::memcpy(pieces.back()->data(), src.data() + at * bpt, n * bpt);
    segs.push_back({pieces.back()->data(), n});
    at += n;
  }
  if (chunk == 0) {
    gpu::detail::GatherPlan plan = gpu::detail::PlanGather(segs, l, c, ids, gc.tokens, 0);
    EXPECT_EQ(plan.params.vector_bytes, gc.vector_bytes);
    plan.Bind(plan.table.data());
    gpu::detail::RunGatherOnHost(plan.params);
  } else {
    // Staged: one contiguous segment per chunk, written from token a on.
    for (uint64_t a = 0; a < gc.tokens; a += chunk) {
      const uint64_t m = std::min(chunk, gc.tokens - a);
      Aligned buf(m * bpt, 0);
      std::memcpy(buf.data(), src.data() + a * bpt, m * bpt);
      TokenMajorSegment one{buf.data(), m};
      gpu::detail::GatherPlan plan = gpu::detail::PlanGather({&one, 1}, l, c, ids, m, a);
      plan.Bind(plan.table.data());
      gpu::detail::RunGatherOnHost(plan.params);
    }
  }
  for (size_t i = 0; i < layers.size(); ++i) {
    const uint8_t* got = layers[i]->data();
    auto diff = std::mismatch(want[i].begin(), want[i].end(), got);
    ASSERT_TRUE(diff.first == want[i].end())
        << "layer " << i << " differs at byte " << (diff.first - want[i].begin()) << " of " << want[i].size();
  }
}

TEST(GpuPlan, OneLaunchMatchesReference) {
  for (const GatherCase& gc : GatherCases()) {
    SCOPED_TRACE(gc.name);
    RunCase(gc, 0);
  }
}

TEST(GpuPlan, StagedChunksMatchReference) {
  for (const GatherCase& gc : GatherCases()) {
    for (uint64_t chunk : {5, 16, 37}) {
      SCOPED_TRACE(std::string(gc.name) + ", chunks of " + std::to_string(chunk));
      RunCase(gc, chunk);
    }
  }
}

TEST(GpuPlan, RowsSpanEveryHeadOnlyWhenAdjacent) {
  Layout l{2, 8, 128, DType::kBF16, 16};
  std::vector<uint8_t> src(l.BytesPerToken() * 16);
  TokenMajorSegment seg{src.data(), 16};
  std::vector<int32_t> ids{0};
  PagedKVCache fa = PagedKVCache::FlashAttention({src.data(), src.data()}, l, 1, 16);
  auto p = gpu::detail::PlanGather({&seg, 1}, l, fa, ids, 16, 0).params;
  EXPECT_EQ(p.rows_per_kv, 1u);
  EXPECT_EQ(p.row_bytes, 8u * 128 * 2);
  PagedKVCache hnd = HndCache(l, 1, 16);
  hnd.layers = {src.data(), src.data()};
  p = gpu::detail::PlanGather({&seg, 1}, l, hnd, ids, 16, 0).params;
  EXPECT_EQ(p.rows_per_kv, 8u);
  EXPECT_EQ(p.row_bytes, 128u * 2);
}

TEST(GpuPlan, CheckPagedShapeErrors) {
  Layout l{4, 2, 16, DType::kBF16, 16};
  int dummy = 0;
  PagedKVCache c = PagedKVCache::FlashAttention({&dummy, &dummy, &dummy, &dummy}, l, 8, 16);
  std::vector<int32_t> ids{0, 1, 2, 3};
  EXPECT_OK(gpu::detail::CheckPagedShape(l, c, ids, 64));
  EXPECT_OK(gpu::detail::CheckPagedShape(l, c, ids, 49));

  auto expect_bad = [&](const PagedKVCache& cc, std::span<const int32_t> ii, uint64_t n, const std::string& part) {
    Status s = gpu::detail::CheckPagedShape(l, cc, ii, n);
    EXPECT_ERROR(s, Code::kInvalidArgument);
    EXPECT_NE(s.message().find(part), std::string::npos) << s.ToString();
  };
  expect_bad(c, std::span(ids).first(3), 64, "need 4 block ids, got 3");
  std::vector<int32_t> bad{0, 1, 8, 3};
  expect_bad(c, bad, 64, "block id 8 (index 2) is outside the cache's 8 blocks");
  bad[2] = -2;
  expect_bad(c, bad, 64, "block id -2");
  PagedKVCache cc = c;
  cc.layers[2] = nullptr;
  expect_bad(cc, ids, 64, "layer 2 of the paged KV cache is a null pointer");
  cc = c;
  cc.first_layer = 1;
  expect_bad(cc, ids, 64, "layers 1..4, the layout 4 layers");
  cc = c;
  cc.layers.clear();
  expect_bad(cc, ids, 64, "no layers");
  cc = c;
  cc.block_size = 0;
  expect_bad(cc, ids, 64, "block_size > 0");
  cc = c;
  cc.slot_stride = 0;
  expect_bad(cc, ids, 64, "strides must be positive");
  cc = c;
  cc.head_stride = 8;
  expect_bad(cc, ids, 64, "below one head");
  Layout bad_layout = l;
  bad_layout.head_dim = 0;
  Status s = gpu::detail::CheckPagedShape(bad_layout, c, ids, 64);
  EXPECT_ERROR(s, Code::kInvalidArgument);
}

TEST(GpuPlan, AGroupedLayoutIsRefusedNeverCopiedWrong) {
  // A valid grouped layout whose first group has the dense layout's shape:
  // the plan must still refuse it (its blocks hold other groups too).
  const Layout grouped = Layout::FromGroups(
      {LayoutGroup::Full(4, 2, 16, DType::kBF16), LayoutGroup::Window(4, 2, 16, DType::kBF16, 32)}, 16);
  ASSERT_OK(grouped.Validate());
  int dummy = 0;
  PagedKVCache c = PagedKVCache::FlashAttention({&dummy, &dummy, &dummy, &dummy}, Layout{4, 2, 16, DType::kBF16, 16},
                                                8, 16);
  std::vector<int32_t> ids{0, 1, 2, 3};
  Status s = gpu::detail::CheckPagedShape(grouped, c, ids, 64);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  EXPECT_NE(s.message().find("has 2 groups; the GPU copy path handles dense layouts only"), std::string::npos)
      << s.ToString();
  s = gpu::detail::RequireDenseLayout(grouped, "LoadToPagedKV");
  EXPECT_ERROR(s, Code::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("LoadToPagedKV: the layout {block_tokens=16 group=full:", 0), 0u) << s.ToString();
  EXPECT_OK(gpu::detail::RequireDenseLayout(Layout{4, 2, 16, DType::kBF16, 16}, "x"));
}

TEST(GpuPlan, ArenaRunsMergeAdjacentExtentsAndClip) {
  using gpu::detail::ArenaRun;
  using gpu::detail::ArenaRuns;
  // Extents of 100, 50 (adjacent in the arena to the first), 30 (elsewhere), 20 (adjacent to it).
  std::vector<Extent> e = {{TensorId{1}, 0, 100, 1000}, {TensorId{2}, 0, 50, 1100},
                           {TensorId{3}, 40, 30, 5000}, {TensorId{4}, 0, 20, 5030}};
  EXPECT_EQ(ArenaRuns(e, 0, 200), (std::vector<ArenaRun>{{1000, 150}, {5000, 50}}));
  EXPECT_EQ(ArenaRuns(e, 0, 120), (std::vector<ArenaRun>{{1000, 120}}));
  EXPECT_EQ(ArenaRuns(e, 10, 160), (std::vector<ArenaRun>{{1010, 140}, {5000, 10}}));
  EXPECT_EQ(ArenaRuns(e, 150, 200), (std::vector<ArenaRun>{{5000, 50}}));
  EXPECT_EQ(ArenaRuns(e, 185, 190), (std::vector<ArenaRun>{{5035, 5}}));
  EXPECT_TRUE(ArenaRuns(e, 50, 50).empty());
  EXPECT_TRUE(ArenaRuns({}, 0, 10).empty());
}

TEST(GpuPlan, Names) {
  EXPECT_EQ(gpu::ArenaPathName(gpu::ArenaPath::kRegisteredReadOnly), "registered-read-only");
  EXPECT_EQ(gpu::ArenaPathName(gpu::ArenaPath::kStaging), "staging");
  EXPECT_EQ(gpu::GatherModeName(gpu::GatherMode::kDirect), "direct");
  EXPECT_EQ(gpu::GatherModeName(gpu::GatherMode::kStaged), "staged");
  EXPECT_EQ(gpu::GatherModeName(gpu::GatherMode::kAuto), "auto");
}

}  // namespace
}  // namespace ptstore

#include "client/gpu_plan.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace ptstore::gpu {

std::string_view ArenaPathName(ArenaPath path) {
  switch (path) {
    case ArenaPath::kRegisteredReadOnly:
      return "registered-read-only";
    case ArenaPath::kRegistered:
      return "registered";
    case ArenaPath::kStaging:
      return "staging";
    case ArenaPath::kNone:
      break;
  }
  return "none";
}

std::string_view GatherModeName(GatherMode mode) {
  switch (mode) {
    case GatherMode::kDirect:
      return "direct";
    case GatherMode::kStaged:
      return "staged";
    case GatherMode::kAuto:
      break;
  }
  return "auto";
}

PagedKVCache PagedKVCache::FlashAttention(std::vector<void*> layers, const Layout& layout, uint64_t num_blocks,
                                          uint32_t block_size, uint32_t first_layer) {
  PagedKVCache c;
  c.layers = std::move(layers);
  c.first_layer = first_layer;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.head_stride = static_cast<int64_t>(uint64_t{layout.head_dim} * DTypeSize(layout.dtype));
  c.slot_stride = c.head_stride * layout.kv_heads;
  c.block_stride = c.slot_stride * block_size;
  c.kv_stride = c.block_stride * static_cast<int64_t>(num_blocks);
  return c;
}

PagedKVCache PagedKVCache::FlashInfer(std::vector<void*> layers, const Layout& layout, uint64_t num_blocks,
                                      uint32_t block_size, uint32_t first_layer) {
  PagedKVCache c;
  c.layers = std::move(layers);
  c.first_layer = first_layer;
  c.num_blocks = num_blocks;
  c.block_size = block_size;
  c.head_stride = static_cast<int64_t>(uint64_t{layout.head_dim} * DTypeSize(layout.dtype));
  c.slot_stride = c.head_stride * layout.kv_heads;
  c.kv_stride = c.slot_stride * block_size;
  c.block_stride = c.kv_stride * 2;
  return c;
}

namespace detail {

namespace {
uint64_t CeilDiv(uint64_t a, uint64_t b) { return (a + b - 1) / b; }
}  // namespace

Status RequireDenseLayout(const Layout& layout, const char* what) {
  if (!layout.grouped()) return Status::OK();
  // A grouped block is several groups' slices, each with its own shape: the
  // kernel's one (layers, 2, kv_heads, head_dim) row per token would copy
  // the wrong bytes, so refuse rather than guess.
  return InvalidArgument(std::string(what) + ": the layout {" + layout.ToString() + "} has " +
                         std::to_string(layout.groups.size()) +
                         " groups; the GPU copy path handles dense layouts only (copy a grouped prefix to "
                         "host memory with PinnedPrefix::CopyTo, or to device bytes with LoadToDevice)");
}

Status CheckPagedShape(const Layout& layout, const PagedKVCache& dst, std::span<const int32_t> block_ids,
                       uint64_t dst_tokens) {
  PTS_RETURN_IF_ERROR(layout.Validate());
  PTS_RETURN_IF_ERROR(RequireDenseLayout(layout, "the paged KV cache"));
  if (dst.layers.empty()) return InvalidArgument("the paged KV cache has no layers");
  if (uint64_t{dst.first_layer} + dst.layers.size() > layout.layers) {
    return InvalidArgument("the paged KV cache has layers " + std::to_string(dst.first_layer) + ".." +
                           std::to_string(dst.first_layer + dst.layers.size() - 1) + ", the layout " +
                           std::to_string(layout.layers) + " layers");
  }
  if (dst.block_size == 0 || dst.num_blocks == 0) {
    return InvalidArgument("the paged KV cache needs block_size > 0 and num_blocks > 0");
  }
  const int64_t head_bytes = int64_t{layout.head_dim} * static_cast<int64_t>(DTypeSize(layout.dtype));
  if (dst.kv_stride <= 0 || dst.block_stride <= 0 || dst.slot_stride <= 0 ||
      (layout.kv_heads > 1 && dst.head_stride <= 0)) {
    return InvalidArgument("the paged KV cache's strides must be positive (kv " + std::to_string(dst.kv_stride) +
                           ", block " + std::to_string(dst.block_stride) + ", slot " +
                           std::to_string(dst.slot_stride) + ", head " + std::to_string(dst.head_stride) + ")");
  }
  if (layout.kv_heads > 1 && dst.head_stride < head_bytes) {
    return InvalidArgument("the paged KV cache's head stride " + std::to_string(dst.head_stride) +
                           " bytes is below one head (" + std::to_string(head_bytes) + " bytes)");
  }
  const uint64_t need = CeilDiv(dst_tokens, dst.block_size);
  if (block_ids.size() < need) {
    return InvalidArgument(std::to_string(dst_tokens) + " tokens in blocks of " + std::to_string(dst.block_size) +
                           " need " + std::to_string(need) + " block ids, got " + std::to_string(block_ids.size()));
  }
  for (uint64_t i = 0; i < need; ++i) {
    if (block_ids[i] < 0 || static_cast<uint64_t>(block_ids[i]) >= dst.num_blocks) {
      return InvalidArgument("block id " + std::to_string(block_ids[i]) + " (index " + std::to_string(i) +
                             ") is outside the cache's " + std::to_string(dst.num_blocks) + " blocks");
    }
  }
  for (size_t l = 0; l < dst.layers.size(); ++l) {
    if (dst.layers[l] == nullptr) {
      return InvalidArgument("layer " + std::to_string(dst.first_layer + l) +
                             " of the paged KV cache is a null pointer");
    }
  }
  return Status::OK();
}

void GatherPlan::Bind(const uint64_t* base) {
  params.seg_ptr = base;
  params.seg_first = base + seg_first_at;
  params.layer_ptr = base + layer_at;
  params.block_ids = reinterpret_cast<const int32_t*>(base + ids_at);
}

GatherPlan PlanGather(std::span<const TokenMajorSegment> segments, const Layout& layout, const PagedKVCache& dst,
                      std::span<const int32_t> block_ids, uint64_t tokens, uint64_t dst_token_base) {
  GatherPlan plan;
  GatherParams& p = plan.params;
  const uint64_t elem = DTypeSize(layout.dtype);
  const uint64_t head_bytes = uint64_t{layout.head_dim} * elem;
  // A row holds every head of a (layer, kv) when the destination keeps them
  // adjacent too (NHD), else one head.
  const bool heads_adjacent = layout.kv_heads == 1 || dst.head_stride == static_cast<int64_t>(head_bytes);
  p.token_bytes = layout.BytesPerToken();
  p.kv_bytes = head_bytes * layout.kv_heads;
  p.layer_bytes = 2 * p.kv_bytes;
  p.first_layer = dst.first_layer;
  p.num_layers = static_cast<uint32_t>(dst.layers.size());
  p.block_size = dst.block_size;
  p.kv_stride = dst.kv_stride;
  p.block_stride = dst.block_stride;
  p.slot_stride = dst.slot_stride;
  p.row_stride = heads_adjacent ? 0 : dst.head_stride;
  p.tokens = tokens;
  p.rows_per_kv = heads_adjacent ? 1 : layout.kv_heads;
  p.row_bytes = static_cast<uint32_t>(heads_adjacent ? p.kv_bytes : head_bytes);

  std::vector<uint64_t> seg_ptr, seg_first{0};
  uint64_t align = p.token_bytes | p.kv_bytes | p.row_bytes | static_cast<uint64_t>(p.kv_stride) |
                   static_cast<uint64_t>(p.block_stride) | static_cast<uint64_t>(p.slot_stride) |
                   static_cast<uint64_t>(p.row_stride);
  for (const TokenMajorSegment& s : segments) {
    if (seg_first.back() >= tokens) break;
    if (s.tokens == 0) continue;
    seg_ptr.push_back(reinterpret_cast<uint64_t>(s.data));
    seg_first.push_back(seg_first.back() + s.tokens);
    align |= reinterpret_cast<uint64_t>(s.data);
  }
  for (void* l : dst.layers) align |= reinterpret_cast<uint64_t>(l);
  p.vector_bytes = 16;
  while (p.vector_bytes > 1 && (align & (p.vector_bytes - 1)) != 0) p.vector_bytes /= 2;
  p.num_segs = static_cast<uint32_t>(seg_ptr.size());

  // Block ids from the launch's first block on.
  const uint64_t first_block = dst_token_base / dst.block_size;
  const uint64_t nb = CeilDiv(dst_token_base + tokens, dst.block_size) - first_block;
  p.dst_token_base = dst_token_base - first_block * dst.block_size;

  std::vector<uint64_t>& t = plan.table;
  t.reserve(seg_ptr.size() + seg_first.size() + dst.layers.size() + (nb + 1) / 2);
  t.insert(t.end(), seg_ptr.begin(), seg_ptr.end());
  plan.seg_first_at = t.size();
  t.insert(t.end(), seg_first.begin(), seg_first.end());
  plan.layer_at = t.size();
  for (void* l : dst.layers) t.push_back(reinterpret_cast<uint64_t>(l));
  plan.ids_at = t.size();
  t.resize(plan.ids_at + (nb + 1) / 2, 0);
  std::memcpy(t.data() + plan.ids_at, block_ids.data() + first_block, nb * sizeof(int32_t));
  return plan;
}

std::vector<ArenaRun> ArenaRuns(const std::vector<Extent>& extents, uint64_t begin, uint64_t end) {
  std::vector<ArenaRun> runs;
  uint64_t pos = 0;
  for (const Extent& e : extents) {
    if (pos >= end) break;
    const uint64_t a = std::max(pos, begin);
    const uint64_t b = std::min(pos + e.length, end);
    if (a < b) {
      const uint64_t off = e.arena_offset + (a - pos);
      if (!runs.empty() && runs.back().arena_offset + runs.back().length == off) {
        runs.back().length += b - a;
      } else {
        runs.push_back(ArenaRun{off, b - a});
      }
    }
    pos += e.length;
  }
  return runs;
}

void RunGatherOnHost(const GatherParams& p) {
  const uint64_t total = p.total_vectors();
  const uint32_t vpr = p.vectors_per_row();
  const uint32_t rpt = p.rows_per_token();
  for (uint64_t g = 0; g < total; ++g) {
    const GatherAddress a = AddressOf(p, g, vpr, rpt);
    std::memcpy(a.dst, a.src, p.vector_bytes);
  }
}

}  // namespace detail
}  // namespace ptstore::gpu

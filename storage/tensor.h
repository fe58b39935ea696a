// A tensor in the node's arena: the immutable bytes of one increment as it
// was saved (or fetched, for a replica). Radix nodes point into it; splitting
// a node splits metadata, never the tensor.
//
// Thread safety: Tensors are owned by the Store and touched only under its
// mutex.
#pragma once

#include <cstdint>
#include <vector>

#include "ptstore/types.h"

namespace ptstore::storage {

struct Namespace;
struct RadixNode;

struct Tensor {
  TensorId id;
  CacheClass cache_class = CacheClass::kOwned;
  Namespace* ns = nullptr;
  uint64_t arena_offset = 0;   // where the bytes start in the arena
  uint64_t bytes = 0;          // logical length (whole blocks)
  uint64_t allocated = 0;      // bytes reserved in the allocator (rounded up)
  uint64_t start_token = 0;    // position of its first token in the prefix
  uint64_t tokens = 0;

  uint32_t pins = 0;           // leases and in-flight saves holding it
  uint64_t hits = 0;           // loads that used it
  double cost = 0;             // GDSF: recompute cost of its tokens
  double priority = 0;         // GDSF: L + hits * cost / size (>= descendants)
  bool in_index = false;       // false once removed/evicted; freed at pins == 0

  std::vector<RadixNode*> nodes;  // radix nodes that point into it (a chain)
  // Children of its nodes that belong to other tensors. A tensor is a leaf
  // (evictable before its ancestors) when this is 0.
  uint32_t foreign_children = 0;
};

}  // namespace ptstore::storage

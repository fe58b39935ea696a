// What the Store's pins and lookups return (store.h): a prefix's match and
// the extents of its bytes (with arena offsets when pinned, under a lease),
// and one increment by its key. Plain values.
#pragma once

#include <cstdint>
#include <vector>

#include "ptstore/types.h"

namespace ptstore::storage {

struct IncrementResult {
  PrefixNodeInfo node;
  std::vector<uint32_t> tokens;  // the increment's own token ids
  uint64_t lease_id = 0;         // pin only
  std::vector<Extent> extents;   // pin only, with arena offsets
};

struct PrefixResult {
  uint64_t matched_tokens = 0;
  uint64_t lease_id = 0;        // Pin only
  std::vector<Extent> extents;  // arena_offset filled by Pin
};

}  // namespace ptstore::storage

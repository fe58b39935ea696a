// Rendezvous (highest-random-weight) hashing: which node holds the index
// shard of a root.
//
// A "root" is the chain key of a prefix's first block (namespace, salt and
// first block's tokens: include/ptstore/keys.h), so every prefix that starts
// the same way has its index on the same node. Each node gets the weight
//
//   w(node, root) = XXH3_64bits(root.hi u64 LE ‖ root.lo u64 LE ‖ node_id u32 LE)
//
// and nodes are ranked by weight, highest first (ties: lower id first). The
// shard is the first alive node in that order; when it dies, its roots move
// to the next one and no other root moves. Adding a node moves only the roots
// it now ranks first for (about 1/(n+1) of them).
//
// Pure functions; thread safe.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "ptstore/keys.h"

namespace ptstore::core {

inline constexpr uint32_t kNoShard = 0xffffffffu;

uint64_t RendezvousWeight(const ChainKey& root, uint32_t node_id);
// Every node of `node_ids`, best first. The result does not depend on the
// order of `node_ids`; duplicates are kept.
std::vector<uint32_t> RendezvousOrder(const ChainKey& root, std::span<const uint32_t> node_ids);
// The first node of RendezvousOrder(root, alive); kNoShard when `alive` is
// empty. Linear in alive.size(), no allocation.
uint32_t ShardOf(const ChainKey& root, std::span<const uint32_t> alive);

}  // namespace ptstore::core

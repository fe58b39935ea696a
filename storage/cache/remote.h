// What the node store says to and asks of the cluster: who owns which
// blocks of a prefix, and the fetcher that brings other nodes' bytes into
// this node's arena (storage/cluster/cluster.h implements it over TCP or RMA).
//
// Blocks are counted from the start of the prompt; a range of blocks of a
// prompt is named by the prompt's tokens up to its end (the owner matches
// them in its own index), never by addresses, so an owner whose index is
// shaped differently still finds the bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/ownership.h"
#include "ptstore/status.h"
#include "ptstore/types.h"

namespace ptstore::storage {

using core::NamespaceDef;
using core::OwnedRange;

// The longest match of a prompt and who owns each of its blocks.
struct Ownership {
  uint64_t blocks = 0;
  std::vector<OwnedRange> ranges;  // cover [0, blocks), in order
  std::vector<bool> held;          // per range: this node holds all its bytes (in DRAM or on SSD)
  // The index goes on past the match (it ends inside an increment, or the
  // increment it ends with has continuations): other prompts that share the
  // match may match more. Conservatively true for an empty match.
  bool continues = true;
};

// Where a removal starts: blocks [from_block, ...) of the prefix `tokens`
// (tokens holds at least from_block + 1 whole blocks) and all below them.
struct RemovalPoint {
  std::string ns;
  std::vector<uint32_t> tokens;
  uint64_t from_block = 0;
};

// An increment this node owns: blocks [first_block, end) of `tokens`.
struct HeldIncrement {
  std::string ns;
  std::vector<uint32_t> tokens;  // the whole prefix up to its last block
  uint64_t first_block = 0;
};

// One run of blocks to fetch from an owner into this node's arena.
struct FetchSegment {
  uint64_t start_block = 0;
  uint64_t end_block = 0;
  uint64_t arena_offset = 0;   // destination of block start_block
  uint64_t fetched_blocks = 0; // set by the fetcher: blocks that arrived, from start_block
  bool gone = false;           // set by the fetcher: the owner does not hold the blocks past fetched_blocks
};

// Everything one load needs from one owner: one request carries it all.
struct FetchRequest {
  uint32_t owner = 0;
  std::vector<FetchSegment> segments;
};

class RemoteFetcher {
 public:
  virtual ~RemoteFetcher() = default;
  // Fetches every request's segments of the prompt `tokens` (whole blocks,
  // up to the last segment's end) in namespace `ns`, all owners in
  // parallel, writing block bytes into this node's arena. Returns when
  // every request has finished or failed; failures only leave
  // fetched_blocks short (a dead owner, a deadline), or set `gone` (the
  // owner does not hold the blocks past fetched_blocks, which may be 0).
  // Called without the store's lock, from any thread.
  virtual void Fetch(const NamespaceDef& ns, std::span<const uint32_t> tokens,
                     std::vector<FetchRequest>& requests) = 0;
};

}  // namespace ptstore::storage

// A tensor in the node's arena: the immutable bytes of one increment as it
// was saved (or fetched, for a replica). Radix nodes point into it; splitting
// a node splits metadata, never the tensor.
//
// A tensor lives in the DRAM arena, in the SSD tier, or both: an owned
// tensor evicted from DRAM is written to SSD (spilled) and stays in the
// index; a pin reads it back (fills it). The struct itself is freed once it
// has left the index and nothing (pin, hold, I/O) refers to it any more.
//
// Thread safety: Tensors are owned by the Store and touched only under its
// mutex.
#pragma once

#include <cstdint>
#include <vector>

#include "ptstore/types.h"
#include "storage/ssd_format/record.h"  // SsdLocation

namespace ptstore::storage {

struct Namespace;
struct RadixNode;

struct Tensor {
  TensorId id;
  CacheClass cache_class = CacheClass::kOwned;
  Namespace* ns = nullptr;
  uint64_t arena_offset = 0;   // where the bytes start in the arena (when in_dram)
  uint64_t bytes = 0;          // logical length (whole blocks)
  uint64_t allocated = 0;      // bytes reserved in the allocator (rounded up; when in_dram)
  uint64_t start_token = 0;    // position of its first token in the prefix
  uint64_t tokens = 0;

  bool in_dram = true;         // arena_offset/allocated hold its bytes
  bool on_ssd = false;         // `ssd` is a live record of it
  SsdLocation ssd;
  // I/O in flight on it, outside the store's mutex: its bytes and record
  // must stay where they are until it ends.
  enum class Io : uint8_t { kNone, kSpilling, kFilling, kCopying } io = Io::kNone;
  uint64_t spill_failed_gen = 0;  // a spill failed in this SSD generation: do not retry yet

  // A remote tensor is metadata for bytes that another node owns (`owner`):
  // a placeholder in the index until a load fetches them, then a replica in
  // DRAM (kept when hot, else transient: freed when its last pin goes, back
  // to a placeholder). Always CacheClass::kReplica; never spilled.
  bool remote = false;
  uint32_t owner = 0;          // node that owns its bytes (this node unless remote)
  bool transient = false;      // fetched for one load: DRAM freed at pins == 0
  // A remote tensor's record (kRemote: tokens and owner, no bytes) on SSD,
  // written when an owned tensor below it is spilled.
  bool stub_on_ssd = false;
  SsdLocation stub;
  // The times its record (`ssd` or `stub`) holds on SSD; the record is
  // rewritten when its nodes' times have moved on (Store::SyncTimes).
  Times record_times;

  uint32_t pins = 0;           // leases on its DRAM bytes
  uint32_t holds = 0;          // saves hanging below it: keep it in the index
  uint64_t hits = 0;           // loads that used it
  double cost = 0;             // GDSF: recompute cost of its tokens
  double priority = 0;         // GDSF: L + hits * cost / size (>= descendants)
  bool in_index = false;       // false once removed/evicted; freed at pins == 0

  // What it counts against its namespace's quotas now (Store::ChargeLocked):
  // its allocation while it is in the index and in DRAM, its record's
  // footprint while it is in the index and on SSD; 0 once out of the index.
  uint64_t charged_dram = 0;
  uint64_t charged_ssd = 0;

  std::vector<RadixNode*> nodes;  // radix nodes that point into it (a chain)
  // Children of its nodes that belong to other tensors. A tensor is a leaf
  // (evictable before its ancestors) when this is 0.
  uint32_t foreign_children = 0;
};

}  // namespace ptstore::storage

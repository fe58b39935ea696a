// The KV-event wire format: vLLM's KVEventBatch as msgspec encodes it
// (vllm/distributed/kv_events.py; docs/kv-events.md "Format").
//
//   batch       = [ts: float64, events: [event...], data_parallel_rank: int]
//   BlockStored = ["BlockStored", block_hashes, parent_block_hash|nil,
//                  token_ids, block_size, lora_id=nil, medium, lora_name,
//                  extra_keys=nil, group_idx, kv_cache_spec_kind
//                  [, kv_cache_spec_sliding_window]]
//   BlockRemoved     = ["BlockRemoved", block_hashes, medium, group_idx]
//   AllBlocksCleared = ["AllBlocksCleared"]
//
// msgspec's array_like structs with tag=True put the class name first, and
// with omit_defaults=True drop trailing fields equal to their defaults only:
// group_idx is set, so extra_keys (default None) before it is written as nil,
// and kv_cache_spec_sliding_window (None unless the layout has one window,
// storage/cache/kv_event.h KvCacheSpec) is left out when None.
// Block hashes are ints (the chain key's low 64 bits, as vLLM's
// VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES makes them from bytes) or the key's
// 16 bytes (big-endian, as ToHex prints it).
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "storage/cache/kv_event.h"

namespace ptstore::storage {

enum class KvHashFormat : uint8_t { kInt, kBytes };

struct KvCodecOptions {
  KvHashFormat hash = KvHashFormat::kInt;
  bool salted_tokens = false;  // publish token ids of salted namespaces too
  int data_parallel_rank = 0;
};

// The chain key of every block of the run.
std::vector<ChainKey> KvEventBlockKeys(const KvEvent& e);

// The int form of a block hash: int.from_bytes(key as 16 bytes, "big") & (2**64 - 1).
inline uint64_t KvBlockHashInt(const ChainKey& k) { return k.lo; }

// One msgpack-encoded batch of `events` (all of one namespace, or one
// kCleared), stamped `ts` (seconds since the Unix epoch).
std::string EncodeKvEventBatch(double ts, std::span<const KvEvent> events, const KvCodecOptions& o);
// The same into *out (its capacity kept: a publisher encodes every batch
// into one buffer).
void EncodeKvEventBatch(double ts, std::span<const KvEvent> events, const KvCodecOptions& o, std::string* out);

// ZMQ topic of a batch: "kv@<node id>@<namespace>" (llm-d's
// "kv@<pod>@<model>"); "kv@<node id>@" for AllBlocksCleared.
std::string KvEventTopic(uint32_t node_id, const std::string& ns);

// Sequence numbers: the publisher's incarnation in the high 32 bits, a
// counter from 0 in the low 32 (docs/kv-events.md "Incarnations").
inline uint64_t KvSeq(uint32_t incarnation, uint32_t counter) {
  return (static_cast<uint64_t>(incarnation) << 32) | counter;
}
inline uint32_t KvSeqIncarnation(uint64_t seq) { return static_cast<uint32_t>(seq >> 32); }

}  // namespace ptstore::storage

// One change of what a node holds, as the KV-event stream tells routers
// (docs/kv-events.md): a run of whole blocks stored or removed in one
// medium ("CPU": the DRAM arena, "STORAGE": the SSD tier), or everything
// cleared. The Store makes these under its mutex; a KvEventSink takes them
// without blocking and publishes them elsewhere (storage/events/kv_event_publisher.h).
//
// The run's block hashes are not computed here (that is hashing, done off the
// save's path by the publisher): a run is the chain key before its first
// block (`prev`: the namespace's root key for a prompt's first block), its
// token ids and block size, from which ChainKeys gives one key per block.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ptstore/keys.h"
#include "ptstore/layout.h"

namespace ptstore::storage {

enum class KvEventKind : uint8_t { kStored, kRemoved, kCleared };
enum class KvMedium : uint8_t { kCpu = 1, kStorage = 2 };  // bits of RadixNode::announced

// vLLM's medium strings: "CPU" (vllm/v1/kv_offload/cpu), "STORAGE" for SSD.
const char* KvMediumName(KvMedium m);

// BlockStored's cache-spec fields (kv_cache_spec_kind,
// kv_cache_spec_sliding_window): vLLM's KVCacheSpecKind value of the
// namespace's layout and its attention window (0: None). A block holds every
// group of a layout, so, as vLLM's get_kv_cache_spec_kind does for a group
// of several specs, one kind for all groups is that kind and mixed kinds are
// "unknown"; the window is the groups' one window, None when they differ.
struct KvCacheSpec {
  const char* kind = nullptr;  // a static string; nullptr: None
  uint32_t sliding_window = 0;
};
KvCacheSpec KvCacheSpecOf(const Layout& layout);

struct KvEvent {
  KvEventKind kind = KvEventKind::kStored;
  KvMedium medium = KvMedium::kCpu;
  std::string ns;                 // empty for kCleared (the whole node)
  uint32_t group = 0;             // group_idx: KvNamespaceGroup(ns)
  ChainKey prev;                  // key before the first block
  bool has_parent = false;        // false: the run starts at block 0 (parent_block_hash None)
  bool salted = false;            // the namespace has a salt (token ids withheld unless configured)
  uint32_t block_tokens = 0;
  KvCacheSpec spec;               // kStored only
  std::vector<uint32_t> tokens;   // whole blocks
};

// group_idx of a namespace's events: the low 31 bits of XXH3_64 of its name,
// the same on every node (docs/kv-events.md "Namespaces").
uint32_t KvNamespaceGroup(const std::string& ns);

// Where the Store puts its events. Publish must not block and must not call
// back into the Store: it runs under the Store's mutex. `force`: never drop
// (a re-announcement the sink itself asked for).
//
// Thread safety: implementations are called from any thread.
class KvEventSink {
 public:
  virtual ~KvEventSink() = default;
  virtual void Publish(KvEvent&& e, bool force) = 0;
  // Whether the changes of namespace `ns` are published at all (false: the
  // Store makes no event of it). Asked once per namespace, when the sink is
  // set or the namespace is made, under the Store's mutex.
  virtual bool Publishes(const std::string& ns) const {
    (void)ns;
    return true;
  }
  // An empty vector, perhaps with capacity, for the next event's tokens.
  virtual std::vector<uint32_t> RecycledTokens() { return {}; }
};

}  // namespace ptstore::storage

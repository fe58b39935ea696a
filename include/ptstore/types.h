// Value types shared by the client API, the server and the tools.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ptstore/keys.h"
#include "ptstore/layout.h"

namespace ptstore {

// A node of the cluster (the local node is 0 until cluster membership lands).
struct NodeId {
  uint32_t value = 0;
  bool operator==(const NodeId&) const = default;
};

// A tensor: an immutable contiguous byte range on its owner node. Globally
// unique without coordination: owner node in the top 24 bits, a local
// sequence number in the low 40.
struct TensorId {
  uint64_t value = 0;
  static TensorId Make(NodeId owner, uint64_t seq) { return TensorId{(uint64_t{owner.value} << 40) | (seq & ((uint64_t{1} << 40) - 1))}; }
  NodeId owner() const { return NodeId{static_cast<uint32_t>(value >> 40)}; }
  uint64_t seq() const { return value & ((uint64_t{1} << 40) - 1); }
  bool operator==(const TensorId&) const = default;
  auto operator<=>(const TensorId&) const = default;
};

enum class CacheClass : uint8_t { kOwned = 0, kReplica = 1 };

// Where a tensor's bytes are on its node (a bit mask): in the DRAM arena, in
// the SSD tier, or both (a DRAM copy of a record that is still on SSD).
inline constexpr uint8_t kTierDram = 1;
inline constexpr uint8_t kTierSsd = 2;
// Metadata only: another node owns the bytes (and this node holds no copy).
inline constexpr uint8_t kTierRemote = 4;
// "dram", "ssd", "dram+ssd", "remote" (or "-" for none).
const char* TierName(uint8_t tier);
const char* CacheClassName(CacheClass c);  // "owned" / "replica"

// One slice of a prefix: `length` bytes at `offset` inside `tensor`.
// `arena_offset` is where those bytes sit in the server's shared arena; it is
// only meaningful inside a pinned load (Pin), and 0 in a plain Lookup.
struct Extent {
  TensorId tensor;
  uint64_t offset = 0;
  uint64_t length = 0;
  uint64_t arena_offset = 0;
  bool operator==(const Extent&) const = default;
};

// When an increment was stored (mtime), last used by a lookup, pin, load or
// read, here or by another node's fetch (atime), and last changed in its
// metadata, such as a split (ctime): nanoseconds since the Unix epoch (0:
// not known). A namespace's are the newest of its increments', its
// creation and its removals (ptstore(7) "Times").
struct Times {
  uint64_t mtime_ns = 0;
  uint64_t atime_ns = 0;
  uint64_t ctime_ns = 0;
  // Each time the later of the two.
  void Merge(const Times& o);
  bool operator==(const Times&) const = default;
};
// The wall clock (CLOCK_REALTIME) in nanoseconds since the Unix epoch.
uint64_t WallClockNs();

struct NamespaceInfo {
  std::string name;
  Layout layout;
  bool salted = false;  // the salt itself never leaves the server
  uint32_t uid = 0;
  uint32_t gid = 0;
  uint32_t mode = 0755;  // read bit = may look up and load; write bit = may save and remove
  uint64_t bytes = 0;    // bytes stored in this namespace on this node
  uint64_t prefixes = 0; // radix nodes (increments)
  Times times;
};

// One increment of the radix tree, as listed by tools.
struct PrefixNodeInfo {
  ChainKey key;         // chain key at the node's last block: its name
  ChainKey parent;      // key of the parent node; zero for a child of the root
  uint64_t start_token = 0;  // depth of the node's first token in the prefix
  uint64_t tokens = 0;       // tokens in this increment
  uint64_t bytes = 0;
  uint64_t hits = 0;
  TensorId tensor;
  CacheClass cache_class = CacheClass::kOwned;
  uint32_t children = 0;
  uint32_t pins = 0;
  uint8_t tier = kTierDram;  // where its tensor is: kTierDram and/or kTierSsd
  Times times;
};

// One increment and its own token ids (Client::GetIncrement).
struct IncrementInfo {
  PrefixNodeInfo node;
  std::vector<uint32_t> tokens;
};

// What a save did: tokens already present, tokens it added, bytes written.
struct SaveResult {
  uint64_t matched_tokens = 0;
  uint64_t stored_tokens = 0;
  uint64_t new_bytes = 0;
};

// The longest stored prefix of a prompt: its length and where its bytes are.
struct PrefixInfo {
  uint64_t matched_tokens = 0;
  std::vector<Extent> extents;
};

// What a removal took away (increments and their bytes).
struct RemoveResult {
  uint64_t nodes = 0;
  uint64_t bytes = 0;
};

// A change to the index of a node, as Client::Changes reports it (what a
// mount needs to keep the kernel's cache of names and attributes exact;
// ptstore(7) "Caching"). Keys are chain keys as ListTree names them; a zero
// `parent` is the namespace's root.
enum class ChangeKind : uint8_t {
  kAdded = 1,      // increment `key` appeared below `parent` (a save, a split, another node's increment)
  kRemoved = 2,    // increment `key` left `parent` (removal, eviction, a split moving it below a new one)
  kTimes = 3,      // the times of `key` and of its ancestors changed (a use, SetTimes)
  kNamespace = 4,  // namespace `ns` was created or dropped (key and parent zero)
};
inline constexpr uint8_t kLastChangeKind = 4;
struct TreeChange {
  ChangeKind kind = ChangeKind::kAdded;
  std::string ns;
  ChainKey key;
  ChainKey parent;
  bool operator==(const TreeChange&) const = default;
};
// One answer of Client::Changes. `epoch` names the log (a new one each time
// ptstored starts); `next` is the position to ask from next time. `lost`:
// changes since the position asked for are no longer all known (another
// epoch, or the log wrapped): everything cached must be dropped. `more`:
// there are more changes past `next` right now.
struct TreeChanges {
  uint64_t epoch = 0;
  uint64_t next = 0;
  bool lost = false;
  bool more = false;
  std::vector<TreeChange> changes;
};

// Counters of one node (all namespaces, or one when asked).
struct StoreStats {
  uint64_t arena_bytes = 0;        // capacity of the DRAM arena
  uint64_t used_bytes = 0;         // bytes allocated to tensors
  uint64_t owned_bytes = 0;
  uint64_t replica_bytes = 0;
  uint64_t pinned_bytes = 0;
  uint64_t tensors = 0;
  uint64_t prefix_nodes = 0;
  uint64_t namespaces = 0;
  uint64_t lookups = 0;
  uint64_t hits = 0;               // lookups/loads that matched at least one block
  uint64_t misses = 0;
  uint64_t hit_tokens = 0;         // tokens served from the store
  uint64_t requested_tokens = 0;   // whole-block tokens asked for by lookups/loads
  uint64_t saves = 0;
  uint64_t saved_bytes = 0;        // bytes actually written into the arena
  uint64_t dedup_bytes = 0;        // bytes of saved prompts' whole blocks that were already stored
  uint64_t evictions = 0;
  uint64_t evicted_bytes = 0;
  uint64_t active_leases = 0;
  uint64_t expired_leases = 0;

  // SSD tier (all 0 on a node without one).
  uint64_t ssd_capacity = 0;       // bytes its segment files may take
  uint64_t ssd_file_bytes = 0;     // bytes they take
  uint64_t ssd_live_bytes = 0;     // of which live records
  uint64_t ssd_segments = 0;
  uint64_t ssd_tensors = 0;        // tensors with a copy on SSD
  uint64_t ssd_hits = 0;           // pins/loads that read something back from SSD
  uint64_t ssd_fills = 0;          // tensors read back into DRAM
  uint64_t ssd_fill_bytes = 0;
  uint64_t ssd_spills = 0;         // owned tensors written to SSD on eviction
  uint64_t ssd_spill_bytes = 0;    // their bytes (before compression)
  uint64_t ssd_stored_bytes = 0;   // bytes the spills took on SSD (after compression)
  uint64_t ssd_spill_failures = 0; // spills that failed (full, I/O error): dropped instead
  uint64_t ssd_evictions = 0;      // SSD copies dropped to stay under capacity
  uint64_t ssd_read_errors = 0;    // reads that failed or did not match their checksum
  uint64_t ssd_compactions = 0;    // sparse segments rewritten
  uint64_t recovered_tensors = 0;  // indexed again from SSD at start
  uint64_t recovered_bytes = 0;
  uint64_t recovery_corrupt = 0;   // records skipped at start: bad checksums, torn
  uint64_t recovery_dropped = 0;   // valid records not indexed: orphans, duplicates

  // Cluster (all 0 on a node without peers).
  uint64_t remote_tensors = 0;       // increments other nodes own that this node's index knows
  uint64_t remote_hits = 0;          // pins/loads that fetched something from other nodes
  uint64_t remote_fetches = 0;       // increments fetched from their owners
  uint64_t remote_fetch_bytes = 0;
  uint64_t remote_fetch_failures = 0;  // fetches that failed (owner dead, gone, deadline): misses
  uint64_t replicas_kept = 0;        // fetched increments kept as replicas (hot)
  uint64_t peer_served_bytes = 0;    // bytes this node's owned data served to other nodes' loads
  // Pins/loads that matched and were served from DRAM alone (no SSD read,
  // no fetch): with ssd_hits and remote_hits, the hits by tier.
  uint64_t dram_hits = 0;
};

// Where one increment is in the cluster (Client::Locate, ptstore-ls -w):
// its owner and every node that holds its bytes (in DRAM or on SSD; the
// owner first when it does), as the asking node's index names it.
struct IncrementLocation {
  ChainKey key;
  uint32_t owner = 0;
  std::vector<uint32_t> nodes;
};

// A prompt's longest match in the cluster, run by run (Client::LocatePrefix,
// the scheduler's locality probe). Spans cover [0, matched_tokens) in
// order; each names the owner of its tokens and every node that holds all
// of their bytes (in DRAM or on SSD, owned or replica; the owner first when
// it does). Adjacent runs with the same owner and holders are one span.
struct PrefixSpan {
  uint64_t end_token = 0;  // the span covers [previous end_token, end_token)
  uint32_t owner = 0;
  std::vector<uint32_t> nodes;
  bool operator==(const PrefixSpan&) const = default;
};
struct PrefixLocation {
  uint64_t matched_tokens = 0;
  std::vector<PrefixSpan> spans;
  // Tokens from the start of the prompt whose bytes `node` holds: what an
  // instance beside that node loads without asking another node.
  uint64_t HeldBy(uint32_t node) const;
  // Tokens of the match whose bytes `node` holds, in any span (not only
  // from the start): what it loads without the network.
  uint64_t TokensHeldBy(uint32_t node) const;
  // Whether `node` holds span `i`.
  bool Holds(size_t i, uint32_t node) const;
};

// A member of the cluster as one node sees it (ptstore-stat --cluster).
enum class MemberState : uint8_t { kSelf = 0, kAlive = 1, kSuspect = 2, kDead = 3 };
struct ClusterMember {
  uint32_t id = 0;
  std::string address;
  MemberState state = MemberState::kDead;
  uint64_t incarnation = 0;     // changes when the node restarts
  uint64_t arena_bytes = 0;
  uint64_t used_bytes = 0;
  uint64_t owned_bytes = 0;
  uint64_t replica_bytes = 0;
  uint64_t rtt_us = 0;          // last ping's round trip
  uint64_t last_seen_ms = 0;    // since its last answer (0 for self)
};
struct ClusterStatus {
  uint32_t self_id = 0;
  bool enabled = false;         // false: a single node without a cluster file
  std::string data_path;        // "tcp" or "rma"
  std::string fabric_provider;  // with rma
  std::vector<ClusterMember> members;
};

}  // namespace ptstore

// The node store: a DRAM arena of tensors indexed by one radix tree per
// namespace, with GDSF eviction, pins and leases.
//
// save:   stores only the blocks past the longest common prefix, as one
//         contiguous tensor; concurrent saves of the same prefix store it
//         once (the second waits for the first, then finds it present).
// lookup: matched tokens and the flat extent list, without pinning.
// pin:    like lookup, but pins the extents under a lease (released by
//         Release, by the session ending, or by the lease expiring) and
//         counts a hit on every tensor of the prefix.
//
// With an SSD tier (options.ssd.dir), owned tensors that GDSF evicts from
// DRAM are written to segment files and stay in the index; a pin reads them
// back first (an SSD hit). Namespaces are recorded there too, and Open
// rebuilds the index from the segments after a restart (store_recovery.cc).
//
// Quotas (store_quota.cc, ptstore/quota.h): each namespace's DRAM and SSD
// use is counted exactly; over its quota a namespace makes room among its
// own tensors only, and a save stores the prefix that fits.
//
// A cache miss is never an error: lookups and pins of unknown prefixes
// return 0 matched tokens, and a record that fails its checksum is a miss
// (it is dropped, never served). Errors are for unknown namespaces, bad
// input and a full arena whose data is all pinned.
//
// Thread safety: all methods are safe to call from many threads. One mutex
// (mu_) guards the index, the tensors, the allocator and the leases; byte
// copies into and out of the arena and all file I/O run outside it,
// protected by pins, holds and the tensors' io state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <future>
#include <optional>
#include <set>
#include <span>
#include <thread>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/shm.h"
#include "ptstore/quota.h"
#include "ptstore/status.h"
#include "ptstore/types.h"
#include "storage/cache/allocator.h"
#include "storage/cache/change_log.h"
#include "storage/ssd/env.h"
#include "storage/cache/gdsf.h"
#include "storage/ssd/io_pool.h"
#include "storage/cache/kv_event.h"
#include "storage/index/radix_tree.h"
#include "storage/cache/remote.h"
#include "storage/ssd/ssd_tier.h"
#include "storage/index/tensor.h"

namespace ptstore::storage {

struct StoreOptions {
  uint64_t arena_bytes = 1ull << 30;
  double replica_share = 0.25;        // replicas may hold at most this share of the arena
  uint32_t node_id = 0;
  bool prefault = true;               // touch every arena page once at start
  bool try_huge_pages = true;
  uint64_t alignment = 4096;          // every tensor starts on this boundary
  uint64_t default_lease_ms = 30000;  // a pin not released by then is dropped
  uint64_t max_leases = 1u << 20;
  SsdOptions ssd;                     // ssd.dir empty: DRAM only
  // Cluster: a fetched remote increment is kept as a replica once it has
  // been loaded this many times (counting this load); before that it is
  // transient (freed when the load's pin goes). 0 never keeps replicas.
  uint32_t replicate_after = 2;
  // How often the times of increments on SSD are written to their records
  // (SyncTimes, by the cleaner thread): a crash loses at most this much of
  // them. 0: only when SyncTimes or PersistAll is called.
  uint64_t times_sync_ms = 60000;
  // Record evictions of owned increments that leave no copy on this node
  // (TakeLostIncrements), for the cluster to propagate.
  bool track_lost = false;
  Env* env = nullptr;                 // nullptr: Env::Default()
};

struct Namespace {
  uint64_t id = 0;                    // unique, never reused (the seq of its SSD record)
  NamespaceInfo info;                 // bytes/prefixes kept current
  std::string salt;
  ChainKey root_key;
  std::unique_ptr<RadixTree> tree;
  std::optional<SsdLocation> record;  // its namespace record on SSD
  // Quotas (ptstore/quota.h; 0: no limit) and what counts against them:
  // Tensor::charged_dram / charged_ssd of its tensors in the index, and the
  // arena bytes of saves copying into it now (not in the index yet).
  uint64_t dram_quota = 0;
  uint64_t ssd_quota = 0;
  uint64_t dram_bytes = 0;
  uint64_t ssd_bytes = 0;
  uint64_t dram_pending = 0;
  uint64_t dram_evictions = 0;
  uint64_t ssd_evictions = 0;
  uint64_t cut_saves = 0;
};

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

class Store {
 public:
  using Clock = std::chrono::steady_clock;

  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);
  ~Store();

  // Namespaces. Create with exist_ok accepts an existing namespace whose
  // layout and salt are the same; otherwise AlreadyExists.
  Result<NamespaceInfo> CreateNamespace(const std::string& name, const Layout& layout, const std::string& salt,
                                        uint32_t uid, uint32_t gid, uint32_t mode, bool exist_ok);
  Result<NamespaceInfo> GetNamespace(const std::string& name) const;
  std::vector<NamespaceInfo> ListNamespaces() const;
  // Quotas (ptstore/quota.h, store_quota.cc). SetQuota sets the tiers
  // `change` names (0: no limit) and returns the quotas and use afterwards;
  // a quota below the namespace's use makes it evict its own increments at
  // once (what is pinned stays until unpinned and the next save). With an
  // SSD tier the quotas are written to the namespace's record first (a new
  // record replacing the old, so they survive a restart); if that write
  // fails nothing changes. InvalidArgument for more than kMaxQuotaBytes or
  // an SSD quota without an SSD tier; NotFound for an unknown namespace.
  // Who may set them is the caller's business (the session: owner or root).
  Result<NamespaceQuota> SetQuota(const std::string& ns, const QuotaChange& change);
  Result<NamespaceQuota> GetQuota(const std::string& ns) const;
  std::vector<NamespaceQuota> ListQuotas() const;

  // Removes a namespace and everything in it (pinned bytes are freed when
  // their pins go).
  Result<RemoveResult> DropNamespace(const std::string& name);

  // Saves the KV of `tokens` (whole blocks; a partial last block is
  // ignored). Within the namespace's DRAM quota: the namespace's own
  // increments make room first (by GDSF); blocks that do not fit even then
  // are not stored (stored_tokens says how many were), never an error
  // beyond what a full arena gives. `data` holds the bytes of blocks [first_block, n) back to back
  // and must be exactly (n - first_block) * bytes_per_block long.
  // InvalidArgument if the size is wrong; Aborted if first_block > 0 and
  // the blocks before it are no longer stored (retry with first_block = 0).
  Result<SaveResult> Save(const std::string& ns, std::span<const uint32_t> tokens, const uint8_t* data,
                          uint64_t length, uint64_t first_block, CacheClass cache_class = CacheClass::kOwned);

  Result<PrefixResult> Lookup(const std::string& ns, std::span<const uint32_t> tokens);
  // Pins the longest stored prefix of `tokens` for `session` until Release,
  // ReleaseSession or lease_ms (0: the default lease) passes.
  Result<PrefixResult> Pin(const std::string& ns, std::span<const uint32_t> tokens, uint64_t session,
                           uint64_t lease_ms = 0);
  // NotFound if the lease is unknown (expired or released) or not the session's.
  Status Release(uint64_t lease_id, uint64_t session);
  // Drops every lease of a session (its client went away).
  void ReleaseSession(uint64_t session);
  // Drops leases whose time has passed; returns how many.
  size_t ExpireLeases(Clock::time_point now);

  // Pins, copies the longest stored prefix that fits in `capacity` bytes
  // into `dst`, unpins. Returns the tokens copied.
  Result<uint64_t> LoadCopy(const std::string& ns, std::span<const uint32_t> tokens, uint8_t* dst,
                            uint64_t capacity);

  // Removes the increment (radix node) that holds the last whole block of
  // `tokens`, with everything below it: the prefix and every longer prompt
  // stored through it. Ancestors shared with other prompts stay. NotFound if
  // the prefix is not fully stored.
  // With `point`, also says where the removal started (to propagate it).
  Result<RemoveResult> Remove(const std::string& ns, std::span<const uint32_t> tokens, RemovalPoint* point = nullptr);
  Result<RemoveResult> RemoveByKey(const std::string& ns, const ChainKey& key, RemovalPoint* point = nullptr);

  // One increment by its chain key (NotFound if there is none): its listing
  // entry and its own token ids. With `pin`, also pins the prefix that ends
  // with it for `session` (SSD-only parts are read back first) and returns
  // the extents of the increment's bytes, or with `whole_prefix` of the
  // whole prefix. ResourceExhausted if the prefix cannot be in DRAM at once.
  Result<IncrementResult> Increment(const std::string& ns, const ChainKey& key, bool pin, bool whole_prefix,
                                    uint64_t session, uint64_t lease_ms = 0);

  // Sets the times of the increment named `key` (touch(1) on the mount): a
  // non-zero atime_ns becomes its atime, and its ancestors' where theirs is
  // older (a use of it is a use of its prefix); a non-zero mtime_ns its
  // mtime. Its ctime becomes now. Returns its listing entry afterwards;
  // NotFound if there is no such increment.
  Result<PrefixNodeInfo> SetTimes(const std::string& ns, const ChainKey& key, uint64_t atime_ns, uint64_t mtime_ns);

  // Children of `parent` (zero key: the root), or the whole subtree.
  Result<std::vector<PrefixNodeInfo>> ListTree(const std::string& ns, const ChainKey& parent,
                                               bool recursive) const;

  StoreStats Stats() const;

  // The changes of the index from position `since` of log `epoch` on, at
  // most `max` (ChangeLog::Since; Client::Changes). Who may see which
  // namespace's changes is the session's business.
  TreeChanges Changes(uint64_t epoch, uint64_t since, size_t max) const { return changes_.Since(epoch, since, max); }

  // ------------------------------------------------------------- KV events
  // (store_events.cc, docs/kv-events.md). Sets where this node's events go
  // (nullptr: nowhere) and announces, into the new sink, AllBlocksCleared
  // and then every block this node holds, medium by medium. The sink must
  // outlive its use: set nullptr before destroying it.
  void SetEventSink(KvEventSink* sink);
  // AllBlocksCleared and everything held again, into the current sink
  // (after the sink dropped events).
  void AnnounceEvents();
  // A prompt's longest match on this node by tier, in tokens from its start
  // (the KV query API, storage/server/kv_query.h): what the index matches, what
  // this node holds (DRAM or SSD, own data or kept replicas), what of that
  // is in DRAM, what is on SSD. No hit, no use, no times changed.
  struct TierMatch {
    uint64_t matched_tokens = 0;
    uint64_t held_tokens = 0;
    uint64_t dram_tokens = 0;
    uint64_t ssd_tokens = 0;
    uint32_t block_tokens = 0;
  };
  Result<TierMatch> MatchTiers(const std::string& ns, std::span<const uint32_t> tokens);
  // The media (KvMedium bits) in which this node holds every block of
  // `tokens` from block `from_block` on: 0 when it does not hold them all
  // (the KV query's PeerTiers; as Holds, per medium).
  Result<uint8_t> HeldMedia(const std::string& ns, std::span<const uint32_t> tokens, uint64_t from_block);
  // The tokens that the block hashes `hashes` (chain keys of blocks 0, 1,
  // ... as the KV-event stream publishes them; `low64`: only their low 64
  // bits count, the int form) name in this node's index: the longest run
  // of them from the namespace's root that it knows, held here or not.
  // Empty when the first is unknown. NotFound for an unknown namespace.
  Result<std::vector<uint32_t>> TokensOfHashes(const std::string& ns, std::span<const ChainKey> hashes,
                                               bool low64) const;

  // ---------------------------------------------------------------- cluster
  // (store_remote.cc, docs/architecture.md "Cluster"). Another node's
  // increments enter the index as remote tensors: metadata (tokens, owner)
  // without bytes. A pin whose prefix runs through them asks the fetcher
  // (SetFetcher) for their bytes, one request per owner; a fetch that fails
  // cuts the pin short there (a miss, never an error).

  // Who owns each block of the longest match of `tokens` (this node's id
  // for its own data): what an index shard answers. With `per_increment`,
  // one range per increment of the match (not merged by owner). Also says
  // which ranges this node holds (Ownership::held, as Holds would).
  Result<Ownership> Resolve(const std::string& ns, std::span<const uint32_t> tokens, bool per_increment = false);
  // Files blocks of `tokens` past the local match as remote increments,
  // owned as `ranges` say (ranges cover blocks [0, ranges.back().end_block)
  // in order). Ranges naming this node are skipped (stale). Returns the
  // local match, in blocks, afterwards.
  Result<uint64_t> InsertRemote(const std::string& ns, std::span<const uint32_t> tokens,
                                std::span<const OwnedRange> ranges);
  // Pins blocks [from_block, ...) of the longest match of `tokens` that this
  // node holds (its own data or replicas; SSD-only parts are read back;
  // nothing is fetched from other nodes): what an owner does to serve a
  // peer's fetch. The extents cover only those blocks; matched_tokens is
  // the end of the pinned range. Not counted as a client request, but as a
  // hit for eviction (GDSF): what peers load stays.
  Result<PrefixResult> PinHeld(const std::string& ns, std::span<const uint32_t> tokens, uint64_t from_block,
                               uint64_t session, uint64_t lease_ms = 0);
  // Removes blocks [from_block, ...) of the prefix `tokens` (its first
  // from_block + 1 whole blocks at least) and everything below them,
  // splitting an increment that starts before from_block. A no-op when the
  // prefix is not stored that far: removals that arrive from other nodes
  // are idempotent.
  Result<RemoveResult> RemoveFrom(const std::string& ns, std::span<const uint32_t> tokens, uint64_t from_block);
  // Owned increments that left this node without a copy (evicted with no
  // SSD tier, or dropped from SSD) since the last call (with track_lost).
  std::vector<RemovalPoint> TakeLostIncrements();
  // Every owned increment in the index: its namespace, whole prefix tokens
  // and first block (to announce to the index shards).
  std::vector<HeldIncrement> ListOwned() const;
  // Node `node` restarted: what it owned in DRAM is gone, and the replicas
  // this node keeps of its increments may be their only copies. They become
  // this node's own (owned, announced with the rest; a copy the restarted
  // node recovered from its SSD tier holds the same bytes). Returns how many.
  uint64_t AdoptReplicasOf(uint32_t node);
  // Whether this node holds (in DRAM or on SSD, its own data or a replica)
  // every block of the longest match of `tokens` from from_block on, and
  // that match covers all of its whole blocks. No pin, no hit.
  Result<bool> Holds(const std::string& ns, std::span<const uint32_t> tokens, uint64_t from_block);
  // The increment named `key`: its whole prefix's tokens and first block.
  Result<HeldIncrement> PrefixOf(const std::string& ns, const ChainKey& key) const;
  // The namespace as other nodes must create it (with its salt).
  Result<NamespaceDef> GetNamespaceDef(const std::string& ns) const;
  // The fetcher of remote bytes (nullptr: none; remote tensors stay misses).
  // Set before serving; it must outlive the store's use of it.
  void SetFetcher(RemoteFetcher* fetcher);

  // Writes every owned tensor that only DRAM holds to the SSD tier (most
  // valuable first, as far as the capacity goes), keeping the DRAM copies:
  // after a planned restart the cache is as warm as it was. Returns the
  // tensors written. A no-op without an SSD tier.
  Result<uint64_t> PersistAll();
  // Rewrites one sparse SSD segment now if there is one (the background
  // cleaner does this on its own); returns whether it did.
  Result<bool> CompactOnce();
  // Waits until queued SSD header rewrites are on disk (tests).
  void FlushSsd();
  // Writes the times of increments whose SSD records hold older ones into
  // those records (in place) and waits for the writes. Returns how many
  // records it rewrote. A no-op without an SSD tier.
  uint64_t SyncTimes();

  const uint8_t* arena_base() const { return arena_->data(); }
  int arena_fd() const { return arena_->fd(); }
  uint64_t arena_bytes() const { return arena_->size(); }
  bool huge_pages() const { return arena_->huge_pages(); }
  const StoreOptions& options() const { return options_; }

 private:
  struct Lease {
    uint64_t session;
    Clock::time_point expiry;
    std::vector<Tensor*> tensors;
  };

  Store(const StoreOptions& options, std::unique_ptr<core::SharedMemory> arena);
  Status OpenSsd();

  Result<Namespace*> FindLocked(const std::string& name) const;
  // The chain keys of a prompt's whole blocks (for saves and requests that
  // need keys past the match; WalkLocked needs none), hashed without holding mu_
  // (hashing an 8k-token prompt takes ~11 us, which would serialise every
  // other request of the node), and the namespace they were hashed for.
  struct PromptKeys {
    uint64_t ns_id = 0;
    std::vector<ChainKey> keys;
  };
  Result<PromptKeys> HashPrompt(const std::string& ns_name, std::span<const uint32_t> tokens) const;
  // Hashes again, under mu_, if `ns` is not the namespace `k` was made for.
  void RekeyLocked(const Namespace& ns, std::span<const uint32_t> tokens, PromptKeys* k) const;
  // Longest stored match of the whole blocks of `tokens` (keys in `k`).
  Match MatchLocked(const Namespace& ns, std::span<const uint32_t> tokens, PromptKeys* k) const;
  // The same match, hashing only the blocks where the walk steps
  // (RadixTree::Walk): for requests that need no key beyond the match.
  Match WalkLocked(const Namespace& ns, std::span<const uint32_t> tokens) const;
  // Counts a lookup or load of `requested_tokens` whole-block tokens that
  // matched `matched_tokens`: a hit when it matched anything, else a miss.
  void CountRequestLocked(uint64_t requested_tokens, uint64_t matched_tokens);
  // Allocates `bytes` for a tensor of `cls`, evicting by GDSF as needed.
  // May release `lk` while it waits for a spill to SSD: callers must hold
  // (pin, hold or mark busy) whatever they need to stay.
  // A `transient` replica (fetched for one load) may exceed the replica
  // share and push owned data out.
  // With `ns`, the allocation counts against ns's DRAM quota: its own
  // tensors make room first (NamespaceRoomLocked); ResourceExhausted naming
  // the namespace when they cannot. ns must stay in namespaces_ (callers
  // check that it is still there after the lock was released).
  Result<uint64_t> AllocateLocked(uint64_t bytes, CacheClass cls, std::unique_lock<std::mutex>& lk,
                                  bool transient = false, Namespace* ns = nullptr);
  // The arena's part of AllocateLocked (no quota).
  Result<uint64_t> ArenaAllocateLocked(uint64_t bytes, CacheClass cls, std::unique_lock<std::mutex>& lk,
                                       bool transient);
  // Adds `delta` to the dram_pending of namespace `name` if it is still the
  // one whose id is `ns_id`.
  void AddPendingLocked(const std::string& name, uint64_t ns_id, int64_t delta);
  // Quotas (store_quota.cc). Brings t's charges against its namespace up to
  // date with where t is (Tensor::charged_*); call after every change of
  // in_index, in_dram, allocated, on_ssd or ssd.
  void ChargeLocked(Tensor* t);
  // Frees DRAM of `ns` (namespace `name`, id `id`) by GDSF among its own
  // tensors until `bytes` more fit under its DRAM quota. May release `lk`
  // (spills): false if the namespace went meanwhile or nothing more can go.
  bool NamespaceRoomLocked(Namespace* ns, uint64_t bytes, std::unique_lock<std::mutex>& lk);
  // Drops SSD records of `ns` by GDSF until `need` more bytes fit under its
  // SSD quota; false if they cannot.
  bool NamespaceSsdRoomLocked(Namespace* ns, uint64_t need);
  // Blocks of `bb` bytes that fit in `room` bytes of the arena.
  uint64_t BlocksThatFit(uint64_t room, uint64_t bb) const;
  NamespaceQuota QuotaOfLocked(const Namespace& ns) const;
  // Whether any of ns's tensors in DRAM is pinned.
  bool NamespaceHasPinnedLocked(const Namespace& ns) const;
  // The record of namespace `ns` (its quotas included), not yet sequenced.
  RecordHeader NamespaceRecordLocked(const Namespace& ns) const;
  // Frees DRAM by one GDSF step among owned tensors: drops one (no SSD
  // tier), frees the DRAM copy of one that SSD holds, or spills one
  // (releasing `lk` while writing). False if nothing can go.
  // With `ns`, among ns's tensors only.
  bool MakeOwnedRoomLocked(std::unique_lock<std::mutex>& lk, Namespace* ns = nullptr);
  bool DropOneLocked(CacheClass from, Namespace* ns = nullptr);
  // Removes `t`'s nodes from its tree (t must be a leaf tensor) and frees it
  // unless pinned.
  void EvictLocked(Tensor* t);
  // A node left the index: unlink it from its tensor; a tensor left with no
  // node leaves the index and is freed once nothing refers to it.
  void OnNodeRemovedLocked(RadixNode* n, RemoveResult* result);
  // Frees `t` if it is out of the index and unreferenced (no pin, hold, I/O).
  void MaybeDestroyLocked(Tensor* t);
  void FreeDramLocked(Tensor* t);
  void UnpinLocked(Tensor* t);
  void SetPriorityLocked(Tensor* t, double priority);

  // SSD tier (store_ssd.cc).
  bool SsdEnabled() const { return ssd_ != nullptr; }
  // Writes `t` to SSD with the lock released; afterwards frees its DRAM
  // copy if `free_dram` and nothing pins it. False if the spill failed.
  bool SpillLocked(Tensor* t, std::unique_lock<std::mutex>& lk, bool free_dram = true);
  // Appends a record without payload (a namespace's, a remote tensor's)
  // with the lock released.
  Result<SsdLocation> AppendHeaderLocked(RecordHeader h, std::unique_lock<std::mutex>& lk);
  // Writes the record of remote tensor `a` (tokens and owner, no payload).
  void WriteStubLocked(Tensor* a, std::unique_lock<std::mutex>& lk);
  // Its record goes (in the background).
  void DropStubLocked(Tensor* t);
  // The spill of `t` alone (SpillLocked writes its ancestors first).
  bool SpillOneLocked(Tensor* t, std::unique_lock<std::mutex>& lk, bool free_dram);
  // Reads the SSD-only tensors `missing` back into DRAM (lock released for
  // the reads). Tensors whose record is bad leave the index.
  void FillLocked(const std::vector<Tensor*>& missing, std::unique_lock<std::mutex>& lk);
  // Keeps the SSD tier's live bytes under its eviction mark with room for
  // `need` more bytes, dropping SSD copies by GDSF. False if it cannot.
  bool MakeSsdRoomLocked(uint64_t need);
  // What MakeSsdRoomLocked (and a namespace's SSD quota) may take: the SSD
  // copy of a tensor DRAM holds, or an SSD-only leaf nothing holds.
  static bool SsdEvictable(const Tensor* t);
  // Takes `v` off SSD: its SSD copy when DRAM holds it, else the tensor
  // itself, out of the index (counted as an SSD eviction).
  void EvictFromSsdLocked(Tensor* v);
  // The tensor's SSD copy goes (its record is killed on disk in the
  // background); the tensor itself stays if it is in DRAM.
  void DropSsdCopyLocked(Tensor* t);
  // Queues a header rewrite; its future lands in pending_rewrites_.
  void RewriteRecordLocked(const SsdLocation& loc, uint64_t live_tokens);
  // Takes the rewrites queued so far (to wait for them without the lock).
  std::vector<std::future<Status>> TakeRewritesLocked();
  // The record of `t`'s indexed part (seq not set) and its payload length.
  RecordHeader TensorRecordLocked(const Tensor& t, uint64_t* live_bytes) const;
  uint64_t LiveTokens(const Tensor& t) const;
  void CleanerLoop();
  // Takes `t` (and what hangs below it) out of the index; `t` itself stays
  // allocated for the caller, who frees it with MaybeDestroyLocked.
  void DropFromIndexLocked(Tensor* t);
  // Keeps the first `blocks` blocks of `t`'s nodes in the index and takes
  // the rest (and what hangs below it) out; `keys` are the chain keys of
  // `t`'s prefix up to its last block.
  void KeepHeadLocked(Tensor* t, uint64_t blocks, std::span<const ChainKey> keys);
  // KV events (store_events.cc): the media `t`'s blocks are held in (KvMedium
  // bits); publishes what changed for each of its nodes / for one node, or
  // for a node leaving the index; announces everything (AnnounceLocked).
  uint8_t HeldMediaLocked(const Tensor& t) const;
  void SyncTensorEventsLocked(Tensor* t);
  void SyncNodeEventsLocked(RadixNode* n, uint8_t held, bool force);
  void NodeLeavesEventsLocked(RadixNode* n);
  void EmitNodeEventLocked(const RadixNode* n, KvEventKind kind, KvMedium medium, bool force);
  void AnnounceLocked(bool force);
  // Rebuilds namespaces and the index from the segments (store_recovery.cc).
  Status RecoverLocked();
  void RemoveSubtreeLocked(Namespace* ns, RadixNode* node, RemoveResult* result);
  // Waits (lock released) for the record rewrites of a removal.
  Result<RemoveResult> FinishRemovalLocked(const RemoveResult& r, std::unique_lock<std::mutex>& lk);
  // Extents of a match; arena offsets when `with_arena`.
  std::vector<Extent> ExtentsLocked(const Match& m, uint64_t block_bytes, bool with_arena) const;
  // Counts a hit on every tensor of the match and restores the rule that an
  // ancestor's priority is at least each descendant's.
  void HitLocked(const Match& m);
  // A use of the match: every node of it gets atime `now` (ptstore(7) "Times").
  void TouchLocked(Namespace* ns, const Match& m, uint64_t now);
  // Every ancestor of `n` gets atime at least `atime_ns`; true if one moved.
  bool RaiseAncestorsAtimeLocked(RadixNode* n, uint64_t atime_ns);
  // Logs the changes of `ns`'s tree (changes_).
  void WatchTreeLocked(Namespace* ns);
  // `t`'s nodes' times changed: its record on SSD, if any, needs them.
  void NoteTimesChangedLocked(Tensor* t);
  // The newest of each time of `t`'s nodes (what its record holds).
  Times TensorTimesLocked(const Tensor& t) const;
  // Raises the priority of every ancestor tensor of `node` to at least `p`.
  void PropagateLocked(RadixNode* node, double p);
  void PinLocked(Tensor* t);
  // Pins each tensor of `m`'s path that is in DRAM (once; not transient
  // ones, which no eviction takes) and returns them, for the caller to
  // unpin: they stay in DRAM while the lock is released (a fill, a fetch,
  // a wait for another's I/O).
  std::vector<Tensor*> PinDramPathLocked(const Match& m);
  PrefixNodeInfo NodeInfoLocked(const RadixNode* n, uint32_t block_tokens) const;
  // Pin with its cluster options: only blocks from `from_block` must be in
  // DRAM and are pinned; remote tensors are fetched when `fetch_remote`;
  // `count` counts the request as a client lookup/load.
  Result<PrefixResult> PinImpl(const std::string& ns, std::span<const uint32_t> tokens, uint64_t session,
                               uint64_t lease_ms, uint64_t from_block, bool fetch_remote, bool count);
  // Fetches the remote tensors `missing` (lock released for the fetch).
  // Tensors it fetched for this pin alone go in `transient`, each with a
  // hold the caller releases (ReleaseTransientsLocked).
  void FetchLocked(const Namespace& ns, const std::vector<Tensor*>& missing, std::unique_lock<std::mutex>& lk,
                   std::vector<Tensor*>* transient);
  // Drops the holds of a pin's transient fetches, and the bytes of those
  // the pin did not keep pinned.
  void ReleaseTransientsLocked(std::vector<Tensor*>& tensors);
  // An owned increment leaves the node with no copy: remember it for the
  // cluster (track_lost).
  void NoteLostLocked(Tensor* t);
  // Tokens of the prefix from the root to the end of node `n`.
  std::vector<uint32_t> PrefixTokensLocked(const RadixNode* n) const;
  // Where a removal of node `n` (and all below) starts.
  RemovalPoint RemovalPointLocked(const Namespace& ns, const RadixNode* n) const;

  const StoreOptions options_;
  std::unique_ptr<core::SharedMemory> arena_;
  std::unique_ptr<SsdTier> ssd_;        // null without an SSD tier
  std::unique_ptr<IoPool> io_;          // SSD reads and writes

  // Lock order: compact_mu_ before mu_; never call out while holding mu_.
  std::mutex compact_mu_;  // one compaction at a time
  mutable std::mutex mu_;
  ChangeLog changes_;  // its own mutex; appended to under mu_
  std::condition_variable inflight_done_;  // signalled when a save finishes
  std::condition_variable io_done_;        // signalled when a tensor's I/O ends
  std::condition_variable cleaner_wake_;
  Allocator alloc_;                                                      // GUARDED_BY(mu_)
  Gdsf gdsf_;                                                            // GUARDED_BY(mu_)
  EvictionQueue queue_[2];                                               // GUARDED_BY(mu_), DRAM copies by class
  EvictionQueue ssd_queue_;                                              // GUARDED_BY(mu_), SSD copies
  std::map<std::string, std::unique_ptr<Namespace>, std::less<>> namespaces_;  // GUARDED_BY(mu_)
  std::unordered_map<uint64_t, std::unique_ptr<Tensor>> tensors_;        // GUARDED_BY(mu_)
  std::set<std::pair<Namespace*, ChainKey>> inflight_;                   // GUARDED_BY(mu_)
  std::unordered_map<uint64_t, Lease> leases_;                           // GUARDED_BY(mu_)
  uint64_t next_tensor_seq_ = 1;                                         // GUARDED_BY(mu_)
  uint64_t next_lease_ = 1;                                              // GUARDED_BY(mu_)
  uint64_t next_seq_ = 1;                                                // GUARDED_BY(mu_), records and namespaces
  uint64_t appends_in_flight_ = 0;                                       // GUARDED_BY(mu_), SSD appends outside mu_
  uint64_t ssd_gen_ = 1;                                                 // GUARDED_BY(mu_), bumped when SSD space frees
  std::vector<std::future<Status>> pending_rewrites_;                    // GUARDED_BY(mu_)
  std::set<uint64_t> times_dirty_;                                       // GUARDED_BY(mu_), tensor ids: SyncTimes
  Clock::time_point times_synced_ = Clock::now();                        // GUARDED_BY(mu_)
  bool stopping_ = false;                                                // GUARDED_BY(mu_)
  std::thread cleaner_;
  RemoteFetcher* fetcher_ = nullptr;                                     // GUARDED_BY(mu_)
  std::vector<RemovalPoint> lost_;                                       // GUARDED_BY(mu_)
  KvEventSink* events_ = nullptr;                                        // GUARDED_BY(mu_)
  mutable StoreStats stats_;                                             // GUARDED_BY(mu_)
};

}  // namespace ptstore::storage

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
// (mu_) guards the index, the tensors, the allocator and the leases (the
// members marked GUARDED_BY(mu_), checked by clang: docs/architecture.md
// "Locks"); byte copies into and out of the arena and all file I/O run
// outside it, protected by pins, holds and the tensors' io state. Lock
// order: compact_mu_ (one compaction at a time), then mu_.
//
// Where mu_ is dropped, and what stays valid across the drop: the holds and
// pins (TensorHold, TensorPin: storage/cache/tensor_refs.h) and Tensor::Io
// marks that live across it, and claims. Anything else may change:
// namespaces are looked up again by their NamespaceKey (FindAgainLocked),
// tensors' state checked again (Tensor: in_index(), in_dram(), on_ssd()...).
// - AllocateLocked, ArenaAllocateLocked, NamespaceRoomLocked and
//   MakeOwnedRoomLocked, to spill a victim (SpillLocked, the victim held)
//   or to wait on io_done_ for other threads' appends: only what the caller
//   pinned, held or marked busy, and its inflight_ claim.
// - SpillLocked: the tensor is kSpilling and its ancestors held while their
//   records are written; SpillOneLocked: the tensor is kSpilling (its DRAM
//   bytes stay where they are) during the append.
// - AppendHeaderLocked (from WriteStubLocked, whose tensor SpillLocked
//   holds, CreateNamespace and SetQuota): nothing but the count in
//   appends_in_flight_ (no compaction starts while one is).
// - FillLocked: each job holds its tensor, kFilling (its record stays), its
//   new arena allocation charged to its namespace as dram_pending.
// - FetchLocked: each job (PlanFetchesLocked, which may drop mu_ in
//   AllocateLocked) holds its remote tensor, kFilling, its allocation
//   charged as dram_pending; PinImpl holds them too.
// - Save, for the copy into the arena: its inflight_ claim, holds on the
//   matched path (SaveJob), and the new tensor (kNew, charged as
//   dram_pending). ClaimSaveLocked waits on inflight_done_ holding nothing.
// - PinImpl's ReadPathLocked, around FillLocked and FetchLocked, and its
//   WaitForPathIoLocked, while it waits on io_done_ for another's I/O: pins
//   on the DRAM part of its path (PinDramPathLocked), holds on the remote
//   tensors it fetches and on its transient fetches; not the namespace,
//   which ReadPathLocked looks up again after the fill. PinImpl walks the
//   match again after each.
// - CompactOnce (compact_mu_ held throughout), for the copies: each move
//   holds its tensor; records it copies are kCopying (LandMoveLocked, under
//   mu_ again, checks each against what changed).
// - PersistAll, across each SpillLocked (tensors looked up again by id).
// - FinishRemovalLocked returns with mu_ released (the end of a removal
//   waits for its record rewrites without it), as DropNamespace and
//   SetQuota end; CleanerLoop sleeps on cleaner_wake_ and runs SyncTimes and
//   CompactOnce without it.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <future>
#include <optional>
#include <set>
#include <span>
#include <thread>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "core/shm.h"
#include "core/thread_annotations.h"
#include "ptstore/quota.h"
#include "ptstore/status.h"
#include "ptstore/types.h"
#include "storage/cache/allocator.h"
#include "storage/cache/change_log.h"
#include "storage/ssd_format/env.h"
#include "storage/cache/gdsf.h"
#include "storage/ssd/io_pool.h"
#include "storage/cache/kv_event.h"
#include "storage/cache/namespace.h"
#include "storage/index/radix_tree.h"
#include "storage/cache/remote.h"
#include "storage/cache/store_options.h"
#include "storage/cache/store_results.h"
#include "storage/ssd/ssd_tier.h"
#include "storage/index/tensor.h"

namespace ptstore::storage {

using TensorHold = TensorRef<TensorRefKind::kHold>;
using TensorPin = TensorRef<TensorRefKind::kPin>;

class Store {
 public:
  using Clock = std::chrono::steady_clock;

  static Result<std::unique_ptr<Store>> Open(const StoreOptions& options);
  ~Store();

  // Namespaces. Create with exist_ok accepts an existing namespace whose
  // layout and salt are the same; otherwise AlreadyExists.
  Result<NamespaceInfo> CreateNamespace(const std::string& name, const Layout& layout, const std::string& salt,
                                        uint32_t uid, uint32_t gid, uint32_t mode, bool exist_ok) EXCLUDES(mu_);
  Result<NamespaceInfo> GetNamespace(const std::string& name) const EXCLUDES(mu_);
  std::vector<NamespaceInfo> ListNamespaces() const EXCLUDES(mu_);
  // Quotas (ptstore/quota.h, store_quota.cc). SetQuota sets the tiers
  // `change` names (0: no limit) and returns the quotas and use afterwards;
  // a quota below the namespace's use makes it evict its own increments at
  // once (what is pinned stays until unpinned and the next save). With an
  // SSD tier the quotas are written to the namespace's record first (a new
  // record replacing the old, so they survive a restart); if that write
  // fails nothing changes. InvalidArgument for more than kMaxQuotaBytes or
  // an SSD quota without an SSD tier; NotFound for an unknown namespace.
  // Who may set them is the caller's business (the session: owner or root).
  Result<NamespaceQuota> SetQuota(const std::string& ns, const QuotaChange& change) EXCLUDES(mu_);
  Result<NamespaceQuota> GetQuota(const std::string& ns) const EXCLUDES(mu_);
  std::vector<NamespaceQuota> ListQuotas() const EXCLUDES(mu_);

  // Removes a namespace and everything in it (pinned bytes are freed when
  // their pins go).
  Result<RemoveResult> DropNamespace(const std::string& name) EXCLUDES(mu_);

  // Saves the KV of `tokens` (whole blocks; a partial last block is
  // ignored). Within the namespace's DRAM quota: the namespace's own
  // increments make room first (by GDSF); blocks that do not fit even then
  // are not stored (stored_tokens says how many were), never an error
  // beyond what a full arena gives. `data` holds the bytes of blocks [first_block, n) back to back
  // and must be exactly (n - first_block) * bytes_per_block long.
  // InvalidArgument if the size is wrong; Aborted if first_block > 0 and
  // the blocks before it are no longer stored (retry with first_block = 0).
  Result<SaveResult> Save(const std::string& ns, std::span<const uint32_t> tokens, const uint8_t* data,
                          uint64_t length, uint64_t first_block, CacheClass cache_class = CacheClass::kOwned)
      EXCLUDES(mu_);

  Result<PrefixResult> Lookup(const std::string& ns, std::span<const uint32_t> tokens) EXCLUDES(mu_);
  // Pins the longest stored prefix of `tokens` for `session` until Release,
  // ReleaseSession or lease_ms (0: the default lease) passes.
  Result<PrefixResult> Pin(const std::string& ns, std::span<const uint32_t> tokens, uint64_t session,
                           uint64_t lease_ms = 0) EXCLUDES(mu_);
  // NotFound if the lease is unknown (expired or released) or not the session's.
  Status Release(uint64_t lease_id, uint64_t session) EXCLUDES(mu_);
  // Drops every lease of a session (its client went away).
  void ReleaseSession(uint64_t session) EXCLUDES(mu_);
  // Drops leases whose time has passed; returns how many.
  size_t ExpireLeases(Clock::time_point now) EXCLUDES(mu_);

  // Pins, copies the longest stored prefix that fits in `capacity` bytes
  // into `dst`, unpins. Returns the tokens copied.
  Result<uint64_t> LoadCopy(const std::string& ns, std::span<const uint32_t> tokens, uint8_t* dst,
                            uint64_t capacity) EXCLUDES(mu_);

  // Removes the increment (radix node) that holds the last whole block of
  // `tokens`, with everything below it: the prefix and every longer prompt
  // stored through it. Ancestors shared with other prompts stay. NotFound if
  // the prefix is not fully stored.
  // With `point`, also says where the removal started (to propagate it).
  Result<RemoveResult> Remove(const std::string& ns, std::span<const uint32_t> tokens, RemovalPoint* point = nullptr)
      EXCLUDES(mu_);
  Result<RemoveResult> RemoveByKey(const std::string& ns, const ChainKey& key, RemovalPoint* point = nullptr)
      EXCLUDES(mu_);

  // One increment by its chain key (NotFound if there is none): its listing
  // entry and its own token ids. With `pin`, also pins the prefix that ends
  // with it for `session` (SSD-only parts are read back first) and returns
  // the extents of the increment's bytes, or with `whole_prefix` of the
  // whole prefix. ResourceExhausted if the prefix cannot be in DRAM at once.
  Result<IncrementResult> Increment(const std::string& ns, const ChainKey& key, bool pin, bool whole_prefix,
                                    uint64_t session, uint64_t lease_ms = 0) EXCLUDES(mu_);

  // Sets the times of the increment named `key` (touch(1) on the mount): a
  // non-zero atime_ns becomes its atime, and its ancestors' where theirs is
  // older (a use of it is a use of its prefix); a non-zero mtime_ns its
  // mtime. Its ctime becomes now. Returns its listing entry afterwards;
  // NotFound if there is no such increment.
  Result<PrefixNodeInfo> SetTimes(const std::string& ns, const ChainKey& key, uint64_t atime_ns, uint64_t mtime_ns)
      EXCLUDES(mu_);

  // Children of `parent` (zero key: the root), or the whole subtree.
  Result<std::vector<PrefixNodeInfo>> ListTree(const std::string& ns, const ChainKey& parent,
                                               bool recursive) const EXCLUDES(mu_);

  StoreStats Stats() const EXCLUDES(mu_);

  // The changes of the index from position `since` of log `epoch` on, at
  // most `max` (ChangeLog::Since; Client::Changes). Who may see which
  // namespace's changes is the session's business.
  TreeChanges Changes(uint64_t epoch, uint64_t since, size_t max) const { return changes_.Since(epoch, since, max); }

  // ------------------------------------------------------------- KV events
  // (store_events.cc, docs/kv-events.md). Sets where this node's events go
  // (nullptr: nowhere) and announces, into the new sink, AllBlocksCleared
  // and then every block this node holds, medium by medium, in each
  // namespace the sink Publishes. The sink must outlive its use: set
  // nullptr before destroying it.
  void SetEventSink(KvEventSink* sink) EXCLUDES(mu_);
  // AllBlocksCleared and everything held again, into the current sink
  // (after the sink dropped events).
  void AnnounceEvents() EXCLUDES(mu_);
  // The media (KvMedium bits) in which this node holds every block of
  // `tokens` from block `from_block` on: 0 when it does not hold them all
  // (the KV query's PeerTiers; as Holds, per medium).
  Result<uint8_t> HeldMedia(const std::string& ns, std::span<const uint32_t> tokens, uint64_t from_block) EXCLUDES(mu_);
  // The tokens that the block hashes `hashes` (chain keys of blocks 0, 1,
  // ... as the KV-event stream publishes them; `low64`: only their low 64
  // bits count, the int form) name in this node's index: the longest run
  // of them from the namespace's root that it knows, held here or not.
  // Empty when the first is unknown. NotFound for an unknown namespace.
  Result<std::vector<uint32_t>> TokensOfHashes(const std::string& ns, std::span<const ChainKey> hashes,
                                               bool low64) const EXCLUDES(mu_);

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
  Result<Ownership> Resolve(const std::string& ns, std::span<const uint32_t> tokens, bool per_increment = false)
      EXCLUDES(mu_);
  // Files blocks of `tokens` past the local match as remote increments,
  // owned as `ranges` say (ranges cover blocks [0, ranges.back().end_block)
  // in order). Ranges naming this node are skipped (stale). Returns the
  // local match, in blocks, afterwards.
  Result<uint64_t> InsertRemote(const std::string& ns, std::span<const uint32_t> tokens,
                                std::span<const OwnedRange> ranges) EXCLUDES(mu_);
  // Pins blocks [from_block, ...) of the longest match of `tokens` that this
  // node holds (its own data or replicas; SSD-only parts are read back;
  // nothing is fetched from other nodes): what an owner does to serve a
  // peer's fetch. The extents cover only those blocks; matched_tokens is
  // the end of the pinned range. Not counted as a client request, but as a
  // hit for eviction (GDSF): what peers load stays.
  Result<PrefixResult> PinHeld(const std::string& ns, std::span<const uint32_t> tokens, uint64_t from_block,
                               uint64_t session, uint64_t lease_ms = 0) EXCLUDES(mu_);
  // Removes blocks [from_block, ...) of the prefix `tokens` (its first
  // from_block + 1 whole blocks at least) and everything below them,
  // splitting an increment that starts before from_block. A no-op when the
  // prefix is not stored that far: removals that arrive from other nodes
  // are idempotent.
  Result<RemoveResult> RemoveFrom(const std::string& ns, std::span<const uint32_t> tokens, uint64_t from_block)
      EXCLUDES(mu_);
  // Owned increments that left this node without a copy (evicted with no
  // SSD tier, or dropped from SSD) since the last call (with track_lost).
  std::vector<RemovalPoint> TakeLostIncrements() EXCLUDES(mu_);
  // Every owned increment in the index: its namespace, whole prefix tokens
  // and first block (to announce to the index shards).
  std::vector<HeldIncrement> ListOwned() const EXCLUDES(mu_);
  // Node `node` restarted: what it owned in DRAM is gone, and the replicas
  // this node keeps of its increments may be their only copies. They become
  // this node's own (owned, announced with the rest; a copy the restarted
  // node recovered from its SSD tier holds the same bytes). Returns how many.
  uint64_t AdoptReplicasOf(uint32_t node) EXCLUDES(mu_);
  // Whether this node holds (in DRAM or on SSD, its own data or a replica)
  // every block of the longest match of `tokens` from from_block on, and
  // that match covers all of its whole blocks. No pin, no hit.
  Result<bool> Holds(const std::string& ns, std::span<const uint32_t> tokens, uint64_t from_block) EXCLUDES(mu_);
  // The increment named `key`: its whole prefix's tokens and first block.
  Result<HeldIncrement> PrefixOf(const std::string& ns, const ChainKey& key) const EXCLUDES(mu_);
  // The namespace as other nodes must create it (with its salt).
  Result<NamespaceDef> GetNamespaceDef(const std::string& ns) const EXCLUDES(mu_);
  // The fetcher of remote bytes (nullptr: none; remote tensors stay misses).
  // Set before serving; it must outlive the store's use of it.
  void SetFetcher(RemoteFetcher* fetcher) EXCLUDES(mu_);

  // Writes every owned tensor that only DRAM holds to the SSD tier (most
  // valuable first, as far as the capacity goes), keeping the DRAM copies:
  // after a planned restart the cache is as warm as it was. Returns the
  // tensors written. A no-op without an SSD tier.
  Result<uint64_t> PersistAll() EXCLUDES(mu_);
  // Rewrites one sparse SSD segment now if there is one (the background
  // cleaner does this on its own); returns whether it did.
  Result<bool> CompactOnce() EXCLUDES(compact_mu_, mu_);
  // Waits until queued SSD header rewrites are on disk (tests).
  void FlushSsd() EXCLUDES(mu_);
  // Writes the times of increments whose SSD records hold older ones into
  // those records (in place) and waits for the writes. Returns how many
  // records it rewrote. A no-op without an SSD tier.
  uint64_t SyncTimes() EXCLUDES(mu_);

  const uint8_t* arena_base() const { return arena_->data(); }
  int arena_fd() const { return arena_->fd(); }
  uint64_t arena_bytes() const { return arena_->size(); }
  bool huge_pages() const { return arena_->huge_pages(); }
  const StoreOptions& options() const { return options_; }

 private:
  template <TensorRefKind K>
  friend class TensorRef;  // holds and pins take and release under mu_ (tensor_refs.h)
  friend class TensorRefsTest;  // tests/storage/tensor_state_test.cc
  struct Lease {
    uint64_t session;
    Clock::time_point expiry;
    std::vector<Tensor*> tensors;
  };

  Store(const StoreOptions& options, std::unique_ptr<core::SharedMemory> arena);
  Status OpenSsd() EXCLUDES(mu_);

  Result<Namespace*> FindLocked(const std::string& name) const REQUIRES(mu_);
  // The chain keys of a prompt's whole blocks (for saves and requests that
  // need keys past the match; WalkLocked needs none), hashed without holding mu_
  // (hashing an 8k-token prompt takes ~11 us, which would serialise every
  // other request of the node), and the namespace they were hashed for.
  struct PromptKeys {
    uint64_t ns_id = 0;
    std::vector<ChainKey> keys;
  };
  Result<PromptKeys> HashPrompt(const std::string& ns_name, std::span<const uint32_t> tokens) const EXCLUDES(mu_);
  // Hashes again, under mu_, if `ns` is not the namespace `k` was made for.
  void RekeyLocked(const Namespace& ns, std::span<const uint32_t> tokens, PromptKeys* k) const REQUIRES(mu_);
  // Longest stored match of the whole blocks of `tokens` (keys in `k`).
  Match MatchLocked(const Namespace& ns, std::span<const uint32_t> tokens, PromptKeys* k) const REQUIRES(mu_);
  // The same match, hashing only the blocks where the walk steps
  // (RadixTree::Walk): for requests that need no key beyond the match.
  Match WalkLocked(const Namespace& ns, std::span<const uint32_t> tokens) const REQUIRES(mu_);
  // Counts a lookup or load of `requested_tokens` whole-block tokens that
  // matched `matched_tokens`: a hit when it matched anything, else a miss.
  void CountRequestLocked(uint64_t requested_tokens, uint64_t matched_tokens) REQUIRES(mu_);
  // Allocates `bytes` for a tensor of `cls`, evicting by GDSF as needed.
  // May release `lk` while it waits for a spill to SSD: callers must hold
  // (pin, hold or mark busy) whatever they need to stay.
  // A `transient` replica (fetched for one load) may exceed the replica
  // share and push owned data out.
  // With `ns`, the allocation counts against ns's DRAM quota: its own
  // tensors make room first (NamespaceRoomLocked); ResourceExhausted naming
  // the namespace when they cannot. ns must stay in namespaces_ (callers
  // check that it is still there after the lock was released).
  Result<uint64_t> AllocateLocked(uint64_t bytes, CacheClass cls, core::UniqueLock& lk,
                                  bool transient = false, Namespace* ns = nullptr) REQUIRES(mu_);
  // The arena's part of AllocateLocked (no quota).
  Result<uint64_t> ArenaAllocateLocked(uint64_t bytes, CacheClass cls, core::UniqueLock& lk,
                                       bool transient) REQUIRES(mu_);
  // The namespace `k` names, if it is still that one (nullptr: dropped or
  // made again since `k` was taken).
  Namespace* FindAgainLocked(const NamespaceKey& k) const REQUIRES(mu_);
  // Adds `delta` to the dram_pending of namespace `ns` if it is still there.
  void AddPendingLocked(const NamespaceKey& ns, int64_t delta) REQUIRES(mu_);
  // Quotas (store_quota.cc). Brings t's charges against its namespace up to
  // date with where t is (Tensor::charged_*); call after every change of
  // in_index, in_dram, allocated, on_ssd or ssd.
  void ChargeLocked(Tensor* t) REQUIRES(mu_);
  // Frees DRAM of `ns` (namespace `name`, id `id`) by GDSF among its own
  // tensors until `bytes` more fit under its DRAM quota. May release `lk`
  // (spills): false if the namespace went meanwhile or nothing more can go.
  bool NamespaceRoomLocked(Namespace* ns, uint64_t bytes, core::UniqueLock& lk) REQUIRES(mu_);
  // Drops SSD records of `ns` by GDSF until `need` more bytes fit under its
  // SSD quota; false if they cannot.
  bool NamespaceSsdRoomLocked(Namespace* ns, uint64_t need) REQUIRES(mu_);
  // Blocks of `bb` bytes that fit in `room` bytes of the arena.
  uint64_t BlocksThatFit(uint64_t room, uint64_t bb) const REQUIRES(mu_);
  NamespaceQuota QuotaOfLocked(const Namespace& ns) const REQUIRES(mu_);
  // Whether any of ns's tensors in DRAM is pinned.
  bool NamespaceHasPinnedLocked(const Namespace& ns) const REQUIRES(mu_);
  // The record of namespace `ns` (its quotas included), not yet sequenced.
  RecordHeader NamespaceRecordLocked(const Namespace& ns) const REQUIRES(mu_);
  // Frees DRAM by one GDSF step among owned tensors: drops one (no SSD
  // tier), frees the DRAM copy of one that SSD holds, or spills one
  // (releasing `lk` while writing). False if nothing can go.
  // With `ns`, among ns's tensors only.
  bool MakeOwnedRoomLocked(core::UniqueLock& lk, Namespace* ns = nullptr) REQUIRES(mu_);
  bool DropOneLocked(CacheClass from, Namespace* ns = nullptr) REQUIRES(mu_);
  // Removes `t`'s nodes from its tree (t must be a leaf tensor) and frees it
  // unless pinned.
  void EvictLocked(Tensor* t) REQUIRES(mu_);
  // A node left the index: unlink it from its tensor; a tensor left with no
  // node leaves the index and is freed once nothing refers to it.
  void OnNodeRemovedLocked(RadixNode* n, RemoveResult* result) REQUIRES(mu_);
  // Frees `t` if it is out of the index and unreferenced (no pin, hold, I/O).
  void MaybeDestroyLocked(Tensor* t) REQUIRES(mu_);
  void FreeDramLocked(Tensor* t) REQUIRES(mu_);
  void UnpinLocked(Tensor* t) REQUIRES(mu_);
  void SetPriorityLocked(Tensor* t, double priority) REQUIRES(mu_);

  // SSD tier (store_ssd.cc; compaction in store_compact.cc).
  bool SsdEnabled() const { return ssd_ != nullptr; }
  // The tier evicts by GDSF to keep live bytes under this share of its
  // capacity, so that dead space can be reclaimed before files fill it.
  static constexpr double kSsdEvictAt = 0.9;
  // Writes `t` to SSD with the lock released; afterwards frees its DRAM
  // copy if `free_dram` and nothing pins it. False if the spill failed.
  bool SpillLocked(Tensor* t, core::UniqueLock& lk, bool free_dram = true) REQUIRES(mu_);
  // Appends a record without payload (a namespace's, a remote tensor's)
  // with the lock released.
  Result<SsdLocation> AppendHeaderLocked(RecordHeader h, core::UniqueLock& lk) REQUIRES(mu_);
  // Writes the record of remote tensor `a` (tokens and owner, no payload).
  void WriteStubLocked(Tensor* a, core::UniqueLock& lk) REQUIRES(mu_);
  // Its record goes (in the background).
  void DropStubLocked(Tensor* t) REQUIRES(mu_);
  // The spill of `t` alone (SpillLocked writes its ancestors first).
  bool SpillOneLocked(Tensor* t, core::UniqueLock& lk, bool free_dram) REQUIRES(mu_);
  // Reads the SSD-only tensors `missing` back into DRAM (lock released for
  // the reads). Tensors whose record is bad leave the index.
  void FillLocked(const std::vector<Tensor*>& missing, core::UniqueLock& lk) REQUIRES(mu_);
  // Keeps the SSD tier's live bytes under its eviction mark with room for
  // `need` more bytes, dropping SSD copies by GDSF. False if it cannot.
  bool MakeSsdRoomLocked(uint64_t need) REQUIRES(mu_);
  // What MakeSsdRoomLocked (and a namespace's SSD quota) may take: the SSD
  // copy of a tensor DRAM holds, or an SSD-only leaf nothing holds.
  static bool SsdEvictable(const Tensor* t);
  // Takes `v` off SSD: its SSD copy when DRAM holds it, else the tensor
  // itself, out of the index (counted as an SSD eviction).
  void EvictFromSsdLocked(Tensor* v) REQUIRES(mu_);
  // The tensor's SSD copy goes (its record is killed on disk in the
  // background); the tensor itself stays if it is in DRAM.
  void DropSsdCopyLocked(Tensor* t) REQUIRES(mu_);
  // Queues a header rewrite; its future lands in pending_rewrites_.
  void RewriteRecordLocked(const SsdLocation& loc, uint64_t live_tokens) REQUIRES(mu_);
  // Takes the rewrites queued so far (to wait for them without the lock).
  std::vector<std::future<Status>> TakeRewritesLocked() REQUIRES(mu_);
  // The record of `t`'s indexed part (seq not set) and its payload length.
  RecordHeader TensorRecordLocked(const Tensor& t, uint64_t* live_bytes) const REQUIRES(mu_);
  uint64_t LiveTokens(const Tensor& t) const;
  void CleanerLoop() EXCLUDES(mu_);
  // CompactOnce's steps (store_compact.cc): the live records of segment
  // `seg` marked and listed (false, nothing marked, if a tensor there is
  // busy); one record's copy landed (false if its copy failed).
  struct CompactionMove;
  bool CollectMovesLocked(uint64_t seg, std::vector<CompactionMove>* moves) REQUIRES(mu_);
  bool LandMoveLocked(CompactionMove& m) REQUIRES(mu_);
  // Takes `t` (and what hangs below it) out of the index; the caller's hold
  // keeps its struct (freed when the hold goes).
  void DropFromIndexLocked(const TensorHold& t) REQUIRES(mu_);
  // Keeps the first `blocks` blocks of `t`'s nodes in the index and takes
  // the rest (and what hangs below it) out; `keys` are the chain keys of
  // `t`'s prefix up to its last block.
  void KeepHeadLocked(const TensorHold& t, uint64_t blocks, std::span<const ChainKey> keys) REQUIRES(mu_);
  // KV events (store_events.cc): the media `t`'s blocks are held in (KvMedium
  // bits); publishes what changed for each of its nodes / for one node, or
  // for a node leaving the index; announces everything (AnnounceLocked).
  uint8_t HeldMediaLocked(const Tensor& t) const REQUIRES(mu_);
  void SyncTensorEventsLocked(Tensor* t) REQUIRES(mu_);
  void SyncNodeEventsLocked(RadixNode* n, uint8_t held, bool force) REQUIRES(mu_);
  void NodeLeavesEventsLocked(RadixNode* n) REQUIRES(mu_);
  void EmitNodeEventLocked(const RadixNode* n, KvEventKind kind, KvMedium medium, bool force) REQUIRES(mu_);
  void AnnounceLocked(bool force) REQUIRES(mu_);
  // Rebuilds namespaces and the index from the segments (store_recovery.cc),
  // in steps on one Recovery: the newest record of each namespace; then
  // each tensor record, parents first, placed (false: not indexed, marked
  // dead with DropRecordLocked saying why) and indexed. mu_ held throughout.
  Status RecoverLocked() REQUIRES(mu_);
  struct RecoveredRecord; struct Recovery; struct RecordPlace;
  void DropRecordLocked(const RecoveredRecord& r, const std::string& why) REQUIRES(mu_);
  void RecoverNamespacesLocked(Recovery& rc) REQUIRES(mu_);
  bool PlaceRecordLocked(Recovery& rc, size_t i, RecordPlace* place) REQUIRES(mu_);
  void IndexRecordLocked(Recovery& rc, size_t i, const RecordPlace& place) REQUIRES(mu_);
  void RemoveSubtreeLocked(Namespace* ns, RadixNode* node, RemoveResult* result) REQUIRES(mu_);
  // Releases mu_ (it returns without it) and waits for the record rewrites
  // of a removal.
  Result<RemoveResult> FinishRemovalLocked(const RemoveResult& r, core::UniqueLock& lk) RELEASE(mu_);
  // Extents of a match; arena offsets when `with_arena`.
  std::vector<Extent> ExtentsLocked(const Match& m, uint64_t block_bytes, bool with_arena) const REQUIRES(mu_);
  // Counts a hit on every tensor of the match and restores the rule that an
  // ancestor's priority is at least each descendant's.
  void HitLocked(const Match& m) REQUIRES(mu_);
  // A use of the match: every node of it gets atime `now` (ptstore(7) "Times").
  void TouchLocked(Namespace* ns, const Match& m, uint64_t now) REQUIRES(mu_);
  // Every ancestor of `n` gets atime at least `atime_ns`; true if one moved.
  bool RaiseAncestorsAtimeLocked(RadixNode* n, uint64_t atime_ns) REQUIRES(mu_);
  // Logs the changes of `ns`'s tree (changes_).
  void WatchTreeLocked(Namespace* ns) REQUIRES(mu_);
  // `t`'s nodes' times changed: its record on SSD, if any, needs them.
  void NoteTimesChangedLocked(Tensor* t) REQUIRES(mu_);
  // The newest of each time of `t`'s nodes (what its record holds).
  Times TensorTimesLocked(const Tensor& t) const REQUIRES(mu_);
  // Raises the priority of every ancestor tensor of `node` to at least `p`.
  void PropagateLocked(RadixNode* node, double p) REQUIRES(mu_);
  void PinLocked(Tensor* t) REQUIRES(mu_);
  // Pins each tensor of `m`'s path that is in DRAM (once; not transient
  // ones, which no eviction takes): they stay in DRAM while the caller
  // releases the lock (a fill, a fetch, a wait for another's I/O).
  std::vector<TensorPin> PinDramPathLocked(const Match& m) REQUIRES(mu_);
  PrefixNodeInfo NodeInfoLocked(const RadixNode* n, uint32_t block_tokens) const REQUIRES(mu_);
  // Pin with its cluster options: only blocks from `from_block` must be in
  // DRAM and are pinned; remote tensors are fetched when `fetch_remote`;
  // `count` counts the request as a client lookup/load.
  Result<PrefixResult> PinImpl(const std::string& ns, std::span<const uint32_t> tokens, uint64_t session,
                               uint64_t lease_ms, uint64_t from_block, bool fetch_remote, bool count) EXCLUDES(mu_);
  // PinImpl's steps (store_pin.cc): what `m`'s path lacks in DRAM (blocks
  // before from_block need not be there; remote tensors in `tried` are not
  // fetched again); a wait for another's I/O on it, and the reads of the
  // rest (FillLocked, then FetchLocked), each releasing `lk` with the DRAM
  // part of the path pinned; the match cut before the first needed tensor
  // not in DRAM; the lease on the match, its blocks from from_block pinned.
  struct PinNeeds;
  PinNeeds PinNeedsLocked(const Match& m, uint64_t from_block, bool fetch_remote,
                          const std::vector<Tensor*>& tried) const REQUIRES(mu_);
  void WaitForPathIoLocked(const Match& m, core::UniqueLock& lk) REQUIRES(mu_);
  void ReadPathLocked(const NamespaceKey& ns, const Match& m, const PinNeeds& need, core::UniqueLock& lk,
                      std::vector<Tensor*>* tried, std::vector<TensorHold>* transient) REQUIRES(mu_);
  Match DramPrefixLocked(const Match& m, uint64_t from_block) const REQUIRES(mu_);
  PrefixResult LeaseLocked(const Namespace& ns, const Match& m, uint64_t session, uint64_t lease_ms,
                           uint64_t from_block) REQUIRES(mu_);
  // Save's steps (store_save.cc), on one SaveJob: its input checked; the
  // claim on its next block taken (waiting on inflight_done_ meanwhile; a
  // result when the save ends there); the matched path held, and released
  // with the claim; the bytes allocated, cut to the namespace's quota; the
  // new tensor made; after the copy, the tensor filed in the index.
  struct SaveJob;
  Status CheckSaveLocked(const SaveJob& job, const uint8_t* data, uint64_t length) const REQUIRES(mu_);
  Result<std::optional<SaveResult>> ClaimSaveLocked(SaveJob& job, core::UniqueLock& lk) REQUIRES(mu_);
  void HoldSavePathLocked(SaveJob& job) REQUIRES(mu_);
  void FinishSaveClaimLocked(SaveJob& job) REQUIRES(mu_);
  Result<uint64_t> AllocateSaveLocked(SaveJob& job, core::UniqueLock& lk) REQUIRES(mu_);
  Tensor* NewSaveTensorLocked(const SaveJob& job, uint64_t offset) REQUIRES(mu_);
  SaveResult IndexSaveLocked(SaveJob& job, Tensor* t) REQUIRES(mu_);
  // Fetches the remote tensors `missing` (lock released for the fetch).
  // Tensors it fetched for this pin alone go in `transient`, each with a
  // hold the caller releases (ReleaseTransientsLocked).
  void FetchLocked(const Namespace& ns, const std::vector<Tensor*>& missing, core::UniqueLock& lk,
                   std::vector<TensorHold>* transient) REQUIRES(mu_);
  // FetchLocked's steps (store_remote.cc), on one FetchPlan: an allocation
  // per tensor to fetch (AllocateLocked: may release `lk`), the tensors
  // grouped into fetches by prefix and owner, and each job's result landed.
  struct FetchJob; struct FetchGroup; struct FetchPlan;
  void PlanFetchesLocked(FetchPlan& p, const std::vector<Tensor*>& missing, core::UniqueLock& lk) REQUIRES(mu_);
  void GroupFetchesLocked(FetchPlan& p) REQUIRES(mu_);
  void LandFetchLocked(const FetchPlan& p, FetchJob& j, bool fetched, std::vector<TensorHold>* transient)
      REQUIRES(mu_);
  // Drops the holds of a pin's transient fetches, and the bytes of those
  // the pin did not keep pinned.
  void ReleaseTransientsLocked(std::vector<TensorHold>& tensors) REQUIRES(mu_);
  // An owned increment leaves the node with no copy: remember it for the
  // cluster (track_lost).
  void NoteLostLocked(Tensor* t) REQUIRES(mu_);
  // Tokens of the prefix from the root to the end of node `n`.
  std::vector<uint32_t> PrefixTokensLocked(const RadixNode* n) const REQUIRES(mu_);
  // Where a removal of node `n` (and all below) starts.
  RemovalPoint RemovalPointLocked(const Namespace& ns, const RadixNode* n) const REQUIRES(mu_);

  // Set before the store is shared (the constructor, Open and OpenSsd) and
  // never again: read without mu_. What they point at has its own locking.
  const StoreOptions options_;
  std::unique_ptr<core::SharedMemory> arena_;
  std::unique_ptr<SsdTier> ssd_;        // null without an SSD tier
  std::unique_ptr<IoPool> io_;          // SSD reads and writes

  // Lock order: compact_mu_ before mu_; never call out while holding mu_.
  core::Mutex compact_mu_ ACQUIRED_BEFORE(mu_);  // one compaction at a time
  mutable core::Mutex mu_;
  ChangeLog changes_;  // its own mutex; appended to under mu_
  core::CondVar inflight_done_;  // signalled when a save finishes
  core::CondVar io_done_;        // signalled when a tensor's I/O ends
  core::CondVar cleaner_wake_;
  Allocator alloc_ GUARDED_BY(mu_);
  Gdsf gdsf_ GUARDED_BY(mu_);
  EvictionQueue queue_[2] GUARDED_BY(mu_);  // DRAM copies by class
  EvictionQueue ssd_queue_ GUARDED_BY(mu_);  // SSD copies
  std::map<std::string, std::unique_ptr<Namespace>, std::less<>> namespaces_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, std::unique_ptr<Tensor>> tensors_ GUARDED_BY(mu_);
  std::set<std::pair<Namespace*, ChainKey>> inflight_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Lease> leases_ GUARDED_BY(mu_);
  uint64_t next_tensor_seq_ GUARDED_BY(mu_) = 1;
  uint64_t next_lease_ GUARDED_BY(mu_) = 1;
  uint64_t next_seq_ GUARDED_BY(mu_) = 1;            // records and namespaces
  uint64_t appends_in_flight_ GUARDED_BY(mu_) = 0;   // SSD appends outside mu_
  uint64_t ssd_gen_ GUARDED_BY(mu_) = 1;             // bumped when SSD space frees
  std::vector<std::future<Status>> pending_rewrites_ GUARDED_BY(mu_);
  std::set<uint64_t> times_dirty_ GUARDED_BY(mu_);  // tensor ids: SyncTimes
  Clock::time_point times_synced_ GUARDED_BY(mu_) = Clock::now();
  bool stopping_ GUARDED_BY(mu_) = false;
  std::thread cleaner_;  // started by OpenSsd, joined by the destructor
  RemoteFetcher* fetcher_ GUARDED_BY(mu_) = nullptr;
  std::vector<RemovalPoint> lost_ GUARDED_BY(mu_);
  KvEventSink* events_ GUARDED_BY(mu_) = nullptr;
  mutable StoreStats stats_ GUARDED_BY(mu_);
};

}  // namespace ptstore::storage

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
// A cache miss is never an error: lookups and pins of unknown prefixes
// return 0 matched tokens. Errors are for unknown namespaces, bad input and
// a full arena whose data is all pinned.
//
// Thread safety: all methods are safe to call from many threads. One mutex
// (mu_) guards the index, the tensors, the allocator and the leases; byte
// copies into and out of the arena run outside it, protected by pins.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/shm.h"
#include "ptstore/status.h"
#include "ptstore/types.h"
#include "storage/allocator.h"
#include "storage/gdsf.h"
#include "storage/radix_tree.h"
#include "storage/tensor.h"

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
};

struct Namespace {
  uint64_t id = 0;                    // unique per store lifetime (never reused)
  NamespaceInfo info;                 // bytes/prefixes kept current
  std::string salt;
  ChainKey root_key;
  std::unique_ptr<RadixTree> tree;
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
  // Removes a namespace and everything in it (pinned bytes are freed when
  // their pins go).
  Result<RemoveResult> DropNamespace(const std::string& name);

  // Saves the KV of `tokens` (whole blocks; a partial last block is
  // ignored). `data` holds the bytes of blocks [first_block, n) back to back
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
  Result<RemoveResult> Remove(const std::string& ns, std::span<const uint32_t> tokens);
  Result<RemoveResult> RemoveByKey(const std::string& ns, const ChainKey& key);

  // Children of `parent` (zero key: the root), or the whole subtree.
  Result<std::vector<PrefixNodeInfo>> ListTree(const std::string& ns, const ChainKey& parent,
                                               bool recursive) const;

  StoreStats Stats() const;

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

  Result<Namespace*> FindLocked(const std::string& name) const;
  // Longest stored match of the whole blocks of `tokens`.
  Match MatchLocked(const Namespace& ns, std::span<const uint32_t> tokens) const;
  // Counts a lookup or load of `requested_tokens` whole-block tokens that
  // matched `matched_tokens`: a hit when it matched anything, else a miss.
  void CountRequestLocked(uint64_t requested_tokens, uint64_t matched_tokens);
  // Allocates `bytes` for a tensor of `cls`, evicting by GDSF as needed.
  Result<uint64_t> AllocateLocked(uint64_t bytes, CacheClass cls);
  bool EvictOneLocked(CacheClass from);
  // Removes `t`'s nodes from its tree (t must be a leaf tensor) and frees it
  // unless pinned.
  void EvictLocked(Tensor* t);
  // A node left the index: unlink it from its tensor; a tensor left with no
  // node leaves the index and is freed once unpinned.
  void OnNodeRemovedLocked(RadixNode* n, RemoveResult* result);
  void FreeTensorLocked(Tensor* t);
  void UnpinLocked(Tensor* t);
  void RemoveSubtreeLocked(Namespace* ns, RadixNode* node, RemoveResult* result);
  // Extents of a match; arena offsets when `with_arena`.
  std::vector<Extent> ExtentsLocked(const Match& m, uint64_t block_bytes, bool with_arena) const;
  // Counts a hit on every tensor of the match and restores the rule that an
  // ancestor's priority is at least each descendant's.
  void HitLocked(const Match& m);
  // Raises the priority of every ancestor tensor of `node` to at least `p`.
  void PropagateLocked(RadixNode* node, double p);
  void PinLocked(Tensor* t);

  const StoreOptions options_;
  std::unique_ptr<core::SharedMemory> arena_;

  // Lock order: mu_ is the only lock; never call out while holding it.
  mutable std::mutex mu_;
  std::condition_variable inflight_done_;  // signalled when a save finishes
  Allocator alloc_;                                                      // GUARDED_BY(mu_)
  Gdsf gdsf_;                                                            // GUARDED_BY(mu_)
  EvictionQueue queue_[2];                                               // GUARDED_BY(mu_), by class
  std::map<std::string, std::unique_ptr<Namespace>, std::less<>> namespaces_;  // GUARDED_BY(mu_)
  std::unordered_map<uint64_t, std::unique_ptr<Tensor>> tensors_;        // GUARDED_BY(mu_)
  std::set<std::pair<Namespace*, ChainKey>> inflight_;                   // GUARDED_BY(mu_)
  std::unordered_map<uint64_t, Lease> leases_;                           // GUARDED_BY(mu_)
  uint64_t next_tensor_seq_ = 1;                                         // GUARDED_BY(mu_)
  uint64_t next_lease_ = 1;                                              // GUARDED_BY(mu_)
  uint64_t next_namespace_id_ = 1;                                       // GUARDED_BY(mu_)
  mutable StoreStats stats_;                                             // GUARDED_BY(mu_)
};

}  // namespace ptstore::storage

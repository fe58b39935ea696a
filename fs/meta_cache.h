// What the mount daemon knows of the store between two polls of its change
// log (fs/watcher.h): namespaces, increments and the last listing of each
// directory, as the store last answered them. It answers lookups, getattrs
// and listings without a round trip to ptstored; every change the store
// logs drops what it makes stale (Apply), so an answer from here is never
// older than the last poll (ptstore(7) "Caching").
//
// Races: an answer of the store taken before a change, but put here after
// the watcher applied that change, would stay stale. Every Put therefore
// carries the generation read before its RPC and is dropped when a change
// was applied meanwhile (the generation moved).
//
// Disabled (no watcher, or its polls fail), it holds nothing and every Get
// is a miss. A miss is never an error: the caller asks the store.
//
// Thread safety: all methods may be called from any thread (one mutex).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "ptstore/keys.h"
#include "ptstore/types.h"

namespace ptstore::fs {

class MetaCache {
 public:
  // Starts disabled.
  MetaCache() = default;

  // Enables it (the watcher polls), or disables and empties it.
  void SetEnabled(bool enabled) EXCLUDES(mu_);
  bool enabled() const EXCLUDES(mu_);
  // Read before an RPC whose answer will be Put.
  uint64_t generation() const EXCLUDES(mu_);

  std::optional<NamespaceInfo> Namespace(const std::string& ns) const EXCLUDES(mu_);
  std::optional<std::vector<NamespaceInfo>> Namespaces() const EXCLUDES(mu_);
  std::optional<PrefixNodeInfo> Increment(const std::string& ns, const ChainKey& key) const EXCLUDES(mu_);
  // The children of `parent` (zero: the namespace's top level) as its last
  // listing showed them, each with its current entry; nullopt when that
  // listing or one of its entries is not known.
  std::optional<std::vector<PrefixNodeInfo>> Children(const std::string& ns, const ChainKey& parent) const
      EXCLUDES(mu_);
  // The parent of increment `key`, when known.
  std::optional<ChainKey> ParentOf(const std::string& ns, const ChainKey& key) const EXCLUDES(mu_);

  void PutNamespace(uint64_t gen, const NamespaceInfo& info) EXCLUDES(mu_);
  void PutNamespaces(uint64_t gen, const std::vector<NamespaceInfo>& all) EXCLUDES(mu_);
  void PutIncrement(uint64_t gen, const std::string& ns, const PrefixNodeInfo& node) EXCLUDES(mu_);
  // A ListTree answer: the children of `parent`, or with `recursive` its
  // whole subtree (parents before children, as ListTree gives it).
  void PutListing(uint64_t gen, const std::string& ns, const ChainKey& parent,
                  const std::vector<PrefixNodeInfo>& nodes, bool recursive) EXCLUDES(mu_);

  // Drops what `change` makes stale and moves the generation.
  void Apply(const TreeChange& change) EXCLUDES(mu_);
  // Drops everything a change in namespace `ns` could touch (this mount's
  // own rmdir, mkdir, layout change) and moves the generation.
  void DropNamespace(const std::string& ns) EXCLUDES(mu_);
  // Drops everything and moves the generation.
  void Clear() EXCLUDES(mu_);

  size_t increments() const EXCLUDES(mu_);

 private:
  struct NsEntry {
    std::optional<NamespaceInfo> info;
    std::unordered_map<ChainKey, PrefixNodeInfo, ChainKeyHash> nodes;
    std::unordered_map<ChainKey, std::vector<ChainKey>, ChainKeyHash> children;  // zero key: top level
    std::unordered_map<ChainKey, ChainKey, ChainKeyHash> parent_of;
  };
  bool Fresh(uint64_t gen) const REQUIRES(mu_) { return enabled_ && gen == gen_; }
  void DropNode(NsEntry& e, const ChainKey& key) REQUIRES(mu_);

  mutable core::Mutex mu_;
  bool enabled_ GUARDED_BY(mu_) = false;
  uint64_t gen_ GUARDED_BY(mu_) = 1;
  std::unordered_map<std::string, NsEntry> ns_ GUARDED_BY(mu_);
  std::optional<std::vector<NamespaceInfo>> all_ GUARDED_BY(mu_);
};

}  // namespace ptstore::fs

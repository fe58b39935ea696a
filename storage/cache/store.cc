// The node store (store.h): opening and closing it, namespaces, hashing and
// matching prompts, and its counters. The rest of the Store is one file per
// concept: store_tensors.cc (a tensor's life in the index, removals),
// store_evict.cc (allocation and eviction), store_save.cc, store_pin.cc
// (lookups, pins, leases, loads), store_listing.cc (listing and times),
// store_quota.cc, store_ssd.cc, store_compact.cc, store_recovery.cc,
// store_remote.cc and store_events.cc.
#include "storage/cache/store.h"

#include <algorithm>

#include "core/logging.h"
#include "storage/cache/bytes_text.h"

namespace ptstore::storage {

Result<std::unique_ptr<Store>> Store::Open(const StoreOptions& options) {
  if (options.arena_bytes < (1u << 20)) {
    return InvalidArgument("arena size " + std::to_string(options.arena_bytes) + " is below the 1 MiB minimum");
  }
  if (options.replica_share < 0 || options.replica_share > 1) {
    return InvalidArgument("replica_share " + std::to_string(options.replica_share) + " is not in [0, 1]");
  }
  if (options.alignment < 64 || (options.alignment & (options.alignment - 1)) != 0) {
    return InvalidArgument("arena alignment " + std::to_string(options.alignment) +
                           " must be a power of two >= 64");
  }
  core::SharedMemory::CreateOptions shm;
  shm.name = "ptstore-arena";
  shm.prefault = options.prefault;
  shm.try_huge_pages = options.try_huge_pages;
  PTS_ASSIGN_OR_RETURN(auto arena, core::SharedMemory::Create(options.arena_bytes, shm));
  std::unique_ptr<Store> store(new Store(options, std::move(arena)));
  if (!options.ssd.dir.empty()) PTS_RETURN_IF_ERROR(store->OpenSsd());
  return store;
}

Store::Store(const StoreOptions& options, std::unique_ptr<core::SharedMemory> arena)
    : options_(options), arena_(std::move(arena)), alloc_(arena_->size(), options.alignment) {
  stats_.arena_bytes = arena_->size();
}

Store::~Store() {
  {
    core::MutexLock lk(mu_);
    stopping_ = true;
  }
  cleaner_wake_.NotifyAll();
  if (cleaner_.joinable()) cleaner_.join();
  io_.reset();  // runs what is queued (header rewrites), then joins
}

// ---------------------------------------------------------------- namespaces

Result<NamespaceInfo> Store::CreateNamespace(const std::string& name, const Layout& layout, const std::string& salt,
                                             uint32_t uid, uint32_t gid, uint32_t mode, bool exist_ok) {
  PTS_RETURN_IF_ERROR(ValidateNamespaceName(name));
  PTS_RETURN_IF_ERROR(layout.Validate());
  if (mode > 07777) return InvalidArgument("namespace mode " + std::to_string(mode) + " is not a permission mode");
  core::UniqueLock lk(mu_);
  auto existing = [&]() REQUIRES(mu_) -> std::optional<Result<NamespaceInfo>> {
    auto it = namespaces_.find(name);
    if (it == namespaces_.end()) return std::nullopt;
    const Namespace& n = *it->second;
    if (!exist_ok) return Result<NamespaceInfo>(AlreadyExists("namespace '" + name + "' already exists"));
    if (n.info.layout != layout) {
      return Result<NamespaceInfo>(AlreadyExists("namespace '" + name + "' exists with layout {" +
                                                 n.info.layout.ToString() + "}, not {" + layout.ToString() + "}"));
    }
    if (n.salt != salt) {
      return Result<NamespaceInfo>(AlreadyExists("namespace '" + name + "' exists with a different salt"));
    }
    return Result<NamespaceInfo>(n.info);
  };
  if (auto r = existing()) return std::move(*r);
  const uint64_t id = next_seq_++;
  const uint64_t now = WallClockNs();
  std::optional<SsdLocation> record;
  if (SsdEnabled()) {
    // The namespace is on disk before anyone can save into it, so a restart
    // finds it for every record that names it.
    RecordHeader h;
    h.kind = RecordKind::kNamespace;
    h.seq = id;
    h.live_tokens = 1;
    h.owner_node = options_.node_id;
    h.ns_name = name;
    h.ns_incarnation = id;
    h.layout = layout;
    h.salt = salt;
    h.uid = uid;
    h.gid = gid;
    h.mode = mode;
    h.times = Times{now, now, now};
    Result<SsdLocation> loc = AppendHeaderLocked(std::move(h), lk);
    if (!loc.ok()) return loc.status().WithContext("create namespace '" + name + "'");
    if (auto r = existing()) {
      // Another client created it meanwhile: ours never existed.
      ssd_->Forget(*loc);
      RewriteRecordLocked(*loc, 0);
      return std::move(*r);
    }
    record = *loc;
  }
  auto n = std::make_unique<Namespace>();
  n->id = id;
  n->record = record;
  n->info.name = name;
  n->info.layout = layout;
  n->info.salted = !salt.empty();
  n->info.uid = uid;
  n->info.gid = gid;
  n->info.mode = mode;
  n->info.times = Times{now, now, now};
  n->salt = salt;
  n->root_key = RootKey(name, salt);
  n->tree = std::make_unique<RadixTree>(layout.block_tokens, layout.BytesPerBlock());
  n->quiet = events_ != nullptr && !events_->Publishes(name);
  WatchTreeLocked(n.get());
  NamespaceInfo info = n->info;
  namespaces_.emplace(name, std::move(n));
  changes_.Append(ChangeKind::kNamespace, name, {}, {});
  PTS_INFO("store", "created namespace '" << name << "' {" << layout.ToString() << "} owner " << uid << ":" << gid
                                          << " mode " << std::oct << mode);
  return info;
}

Result<Namespace*> Store::FindLocked(const std::string& name) const {
  auto it = namespaces_.find(name);
  if (it == namespaces_.end()) return NotFound("namespace '" + name + "' does not exist");
  return it->second.get();
}

Result<NamespaceInfo> Store::GetNamespace(const std::string& name) const {
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * n, FindLocked(name));
  return n->info;
}

std::vector<NamespaceInfo> Store::ListNamespaces() const {
  core::MutexLock lk(mu_);
  std::vector<NamespaceInfo> out;
  for (const auto& [name, n] : namespaces_) out.push_back(n->info);
  return out;
}

Result<RemoveResult> Store::DropNamespace(const std::string& name) {
  core::UniqueLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * n, FindLocked(name));
  RemoveResult r;
  std::vector<RadixNode*> tops;
  for (auto& [k, c] : n->tree->root()->children) tops.push_back(c.get());
  n->tree->SetOnChange(nullptr);  // one change for the whole namespace
  for (RadixNode* c : tops) RemoveSubtreeLocked(n, c, &r);
  changes_.Append(ChangeKind::kNamespace, name, {}, {});
  if (n->record) {
    // Killing the namespace record is what makes the drop survive a
    // restart: records of a namespace without one are not indexed again.
    ssd_->Forget(*n->record);
    RewriteRecordLocked(*n->record, 0);
  }
  namespaces_.erase(name);
  inflight_done_.NotifyAll();
  PTS_INFO("store", "dropped namespace '" << name << "': " << r.nodes << " increments, " << BytesText(r.bytes));
  std::vector<std::future<Status>> writes = TakeRewritesLocked();
  lk.Unlock();
  for (auto& w : writes) {
    Status s = w.get();
    if (!s.ok()) PTS_WARN("store", "drop namespace '" << name << "': " << s.ToString());
  }
  return r;
}

// ------------------------------------------------------ prompts and matches

Result<Store::PromptKeys> Store::HashPrompt(const std::string& ns_name, std::span<const uint32_t> tokens) const {
  ChainKey root;
  uint32_t bt;
  PromptKeys k;
  {
    core::MutexLock lk(mu_);
    PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
    root = ns->root_key;
    bt = ns->info.layout.block_tokens;
    k.ns_id = ns->id;
  }
  k.keys = ChainKeys(root, tokens.first(tokens.size() / bt * bt), bt);
  return k;
}

void Store::RekeyLocked(const Namespace& ns, std::span<const uint32_t> tokens, PromptKeys* k) const {
  if (k->ns_id == ns.id) return;
  // The namespace was dropped and created again meanwhile (rare): another
  // root key, maybe another block size.
  const uint32_t bt = ns.info.layout.block_tokens;
  k->keys = ChainKeys(ns.root_key, tokens.first(tokens.size() / bt * bt), bt);
  k->ns_id = ns.id;
}

Match Store::MatchLocked(const Namespace& ns, std::span<const uint32_t> tokens, PromptKeys* k) const {
  RekeyLocked(ns, tokens, k);
  const uint32_t bt = ns.info.layout.block_tokens;
  return ns.tree->Longest(tokens.first(k->keys.size() * bt), k->keys);
}

Match Store::WalkLocked(const Namespace& ns, std::span<const uint32_t> tokens) const {
  const uint32_t bt = ns.info.layout.block_tokens;
  return ns.tree->Walk(tokens.first(tokens.size() / bt * bt), ns.root_key);
}

void Store::CountRequestLocked(uint64_t requested_tokens, uint64_t matched_tokens) {
  stats_.requested_tokens += requested_tokens;
  if (matched_tokens == 0) {
    stats_.misses++;
  } else {
    stats_.hits++;
    stats_.hit_tokens += matched_tokens;
  }
}

StoreStats Store::Stats() const {
  core::MutexLock lk(mu_);
  StoreStats s = stats_;
  s.used_bytes = alloc_.used_bytes();
  s.tensors = tensors_.size();
  s.namespaces = namespaces_.size();
  s.prefix_nodes = 0;
  for (const auto& [name, n] : namespaces_) s.prefix_nodes += n->tree->node_count();
  s.active_leases = leases_.size();
  if (SsdEnabled()) {
    const SsdTierStats t = ssd_->Stats();
    s.ssd_capacity = t.capacity;
    s.ssd_file_bytes = t.file_bytes;
    s.ssd_live_bytes = t.live_bytes;
    s.ssd_segments = t.segments;
    s.ssd_tensors = ssd_queue_.size();
    s.ssd_read_errors = t.read_errors;
  }
  return s;
}

}  // namespace ptstore::storage

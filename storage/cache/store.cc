#include "storage/cache/store.h"

#include <algorithm>
#include <cstring>

#include "core/logging.h"
#include "core/stream_copy.h"

namespace ptstore::storage {

namespace {
constexpr uint64_t kInternalSession = 0;
constexpr uint64_t kNeverExpires = UINT64_MAX;  // lease_ms of the store's own pins

std::string Bytes(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof(buf), "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof(buf), "%.2f MiB", b / double(1ull << 20));
  else std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(b));
  return buf;
}
}  // namespace

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
  PTS_INFO("store", "dropped namespace '" << name << "': " << r.nodes << " increments, " << Bytes(r.bytes));
  std::vector<std::future<Status>> writes = TakeRewritesLocked();
  lk.Unlock();
  for (auto& w : writes) {
    Status s = w.get();
    if (!s.ok()) PTS_WARN("store", "drop namespace '" << name << "': " << s.ToString());
  }
  return r;
}

// ------------------------------------------------------------------ tensors

void Store::PinLocked(Tensor* t) {
  if (t->pins++ == 0) stats_.pinned_bytes += t->allocated;
}

void Store::UnpinLocked(Tensor* t) {
  if (--t->pins == 0) {
    stats_.pinned_bytes -= t->allocated;
    if (t->transient) {
      // Fetched for the loads that pinned it, not hot enough to keep: back
      // to a placeholder.
      FreeDramLocked(t);
      t->transient = false;
    }
    MaybeDestroyLocked(t);
  }
}

void Store::ReleaseTransientsLocked(std::vector<Tensor*>& tensors) {
  for (Tensor* t : tensors) {
    t->holds--;
    if (t->transient && t->pins == 0) {
      FreeDramLocked(t);
      t->transient = false;
    }
    MaybeDestroyLocked(t);
  }
  tensors.clear();
}

void Store::FreeDramLocked(Tensor* t) {
  if (!t->in_dram) return;
  EvictionQueue& q = queue_[static_cast<int>(t->cache_class)];
  if (t->in_index && q.Contains(t)) q.Remove(t);
  alloc_.Free(t->arena_offset);
  (t->cache_class == CacheClass::kOwned ? stats_.owned_bytes : stats_.replica_bytes) -= t->allocated;
  t->in_dram = false;
  t->allocated = 0;
  ChargeLocked(t);
  SyncTensorEventsLocked(t);
}

void Store::MaybeDestroyLocked(Tensor* t) {
  if (t->in_index || t->pins != 0 || t->holds != 0 || t->io != Tensor::Io::kNone) return;
  FreeDramLocked(t);
  DropStubLocked(t);
  if (t->on_ssd) {
    ssd_->Forget(t->ssd);
    RewriteRecordLocked(t->ssd, 0);
    t->on_ssd = false;
  }
  tensors_.erase(t->id.value);
}

void Store::SetPriorityLocked(Tensor* t, double priority) {
  EvictionQueue& dram = queue_[static_cast<int>(t->cache_class)];
  const bool in_dram_queue = dram.Contains(t);
  const bool in_ssd_queue = ssd_queue_.Contains(t);
  if (in_dram_queue) dram.Remove(t);
  if (in_ssd_queue) ssd_queue_.Remove(t);
  t->priority = priority;
  if (in_dram_queue) dram.Add(t);
  if (in_ssd_queue) ssd_queue_.Add(t);
}

void Store::OnNodeRemovedLocked(RadixNode* n, RemoveResult* result) {
  Tensor* t = n->tensor;
  NodeLeavesEventsLocked(n);
  result->nodes++;
  result->bytes += n->length;
  auto& chain = t->nodes;
  chain.erase(std::remove(chain.begin(), chain.end(), n), chain.end());
  if (chain.empty() && t->in_index) {
    if (t->in_dram) queue_[static_cast<int>(t->cache_class)].Remove(t);
    if (t->on_ssd) ssd_queue_.Remove(t);
    t->in_index = false;
    ChargeLocked(t);  // its namespace is rid of it now, whatever pins it
    if (t->remote) {
      stats_.remote_tensors--;
      DropStubLocked(t);
    } else {
      t->ns->info.bytes -= t->bytes;
    }
    MaybeDestroyLocked(t);
  } else if (!chain.empty() && t->on_ssd) {
    // The tail of the tensor went: its record must not bring it back.
    RewriteRecordLocked(t->ssd, LiveTokens(*t));
  } else if (!chain.empty() && t->stub_on_ssd) {
    RewriteRecordLocked(t->stub, LiveTokens(*t));
  }
}

void Store::RemoveSubtreeLocked(Namespace* ns, RadixNode* node, RemoveResult* result) {
  ns->tree->RemoveSubtree(node, [&](RadixNode* x) REQUIRES(mu_) { OnNodeRemovedLocked(x, result); });
  ns->info.prefixes = ns->tree->node_count();
  // Its contents changed, as a directory's do when an entry goes.
  const uint64_t now = WallClockNs();
  ns->info.times.mtime_ns = std::max(ns->info.times.mtime_ns, now);
  ns->info.times.ctime_ns = std::max(ns->info.times.ctime_ns, now);
}

uint64_t Store::LiveTokens(const Tensor& t) const {
  uint64_t n = 0;
  for (const RadixNode* x : t.nodes) n += x->tokens.size();
  return n;
}

void Store::EvictLocked(Tensor* t) {
  gdsf_.OnEvict(*t);
  stats_.evictions++;
  stats_.evicted_bytes += t->bytes;
  PTS_DEBUG("store", "evict tensor " << t->id.value << " (" << CacheClassName(t->cache_class) << ", "
                                     << Bytes(t->bytes) << ", priority " << t->priority << ")");
  NoteLostLocked(t);
  RemoveResult ignored;
  // A leaf tensor's nodes are one chain: removing its top node removes all.
  RemoveSubtreeLocked(t->ns, t->nodes.front(), &ignored);
}

bool Store::DropOneLocked(CacheClass from, Namespace* ns) {
  auto may_go = [](const Tensor* t) {
    if (t->pins != 0 || t->io != Tensor::Io::kNone) return false;
    // A replica of another node's increment only gives up its bytes: its
    // metadata stays (what hangs below it stays reachable).
    return t->remote || (t->holds == 0 && t->foreign_children == 0);
  };
  const EvictionQueue& q = queue_[static_cast<int>(from)];
  Tensor* victim = ns ? q.PickVictimIn(ns, may_go) : q.PickVictim(may_go);
  if (victim == nullptr) return false;
  if (victim->remote) {
    gdsf_.OnEvict(*victim);
    FreeDramLocked(victim);
    stats_.evictions++;
    stats_.evicted_bytes += victim->bytes;
    return true;
  }
  EvictLocked(victim);
  return true;
}

bool Store::MakeOwnedRoomLocked(core::UniqueLock& lk, Namespace* ns) {
  const CacheClass from = CacheClass::kOwned;
  if (!SsdEnabled()) return DropOneLocked(from, ns);
  // Owned data with an SSD tier: by GDSF, the victim's DRAM copy goes.
  // One that SSD holds already just frees its DRAM; one that SSD does not
  // hold is spilled first (or, when it cannot be, dropped if it is a leaf).
  const uint64_t gen = ssd_gen_;
  auto may_go = [gen](const Tensor* t) {
    if (t->pins != 0 || t->io != Tensor::Io::kNone) return false;
    if (t->on_ssd) return true;
    if (t->spill_failed_gen != gen) return true;
    return t->holds == 0 && t->foreign_children == 0;
  };
  const EvictionQueue& q = queue_[static_cast<int>(from)];
  Tensor* victim = ns ? q.PickVictimIn(ns, may_go) : q.PickVictim(may_go);
  if (victim == nullptr) return false;
  if (victim->on_ssd) {
    FreeDramLocked(victim);
    stats_.evictions++;
    stats_.evicted_bytes += victim->bytes;
    return true;
  }
  if (victim->spill_failed_gen != gen) {
    // Held across the spill, so that its struct is still there to look at
    // below: a spill whose append failed after a removal took the tensor out
    // of the index meanwhile would free it. (Nobody else sees the hold: the
    // tensor is kSpilling whenever the lock is released.)
    victim->holds++;
    const bool spilled = SpillLocked(victim, lk);
    victim->holds--;
    if (spilled) {
      MaybeDestroyLocked(victim);
      return true;
    }
  }
  if (victim->holds == 0 && victim->foreign_children == 0 && victim->in_index && victim->pins == 0 &&
      victim->io == Tensor::Io::kNone && !victim->on_ssd) {
    EvictLocked(victim);
  } else {
    MaybeDestroyLocked(victim);  // removed while its spill ran
  }
  return true;  // something changed (or the lock was released): look again
}

Result<uint64_t> Store::AllocateLocked(uint64_t bytes, CacheClass cls, core::UniqueLock& lk,
                                      bool transient, Namespace* ns) {
  if (ns == nullptr || ns->dram_quota == 0) return ArenaAllocateLocked(bytes, cls, lk, transient);
  // Within the namespace's quota: its own tensors make room first. Both
  // steps may release the lock (spills), so the namespace is looked up again
  // after each, and the quota checked again once the bytes are allocated
  // (another save of it may have taken the room meanwhile).
  const std::string name = ns->info.name;
  const uint64_t id = ns->id;
  auto again = [&]() REQUIRES(mu_) -> Namespace* {
    auto it = namespaces_.find(name);
    return it == namespaces_.end() || it->second->id != id ? nullptr : it->second.get();
  };
  auto gone = [&] { return Aborted("namespace '" + name + "' was dropped while making room in it"); };
  for (;;) {
    if (!NamespaceRoomLocked(ns, bytes, lk)) {
      ns = again();
      if (ns == nullptr) return gone();
      if (ns->dram_quota == 0) return ArenaAllocateLocked(bytes, cls, lk, transient);
      if (AlignUp(bytes, alloc_.alignment()) > ns->dram_quota) {
        return ResourceExhausted("cannot store a tensor of " + Bytes(bytes) + " in namespace '" + name +
                                 "': it is larger than the namespace's DRAM quota of " + Bytes(ns->dram_quota));
      }
      return ResourceExhausted("cannot store a tensor of " + Bytes(bytes) + " in namespace '" + name +
                               "': its DRAM quota of " + Bytes(ns->dram_quota) + " is full of pinned data (used " +
                               Bytes(ns->dram_bytes + ns->dram_pending) + ")");
    }
    PTS_ASSIGN_OR_RETURN(uint64_t off, ArenaAllocateLocked(bytes, cls, lk, transient));
    ns = again();
    if (ns == nullptr) {
      alloc_.Free(off);
      return gone();
    }
    if (ns->dram_quota == 0 || ns->dram_bytes + ns->dram_pending + alloc_.AllocatedSize(off) <= ns->dram_quota) {
      return off;
    }
    alloc_.Free(off);
  }
}

Result<uint64_t> Store::ArenaAllocateLocked(uint64_t bytes, CacheClass cls, core::UniqueLock& lk,
                                           bool transient) {
  const uint64_t capacity = alloc_.capacity();
  auto exhausted = [&](const char* why) REQUIRES(mu_) {
    return ResourceExhausted("cannot store a tensor of " + Bytes(bytes) + ": " + why + " (arena " +
                             Bytes(capacity) + ", used " + Bytes(alloc_.used_bytes()) + ", pinned " +
                             Bytes(stats_.pinned_bytes) + ", largest free extent " +
                             Bytes(alloc_.largest_free_extent()) + ")");
  };
  if (bytes + stats_.pinned_bytes > capacity) return exhausted("the arena is too small or too much of it is pinned");
  if (cls == CacheClass::kReplica && !transient) {
    const uint64_t share = static_cast<uint64_t>(options_.replica_share * static_cast<double>(capacity));
    if (bytes > share) return exhausted("larger than the replica share");
    while (stats_.replica_bytes + bytes > share) {
      if (!DropOneLocked(CacheClass::kReplica)) return exhausted("the replica share is full of pinned replicas");
    }
  }
  for (;;) {
    if (auto off = alloc_.Allocate(bytes)) return *off;
    // Replicas can be fetched again: they go first. Owned data only makes
    // room for owned data.
    if (DropOneLocked(CacheClass::kReplica)) continue;
    // A transient fetch serves a load now and goes right after: it may
    // push owned data out (to SSD, or by GDSF) like a save would.
    if ((cls == CacheClass::kOwned || transient) && MakeOwnedRoomLocked(lk)) continue;
    if (appends_in_flight_ > 0) {
      // Other threads' spills will free DRAM: wait for them.
      io_done_.Wait(lk);
      continue;
    }
    return exhausted("everything evictable is gone");
  }
}

// --------------------------------------------------------------------- save

Result<SaveResult> Store::Save(const std::string& ns_name, std::span<const uint32_t> tokens, const uint8_t* data,
                               uint64_t length, uint64_t first_block, CacheClass cache_class) {
  PTS_ASSIGN_OR_RETURN(PromptKeys k, HashPrompt(ns_name, tokens));
  core::UniqueLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  RekeyLocked(*ns, tokens, &k);
  const uint64_t ns_id = ns->id;
  const uint32_t bt = ns->info.layout.block_tokens;
  const uint64_t bb = ns->info.layout.BytesPerBlock();
  const uint64_t blocks = tokens.size() / bt;
  if (first_block > blocks) {
    return InvalidArgument("save: first_block " + std::to_string(first_block) + " is past the " +
                           std::to_string(blocks) + " whole blocks of the prompt");
  }
  const uint64_t want = (blocks - first_block) * bb;
  if (length != want) {
    return InvalidArgument("save: the KV buffer holds " + std::to_string(length) + " bytes, but " +
                           std::to_string(blocks - first_block) + " blocks of " + std::to_string(bt) +
                           " tokens in layout {" + ns->info.layout.ToString() + "} need " + std::to_string(want));
  }
  if (length > 0 && data == nullptr) return InvalidArgument("save: null KV buffer");
  auto full = tokens.first(blocks * bt);
  const std::vector<ChainKey>& keys = k.keys;
  stats_.saves++;

  Match m;
  std::pair<Namespace*, ChainKey> claim;
  for (;;) {
    m = ns->tree->Longest(full, keys);
    if (m.blocks >= blocks) {
      TouchLocked(ns, m, WallClockNs());  // the prompt came again: a use of what it matched
      stats_.dedup_bytes += blocks * bb;  // the whole prompt was stored already
      return SaveResult{blocks * bt, 0, 0};
    }
    if (m.blocks < first_block) {
      return Aborted("save: blocks before first_block " + std::to_string(first_block) +
                     " are no longer stored; save again from block 0");
    }
    claim = {ns, keys[m.blocks]};
    if (!inflight_.count(claim)) break;
    // Someone is storing the same next block: wait, then look again.
    inflight_done_.Wait(lk);
    PTS_ASSIGN_OR_RETURN(ns, FindLocked(ns_name));
    if (ns->id != ns_id) return Aborted("save: namespace '" + ns_name + "' was replaced during the save");
  }
  inflight_.insert(claim);

  // Hold the matched path: neither eviction for our own allocation nor
  // another client's may take the parent we are about to hang below out of
  // the index (its bytes may move to SSD meanwhile; that is fine).
  std::vector<Tensor*> path_tensors;
  for (const MatchStep& s : m.path) {
    if (path_tensors.empty() || path_tensors.back() != s.node->tensor) path_tensors.push_back(s.node->tensor);
  }
  for (Tensor* t : path_tensors) t->holds++;
  auto finish_claim = [&]() REQUIRES(mu_) {
    for (Tensor* t : path_tensors) {
      t->holds--;
      MaybeDestroyLocked(t);
    }
    inflight_.erase(claim);
    inflight_done_.NotifyAll();
  };

  uint64_t new_blocks = blocks - m.blocks;
  // The namespace's DRAM quota bounds what one save can add: the blocks past
  // what fits in it are not stored (the prefix that fits is), as a load of
  // more than the arena holds is not an error either.
  bool cut = false;
  if (ns->dram_quota != 0 && new_blocks > BlocksThatFit(ns->dram_quota, bb)) {
    new_blocks = BlocksThatFit(ns->dram_quota, bb);
    cut = true;
  }
  Result<uint64_t> off = new_blocks == 0 ? Result<uint64_t>(uint64_t{0})
                                         : AllocateLocked(new_blocks * bb, cache_class, lk, false, ns);
  if (!off.ok() && off.status().code() == Code::kResourceExhausted && new_blocks > 1) {
    // Its own pinned data leaves room for fewer blocks: store those.
    Result<Namespace*> now = FindLocked(ns_name);
    if (now.ok() && (*now)->id == ns_id && (*now)->dram_quota != 0) {
      ns = *now;
      const uint64_t used = ns->dram_bytes + ns->dram_pending;
      const uint64_t fit = used < ns->dram_quota ? BlocksThatFit(ns->dram_quota - used, bb) : 0;
      if (fit > 0 && fit < new_blocks) {
        new_blocks = fit;
        cut = true;
        off = AllocateLocked(new_blocks * bb, cache_class, lk, false, ns);
      }
    }
  }
  if (!off.ok() && off.status().code() == Code::kResourceExhausted) {
    // Its quota has no room, and none can be made: what stands in the way is
    // this save's own prefix (held while it hangs below it) or its pinned
    // data. Only the latter is the error a full arena gives; otherwise
    // nothing is stored, as when not one block fits.
    Result<Namespace*> now = FindLocked(ns_name);
    if (now.ok() && (*now)->id == ns_id && (*now)->dram_quota != 0 &&
        (*now)->dram_bytes + (*now)->dram_pending + AlignUp(new_blocks * bb, alloc_.alignment()) >
            (*now)->dram_quota &&
        !NamespaceHasPinnedLocked(**now)) {
      ns = *now;
      new_blocks = 0;
      off = uint64_t{0};
    }
  }
  if (!off.ok()) {
    finish_claim();
    return off.status();
  }
  if (cut || new_blocks == 0) {
    Result<Namespace*> now = FindLocked(ns_name);
    if (now.ok() && (*now)->id == ns_id) (*now)->cut_saves++;
  }
  if (new_blocks == 0) {
    // Not one block fits in the namespace's quota: nothing is stored.
    finish_claim();
    return SaveResult{m.blocks * bt, 0, 0};
  }
  const uint64_t bytes = new_blocks * bb;
  const uint64_t end_blocks = m.blocks + new_blocks;
  auto owned = std::make_unique<Tensor>();
  Tensor* t = owned.get();
  t->id = TensorId::Make(NodeId{options_.node_id}, next_tensor_seq_++);
  t->cache_class = cache_class;
  t->ns = ns;
  t->arena_offset = *off;
  t->bytes = bytes;
  t->allocated = alloc_.AllocatedSize(*off);
  t->start_token = m.blocks * bt;
  t->tokens = new_blocks * bt;
  t->in_dram = true;
  t->cost = Gdsf::RecomputeCost(t->start_token, t->tokens);
  (cache_class == CacheClass::kOwned ? stats_.owned_bytes : stats_.replica_bytes) += t->allocated;
  tensors_.emplace(t->id.value, std::move(owned));
  // Counted against the quota while it is copied (ChargeLocked takes over
  // once it is in the index).
  AddPendingLocked(ns_name, ns_id, static_cast<int64_t>(t->allocated));

  // The copy runs without the lock: the region is ours, the path is pinned.
  lk.Unlock();
  core::CopyBytes(arena_->data() + t->arena_offset, data + (m.blocks - first_block) * bb, bytes, bytes);
  lk.Lock();

  AddPendingLocked(ns_name, ns_id, -static_cast<int64_t>(t->allocated));
  finish_claim();
  Result<Namespace*> again = FindLocked(ns_name);
  Match m2;
  if (again.ok() && (*again)->id == ns_id) m2 = ns->tree->Longest(full, keys);
  if (!again.ok() || (*again)->id != ns_id || m2.blocks != m.blocks) {
    // A removal of the parent (or of the namespace) won the race: the save is
    // ordered before it, so its bytes are gone with it.
    MaybeDestroyLocked(t);
    return SaveResult{m2.blocks * bt, 0, 0};
  }
  const uint64_t now = WallClockNs();
  RadixNode* node = ns->tree->Insert(m2, full.first(end_blocks * bt), std::span<const ChainKey>(keys).first(end_blocks), t,
                                     Times{now, now, now});
  if (node == nullptr) {
    // A chain-key collision with an increment of other tokens: there is
    // nowhere to file this one. A miss, never a wrong answer: drop it.
    ns->info.prefixes = ns->tree->node_count();
    MaybeDestroyLocked(t);
    return SaveResult{m2.blocks * bt, 0, 0};
  }
  t->in_index = true;
  ChargeLocked(t);
  SyncTensorEventsLocked(t);
  // The blocks it matched were used (the prompt came again): its ancestors,
  // after the split that made room for it, not the other half of a split.
  if (RaiseAncestorsAtimeLocked(node, now)) {
    changes_.Append(ChangeKind::kTimes, ns->info.name, node->parent->key, node->parent->parent->key);
  }
  t->priority = gdsf_.Priority(*t);
  queue_[static_cast<int>(cache_class)].Add(t);
  PropagateLocked(node, t->priority);
  ns->info.bytes += bytes;
  ns->info.prefixes = ns->tree->node_count();
  ns->info.times.Merge(node->times);
  stats_.saved_bytes += bytes;
  // Blocks of the prompt that were stored already, whether or not the client
  // copied them (it skips them when it looked them up first).
  stats_.dedup_bytes += m.blocks * bb;
  return SaveResult{m.blocks * bt, new_blocks * bt, bytes};
}

void Store::PropagateLocked(RadixNode* node, double p) {
  for (RadixNode* a = node->parent; a != nullptr && a->tensor != nullptr; a = a->parent) {
    Tensor* t = a->tensor;
    if (t->priority < p) SetPriorityLocked(t, p);
  }
}

// ----------------------------------------------------------- lookup and pin

std::vector<Extent> Store::ExtentsLocked(const Match& m, uint64_t block_bytes, bool with_arena) const {
  std::vector<Extent> out;
  for (const MatchStep& s : m.path) {
    const RadixNode* n = s.node;
    Extent x{n->tensor->id, n->offset, s.blocks * block_bytes, with_arena ? n->tensor->arena_offset + n->offset : 0};
    if (!out.empty() && out.back().tensor == x.tensor && out.back().offset + out.back().length == x.offset) {
      out.back().length += x.length;  // consecutive slices of one tensor: one extent
    } else {
      out.push_back(x);
    }
  }
  return out;
}

void Store::WatchTreeLocked(Namespace* ns) {
  ns->tree->SetOnChange([this, name = ns->info.name](ChangeKind kind, const ChainKey& key, const ChainKey& parent) {
    changes_.Append(kind, name, key, parent);
  });
}

void Store::TouchLocked(Namespace* ns, const Match& m, uint64_t now) {
  bool used = false;
  for (const MatchStep& s : m.path) {
    RadixNode* n = s.node;
    if (n->times.atime_ns >= now) continue;
    n->times.atime_ns = now;
    NoteTimesChangedLocked(n->tensor);
    used = true;
  }
  if (used) {
    const RadixNode* last = m.path.back().node;
    changes_.Append(ChangeKind::kTimes, ns->info.name, last->key, last->parent->key);
  }
  if (!m.path.empty()) ns->info.times.atime_ns = std::max(ns->info.times.atime_ns, now);
}

bool Store::RaiseAncestorsAtimeLocked(RadixNode* n, uint64_t atime_ns) {
  bool raised = false;
  for (RadixNode* a = n->parent; a != nullptr && a->tensor != nullptr; a = a->parent) {
    if (a->times.atime_ns >= atime_ns) continue;
    a->times.atime_ns = atime_ns;
    NoteTimesChangedLocked(a->tensor);
    raised = true;
  }
  return raised;
}

void Store::NoteTimesChangedLocked(Tensor* t) {
  if (t->on_ssd || t->stub_on_ssd) times_dirty_.insert(t->id.value);
}

Times Store::TensorTimesLocked(const Tensor& t) const {
  Times out;
  for (const RadixNode* n : t.nodes) out.Merge(n->times);
  return out;
}

void Store::HitLocked(const Match& m) {
  if (!m.path.empty()) TouchLocked(m.path.front().node->tensor->ns, m, WallClockNs());
  std::vector<Tensor*> path;
  for (const MatchStep& s : m.path) {
    s.node->hits++;
    if (path.empty() || path.back() != s.node->tensor) path.push_back(s.node->tensor);
  }
  double running = 0;
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    Tensor* t = *it;
    t->hits++;
    running = std::max(running, std::max(t->priority, gdsf_.Priority(*t)));
    SetPriorityLocked(t, running);
  }
}

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

Result<PrefixResult> Store::Lookup(const std::string& ns_name, std::span<const uint32_t> tokens) {
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  const uint32_t bt = ns->info.layout.block_tokens;
  Match m = WalkLocked(*ns, tokens);
  TouchLocked(ns, m, WallClockNs());
  stats_.lookups++;
  CountRequestLocked(tokens.size() / bt * bt, m.blocks * bt);
  PrefixResult r;
  r.matched_tokens = m.blocks * bt;
  r.extents = ExtentsLocked(m, ns->info.layout.BytesPerBlock(), false);
  return r;
}

Result<PrefixResult> Store::Pin(const std::string& ns_name, std::span<const uint32_t> tokens, uint64_t session,
                                uint64_t lease_ms) {
  return PinImpl(ns_name, tokens, session, lease_ms, 0, /*fetch_remote=*/true, /*count=*/true);
}

std::vector<Tensor*> Store::PinDramPathLocked(const Match& m) {
  std::vector<Tensor*> present;
  // (Transient fetched tensors are in no eviction queue: they stay.)
  for (const MatchStep& st : m.path) {
    Tensor* t = st.node->tensor;
    if (t->in_dram && !t->transient && (present.empty() || present.back() != t)) present.push_back(t);
  }
  for (Tensor* t : present) PinLocked(t);
  return present;
}

Result<PrefixResult> Store::PinImpl(const std::string& ns_name, std::span<const uint32_t> tokens, uint64_t session,
                                    uint64_t lease_ms, uint64_t from_block, bool fetch_remote, bool count) {
  core::UniqueLock lk(mu_);
  Namespace* ns;
  Match m;
  // Whether step `st` (its blocks start at `first`) must be in DRAM.
  auto needed = [&](uint64_t first, const MatchStep& st) { return first + st.blocks > from_block; };
  // Tensors of the match that only SSD holds are read back first, remote
  // ones fetched from their owners, then the match is taken again (anything
  // may have changed while the lock was released). A few rounds of this
  // pin's own reads at most: under heavy DRAM pressure, or when an owner
  // does not answer, the pin settles for the part of the prefix that is in
  // DRAM. Waiting for another's I/O on a tensor (a fill, a fetch, a
  // compaction's copy) costs no round.
  constexpr int kFillRounds = 4;
  bool filled = false, fetched = false;
  std::vector<Tensor*> tried;      // fetched (or tried) once in this pin: not again (never dereferenced)
  // Fetched for this pin alone, each with a hold (so the struct stays while
  // the lock is released in later rounds): on every way out, the holds go,
  // and so do the bytes of those the pin did not take after all.
  std::vector<Tensor*> transient;
  // Declared after `lk`, so destroyed before it: runs with mu_ held. (The
  // analysis does not look into destructors; AssertHeld says what holds.)
  struct TransientGuard {
    Store* store;
    std::vector<Tensor*>* tensors;
    ~TransientGuard() {
      store->mu_.AssertHeld();
      store->ReleaseTransientsLocked(*tensors);
    }
  } guard{this, &transient};
  for (int round = 0;;) {
    PTS_ASSIGN_OR_RETURN(ns, FindLocked(ns_name));
    m = WalkLocked(*ns, tokens);
    std::vector<Tensor*> from_ssd, from_peers;
    bool busy = false, stuck = false;
    uint64_t first = 0;
    for (const MatchStep& st : m.path) {
      Tensor* t = st.node->tensor;
      const bool need = needed(first, st);
      first += st.blocks;
      if (!need || t->in_dram) continue;
      if (t->io != Tensor::Io::kNone) {
        busy = true;
      } else if (t->on_ssd && SsdEnabled()) {
        if (from_ssd.empty() || from_ssd.back() != t) from_ssd.push_back(t);
      } else if (t->remote && fetch_remote && fetcher_ != nullptr &&
                 std::find(tried.begin(), tried.end(), t) == tried.end()) {
        if (from_peers.empty() || from_peers.back() != t) from_peers.push_back(t);
      } else {
        stuck = true;  // nothing brings it back: the pin ends before it
        break;
      }
    }
    if (!busy && from_ssd.empty() && from_peers.empty()) {
      if (!stuck) break;
    } else if (busy && from_ssd.empty() && from_peers.empty()) {
      // Someone else is reading or moving it: wait until that I/O ends (it
      // always does, a fetch at its deadline), then it is in DRAM or back
      // on SSD. Every I/O that ends wakes us; counting those as rounds made
      // a load that waited on another load's fill of its prefix, while
      // other tensors spilled, give up and miss a stored prefix. What the
      // path has in DRAM stays pinned while we wait: unpinned, a tensor
      // this pin had just filled was evicted by the saves meanwhile, filled
      // again in the next round, evicted in the next wait, ... until the
      // rounds ran out and a stored prefix missed (issue 15's lost hit).
      // Waiting with pins cannot deadlock: an allocation never waits for
      // a pin to go (it fails, and that fill's waiters wake).
      std::vector<Tensor*> held = PinDramPathLocked(m);
      io_done_.Wait(lk);
      for (Tensor* t : held) UnpinLocked(t);
      continue;
    }
    if (round >= kFillRounds || (from_ssd.empty() && from_peers.empty())) {
      // Serve the prefix up to the first needed tensor that is not in DRAM.
      Match cut;
      uint64_t at = 0;
      for (const MatchStep& st : m.path) {
        if (needed(at, st) && !st.node->tensor->in_dram) break;
        at += st.blocks;
        cut.path.push_back(st);
        cut.blocks += st.blocks;
      }
      m = std::move(cut);
      break;
    }
    // Keep the DRAM part of the path while the rest is read.
    std::vector<Tensor*> present = PinDramPathLocked(m);
    // The structs of the remote ones outlive every unlock below (the SSD
    // fill first, then the fetch): a removal from another node meanwhile
    // takes them out of the index (the fetch then skips them) but must not
    // free them under us.
    for (Tensor* t : from_peers) t->holds++;
    if (!from_ssd.empty()) {
      FillLocked(from_ssd, lk);
      filled = true;
    }
    if (!from_peers.empty()) {
      tried.insert(tried.end(), from_peers.begin(), from_peers.end());
      FetchLocked(*ns, from_peers, lk, &transient);
      fetched = true;
    }
    for (Tensor* t : from_peers) {
      t->holds--;
      MaybeDestroyLocked(t);
    }
    for (Tensor* t : present) UnpinLocked(t);
    ++round;
  }
  if (filled) stats_.ssd_hits++;
  if (fetched) stats_.remote_hits++;
  if (count && !filled && !fetched && m.blocks > from_block) stats_.dram_hits++;
  const uint32_t bt = ns->info.layout.block_tokens;
  PrefixResult r;
  if (m.blocks > from_block && leases_.size() >= options_.max_leases) {
    return ResourceExhausted("too many active leases (" + std::to_string(leases_.size()) +
                             "): release pins or raise max_leases");
  }
  if (count) CountRequestLocked(tokens.size() / bt * bt, m.blocks * bt);
  if (m.blocks <= from_block) return r;
  // A hit also when a peer's fetch pins it (count == false): data other
  // nodes load is valuable to GDSF on its owner too.
  HitLocked(m);
  Lease lease;
  lease.session = session;
  // Saturating: a lease too long for the clock never expires (and does not
  // wrap around into the past).
  const uint64_t ms = lease_ms ? lease_ms : options_.default_lease_ms;
  const Clock::time_point now = Clock::now();
  const auto room = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::time_point::max() - now).count();
  lease.expiry = ms >= static_cast<uint64_t>(room) ? Clock::time_point::max() : now + std::chrono::milliseconds(ms);
  uint64_t at = 0;
  for (const MatchStep& s : m.path) {
    const bool need = needed(at, s);
    at += s.blocks;
    if (!need) continue;
    if (lease.tensors.empty() || lease.tensors.back() != s.node->tensor) lease.tensors.push_back(s.node->tensor);
  }
  for (Tensor* t : lease.tensors) PinLocked(t);
  r.lease_id = next_lease_++;
  r.matched_tokens = m.blocks * bt;
  const uint64_t bb = ns->info.layout.BytesPerBlock();
  if (from_block == 0) {
    r.extents = ExtentsLocked(m, bb, true);
  } else {
    // Only the extents of blocks [from_block, ...).
    Match tail;
    uint64_t skip = from_block;
    for (MatchStep s : m.path) {
      if (skip >= s.blocks) {
        skip -= s.blocks;
        continue;
      }
      std::vector<Extent> one = ExtentsLocked(Match{{s}, s.blocks, false}, bb, true);
      Extent x = one.front();
      x.offset += skip * bb;
      x.arena_offset += skip * bb;
      x.length -= skip * bb;
      skip = 0;
      if (!r.extents.empty() && r.extents.back().tensor == x.tensor &&
          r.extents.back().offset + r.extents.back().length == x.offset) {
        r.extents.back().length += x.length;
      } else {
        r.extents.push_back(x);
      }
    }
  }
  leases_.emplace(r.lease_id, std::move(lease));
  return r;
}

Status Store::Release(uint64_t lease_id, uint64_t session) {
  core::MutexLock lk(mu_);
  auto it = leases_.find(lease_id);
  if (it == leases_.end() || it->second.session != session) {
    return NotFound("lease " + std::to_string(lease_id) + " is not held by this client (released or expired)");
  }
  for (Tensor* t : it->second.tensors) UnpinLocked(t);
  leases_.erase(it);
  return Status::OK();
}

void Store::ReleaseSession(uint64_t session) {
  core::MutexLock lk(mu_);
  size_t n = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.session == session) {
      for (Tensor* t : it->second.tensors) UnpinLocked(t);
      it = leases_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  if (n) PTS_INFO("store", "released " << n << " lease(s) of session " << session << " that ended");
}

size_t Store::ExpireLeases(Clock::time_point now) {
  core::MutexLock lk(mu_);
  size_t n = 0;
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.expiry <= now) {
      for (Tensor* t : it->second.tensors) UnpinLocked(t);
      it = leases_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  stats_.expired_leases += n;
  if (n) PTS_WARN("store", n << " lease(s) expired before their client released them");
  return n;
}

Result<uint64_t> Store::LoadCopy(const std::string& ns, std::span<const uint32_t> tokens, uint8_t* dst,
                                 uint64_t capacity) {
  Layout layout;
  {
    core::MutexLock lk(mu_);
    PTS_ASSIGN_OR_RETURN(Namespace * n, FindLocked(ns));
    layout = n->info.layout;
  }
  // The pin lives only as long as this copy: it must not expire under it
  // however short the configured lease is, or the bytes could be freed and
  // reused mid-copy.
  PTS_ASSIGN_OR_RETURN(PrefixResult pin, Pin(ns, tokens, kInternalSession, kNeverExpires));
  if (pin.matched_tokens == 0) return uint64_t{0};
  const uint64_t bpt = layout.BytesPerToken();
  const uint64_t bt = layout.block_tokens;
  uint64_t pinned_bytes = 0;
  for (const Extent& x : pin.extents) pinned_bytes += x.length;
  if (pinned_bytes != pin.matched_tokens * bpt) {
    // The namespace was dropped and made again with another layout between
    // the two steps: the pinned bytes are not in the layout read above.
    Release(pin.lease_id, kInternalSession).IgnoreError();
    return Aborted("load: namespace '" + ns + "' was replaced during the load");
  }
  pin.matched_tokens = std::min(pin.matched_tokens, capacity / bpt / bt * bt);
  const uint64_t total = pin.matched_tokens * bpt;
  uint64_t left = total;
  uint8_t* out = dst;
  for (const Extent& x : pin.extents) {
    if (left == 0) break;
    uint64_t n = std::min(left, x.length);
    core::CopyBytes(out, arena_->data() + x.arena_offset, n, total);
    out += n;
    left -= n;
  }
  Release(pin.lease_id, kInternalSession).IgnoreError();
  return pin.matched_tokens;
}

// ------------------------------------------------------------------ removal

Result<RemoveResult> Store::Remove(const std::string& ns_name, std::span<const uint32_t> tokens,
                                   RemovalPoint* point) {
  core::UniqueLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  const uint32_t bt = ns->info.layout.block_tokens;
  const uint64_t whole = tokens.size() / bt * bt;
  if (whole == 0) return InvalidArgument("remove: the prefix has no whole block");
  Match m = WalkLocked(*ns, tokens);
  if (m.blocks * bt < whole) {
    return NotFound("remove: the prefix of " + std::to_string(whole) + " tokens is not stored in '" + ns_name +
                    "' (" + std::to_string(m.blocks * bt) + " tokens are)");
  }
  if (point != nullptr) *point = RemovalPointLocked(*ns, m.path.back().node);
  RemoveResult r;
  RemoveSubtreeLocked(ns, m.path.back().node, &r);
  return FinishRemovalLocked(r, lk);
}

Result<RemoveResult> Store::FinishRemovalLocked(const RemoveResult& r, core::UniqueLock& lk) {
  // A removal is durable when it returns: the SSD records it killed are
  // marked dead on disk, so a restart does not bring them back.
  std::vector<std::future<Status>> writes = TakeRewritesLocked();
  lk.Unlock(mu_);
  for (auto& w : writes) {
    Status s = w.get();
    if (!s.ok()) PTS_WARN("store", "remove: marking an SSD record dead: " << s.ToString());
  }
  return r;
}

Result<RemoveResult> Store::RemoveByKey(const std::string& ns_name, const ChainKey& key, RemovalPoint* point) {
  core::UniqueLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  RadixNode* node = ns->tree->FindByKey(key);
  if (node == nullptr) return NotFound("no increment named " + key.ToHex() + " in namespace '" + ns_name + "'");
  if (point != nullptr) *point = RemovalPointLocked(*ns, node);
  RemoveResult r;
  RemoveSubtreeLocked(ns, node, &r);
  return FinishRemovalLocked(r, lk);
}

// ---------------------------------------------------------------- listing

Result<std::vector<PrefixNodeInfo>> Store::ListTree(const std::string& ns_name, const ChainKey& parent,
                                                    bool recursive) const {
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  const RadixNode* start = ns->tree->root();
  if (parent != ChainKey{}) {
    start = ns->tree->FindByKey(parent);
    if (start == nullptr) {
      return NotFound("no increment named " + parent.ToHex() + " in namespace '" + ns_name + "'");
    }
  }
  const uint32_t bt = ns->info.layout.block_tokens;
  // All of it under mu_ (a consistent answer), so kept lean: no allocation
  // per node (one stack, children pushed in reverse key order in place).
  std::vector<PrefixNodeInfo> out;
  if (recursive && start == ns->tree->root()) out.reserve(ns->tree->node_count());  // a subtree: as it grows
  std::vector<const RadixNode*> stack;
  auto push_children = [&stack](const RadixNode* n) {
    const size_t first = stack.size();
    for (const auto& [k, child] : n->children) stack.push_back(child.get());
    std::sort(stack.begin() + first, stack.end(), [](auto* a, auto* b) { return b->key < a->key; });
  };
  push_children(start);
  while (!stack.empty()) {
    const RadixNode* n = stack.back();
    stack.pop_back();
    out.push_back(NodeInfoLocked(n, bt));
    if (recursive) push_children(n);
  }
  return out;
}

PrefixNodeInfo Store::NodeInfoLocked(const RadixNode* n, uint32_t bt) const {
  PrefixNodeInfo info;
  info.key = n->key;
  info.parent = n->parent->tensor ? n->parent->key : ChainKey{};
  info.start_token = n->start_block * bt;
  info.tokens = n->tokens.size();
  info.bytes = n->length;
  info.hits = n->hits;
  info.tensor = n->tensor->id;
  info.cache_class = n->tensor->cache_class;
  info.children = static_cast<uint32_t>(n->children.size());
  info.pins = n->tensor->pins;
  info.tier = static_cast<uint8_t>((n->tensor->in_dram ? kTierDram : 0) | (n->tensor->on_ssd ? kTierSsd : 0) |
                                   (n->tensor->remote ? kTierRemote : 0));
  info.times = n->times;
  return info;
}

Result<IncrementResult> Store::Increment(const std::string& ns_name, const ChainKey& key, bool pin,
                                         bool whole_prefix, uint64_t session, uint64_t lease_ms) {
  IncrementResult r;
  std::vector<uint32_t> prefix;  // every token up to the increment's end
  {
    core::MutexLock lk(mu_);
    PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
    const RadixNode* n = ns->tree->FindByKey(key);
    if (n == nullptr) return NotFound("no increment named " + key.ToHex() + " in namespace '" + ns_name + "'");
    r.node = NodeInfoLocked(n, ns->info.layout.block_tokens);
    r.tokens = n->tokens;
    if (!pin) return r;
    std::vector<const RadixNode*> path;
    for (const RadixNode* a = n; a->tensor != nullptr; a = a->parent) path.push_back(a);
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      prefix.insert(prefix.end(), (*it)->tokens.begin(), (*it)->tokens.end());
    }
  }
  // Pin takes the mutex again and reads SSD-only parts back.
  PTS_ASSIGN_OR_RETURN(PrefixResult p, Pin(ns_name, prefix, session, lease_ms));
  if (p.matched_tokens < prefix.size()) {
    if (p.lease_id) Release(p.lease_id, session).IgnoreError();
    core::MutexLock lk(mu_);
    Result<Namespace*> ns = FindLocked(ns_name);
    if (!ns.ok() || (*ns)->tree->FindByKey(key) == nullptr) {
      return NotFound("increment " + key.ToHex() + " of namespace '" + ns_name + "' was removed");
    }
    return ResourceExhausted("the prefix of increment " + key.ToHex() + " (" + std::to_string(prefix.size()) +
                             " tokens) does not fit in the arena at once");
  }
  r.lease_id = p.lease_id;
  r.extents = std::move(p.extents);
  if (!whole_prefix) {
    // Only the increment's own bytes: the last node.bytes of the prefix.
    uint64_t skip = 0;
    for (const Extent& x : r.extents) skip += x.length;
    skip -= r.node.bytes;
    std::vector<Extent> own;
    for (Extent x : r.extents) {
      if (skip >= x.length) {
        skip -= x.length;
        continue;
      }
      x.offset += skip;
      x.arena_offset += skip;
      x.length -= skip;
      skip = 0;
      own.push_back(x);
    }
    r.extents = std::move(own);
  }
  return r;
}

Result<PrefixNodeInfo> Store::SetTimes(const std::string& ns_name, const ChainKey& key, uint64_t atime_ns,
                                       uint64_t mtime_ns) {
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  RadixNode* n = ns->tree->FindByKey(key);
  if (n == nullptr) return NotFound("no increment named " + key.ToHex() + " in namespace '" + ns_name + "'");
  const uint64_t now = WallClockNs();
  if (atime_ns != 0) {
    n->times.atime_ns = atime_ns;
    RaiseAncestorsAtimeLocked(n, atime_ns);  // a use of it is a use of its prefix
  }
  if (mtime_ns != 0) n->times.mtime_ns = mtime_ns;
  n->times.ctime_ns = now;
  NoteTimesChangedLocked(n->tensor);
  ns->info.times.Merge(n->times);
  changes_.Append(ChangeKind::kTimes, ns_name, key, n->parent->key);
  return NodeInfoLocked(n, ns->info.layout.block_tokens);
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

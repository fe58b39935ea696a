// The node store's part in the cluster: remote tensors (other nodes'
// increments known by their tokens and owner), fetching their bytes through
// the RemoteFetcher, serving this node's bytes to peers, and removals that
// arrive from other nodes.
#include <algorithm>
#include <map>

#include "core/logging.h"
#include "storage/cache/store.h"
#include "storage/cache/tensor_refs.h"

namespace ptstore::storage {

void Store::SetFetcher(RemoteFetcher* fetcher) {
  core::MutexLock lk(mu_);
  fetcher_ = fetcher;
}

Result<NamespaceDef> Store::GetNamespaceDef(const std::string& ns_name) const {
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  return NamespaceDef{ns->info, ns->salt};
}

std::vector<uint32_t> Store::PrefixTokensLocked(const RadixNode* n) const {
  std::vector<const RadixNode*> path;
  for (const RadixNode* a = n; a != nullptr && a->tensor != nullptr; a = a->parent) path.push_back(a);
  std::vector<uint32_t> tokens;
  for (auto it = path.rbegin(); it != path.rend(); ++it) {
    tokens.insert(tokens.end(), (*it)->tokens.begin(), (*it)->tokens.end());
  }
  return tokens;
}

Result<Ownership> Store::Resolve(const std::string& ns_name, std::span<const uint32_t> tokens, bool per_increment) {
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  const Match m = WalkLocked(*ns, tokens);
  Ownership o;
  o.blocks = m.blocks;
  o.continues = m.path.empty() || m.partial_last || !m.path.back().node->children.empty();
  uint64_t end = 0;
  for (const MatchStep& st : m.path) {
    end += st.blocks;
    const Tensor* t = st.node->tensor;
    const uint32_t owner = t->remote() ? t->owner() : options_.node_id;
    const bool held = t->in_dram() || t->on_ssd();
    if (!per_increment && !o.ranges.empty() && o.ranges.back().owner == owner) {
      o.ranges.back().end_block = end;
      o.held.back() = o.held.back() && held;
    } else {
      o.ranges.push_back(OwnedRange{end, owner});
      o.held.push_back(held);
    }
  }
  return o;
}

Result<uint64_t> Store::InsertRemote(const std::string& ns_name, std::span<const uint32_t> tokens,
                                     std::span<const OwnedRange> ranges) {
  PTS_ASSIGN_OR_RETURN(PromptKeys k, HashPrompt(ns_name, tokens));
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  RekeyLocked(*ns, tokens, &k);
  const uint32_t bt = ns->info.layout.block_tokens;
  const uint64_t bb = ns->info.layout.BytesPerBlock();
  const std::vector<ChainKey>& keys = k.keys;
  const uint64_t blocks = keys.size();
  auto full = tokens.first(blocks * bt);
  uint64_t start = 0;
  for (const OwnedRange& r : ranges) {  // all checked before any is filed
    if (r.end_block <= start || r.end_block > blocks) {
      return InvalidArgument("remote ranges must grow within the prompt's " + std::to_string(blocks) +
                             " blocks: a range ends at block " + std::to_string(r.end_block) + " after " +
                             std::to_string(start));
    }
    start = r.end_block;
  }
  Match m = ns->tree->Longest(full, keys);
  start = 0;
  for (const OwnedRange& r : ranges) {
    const uint64_t range_start = start;
    start = r.end_block;
    if (r.end_block <= m.blocks) continue;   // held here already
    if (m.blocks < range_start) break;       // a gap: nothing below it is reachable
    if (r.owner == options_.node_id) break;  // said to be ours, but we do not hold it
    auto owned = std::make_unique<Tensor>();
    Tensor* t = owned.get();
    t->id = TensorId::Make(NodeId{r.owner}, next_tensor_seq_++);
    t->cache_class = CacheClass::kReplica;
    t->BecomeRemote(r.owner);  // a placeholder: its bytes are on their owner
    t->ns = ns;
    t->start_token = m.blocks * bt;
    t->tokens = (r.end_block - m.blocks) * bt;
    t->bytes = (r.end_block - m.blocks) * bb;
    t->cost = Gdsf::RecomputeCost(t->start_token, t->tokens);
    const uint64_t now = WallClockNs();
    RadixNode* node = ns->tree->Insert(m, full.first(r.end_block * bt), std::span(keys).first(r.end_block), t,
                                       Times{now, now, now});
    if (node == nullptr) break;  // a chain-key collision: a miss
    t->EnterIndex();
    tensors_.emplace(t->id.value, std::move(owned));
    stats_.remote_tensors++;
    m = ns->tree->Longest(full, keys);
  }
  ns->info.prefixes = ns->tree->node_count();
  return m.blocks;
}

Result<PrefixResult> Store::PinHeld(const std::string& ns, std::span<const uint32_t> tokens, uint64_t from_block,
                                    uint64_t session, uint64_t lease_ms) {
  PTS_ASSIGN_OR_RETURN(PrefixResult r,
                       PinImpl(ns, tokens, session, lease_ms, from_block, /*fetch_remote=*/false, /*count=*/false));
  uint64_t bytes = 0;
  for (const Extent& x : r.extents) bytes += x.length;
  core::MutexLock lk(mu_);
  stats_.peer_served_bytes += bytes;
  return r;
}

Result<RemoveResult> Store::RemoveFrom(const std::string& ns_name, std::span<const uint32_t> tokens,
                                       uint64_t from_block) {
  PTS_ASSIGN_OR_RETURN(PromptKeys k, HashPrompt(ns_name, tokens));
  core::UniqueLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  const Match m = MatchLocked(*ns, tokens, &k);
  if (m.blocks <= from_block) return RemoveResult{};
  uint64_t at = 0;
  for (const MatchStep& st : m.path) {
    RadixNode* n = st.node;
    const uint64_t n_blocks = ns->tree->blocks_of(n);
    if (at + n_blocks > from_block) {
      // `n` holds block from_block: cut it there (its upper part stays).
      if (const uint64_t inside = from_block - at; inside > 0) {
        ns->tree->Split(n, inside, k.keys[from_block - 1], WallClockNs());
      }
      RemoveResult r;
      RemoveSubtreeLocked(ns, n, &r);
      return FinishRemovalLocked(r, lk);
    }
    at += n_blocks;
  }
  return RemoveResult{};
}

RemovalPoint Store::RemovalPointLocked(const Namespace& ns, const RadixNode* n) const {
  RemovalPoint p;
  p.ns = ns.info.name;
  p.tokens = PrefixTokensLocked(n);
  p.from_block = n->start_block;
  p.tokens.resize((n->start_block + 1) * ns.info.layout.block_tokens);
  return p;
}

Result<bool> Store::Holds(const std::string& ns_name, std::span<const uint32_t> tokens, uint64_t from_block) {
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  const Match m = WalkLocked(*ns, tokens);
  if (m.blocks != tokens.size() / ns->info.layout.block_tokens || m.blocks <= from_block) return false;
  uint64_t at = 0;
  for (const MatchStep& st : m.path) {
    const Tensor* t = st.node->tensor;
    const bool needed = at + st.blocks > from_block;
    at += st.blocks;
    if (needed && !t->in_dram() && !t->on_ssd()) return false;
  }
  return true;
}

void Store::KeepHeadLocked(const TensorHold& t, uint64_t blocks, std::span<const ChainKey> keys) {
  if (t->nodes.empty() || blocks == 0) return;
  const uint64_t end = t->nodes.front()->start_block + blocks;
  if (keys.size() < end) return;
  RadixTree& tree = *t->ns->tree;
  for (RadixNode* n : std::vector<RadixNode*>(t->nodes)) {
    const uint64_t n_blocks = tree.blocks_of(n);
    if (n->start_block + n_blocks <= end) continue;
    // `n` holds block `end`: cut it there (its upper part stays), and the
    // rest of the chain, below it, goes with it.
    if (n->start_block < end) tree.Split(n, end - n->start_block, keys[end - 1], WallClockNs());
    RemoveResult ignored;  // the caller's hold keeps `t` for it
    RemoveSubtreeLocked(t->ns, n, &ignored);
    return;
  }
}

Result<HeldIncrement> Store::PrefixOf(const std::string& ns_name, const ChainKey& key) const {
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  const RadixNode* n = ns->tree->FindByKey(key);
  if (n == nullptr) return NotFound("no increment named " + key.ToHex() + " in namespace '" + ns_name + "'");
  return HeldIncrement{ns_name, PrefixTokensLocked(n), n->start_block};
}

void Store::NoteLostLocked(Tensor* t) {
  if (!options_.track_lost || t->remote() || t->cache_class != CacheClass::kOwned || t->nodes.empty()) return;
  constexpr size_t kMaxLost = 100000;  // nobody drains them: the cluster is gone
  if (lost_.size() >= kMaxLost) return;
  lost_.push_back(RemovalPointLocked(*t->ns, t->nodes.front()));
}

std::vector<RemovalPoint> Store::TakeLostIncrements() {
  core::MutexLock lk(mu_);
  return std::exchange(lost_, {});
}

std::vector<HeldIncrement> Store::ListOwned() const {
  core::MutexLock lk(mu_);
  std::vector<HeldIncrement> out;
  for (const auto& [id, t] : tensors_) {
    if (t->remote() || t->cache_class != CacheClass::kOwned || !t->in_index() || t->nodes.empty()) continue;
    out.push_back(HeldIncrement{t->ns->info.name, PrefixTokensLocked(t->nodes.back()),
                                t->nodes.front()->start_block});
  }
  return out;
}

uint64_t Store::AdoptReplicasOf(uint32_t node) {
  if (node == options_.node_id) return 0;
  core::MutexLock lk(mu_);
  uint64_t adopted = 0;
  for (auto& [id, t] : tensors_) {
    // Kept replicas only: a transient one is freed after its load.
    if (t->kind() != Tensor::Kind::kRemote || t->owner() != node || !t->in_index() || !t->in_dram()) continue;
    EvictionQueue& replicas = queue_[static_cast<int>(CacheClass::kReplica)];
    if (replicas.Contains(t.get())) replicas.Remove(t.get());
    stats_.replica_bytes -= t->allocated;
    stats_.remote_tensors--;
    t->Adopt(options_.node_id);
    t->cache_class = CacheClass::kOwned;
    stats_.owned_bytes += t->allocated;
    SyncTensorEventsLocked(t.get());
    t->ns->info.bytes += t->bytes;
    queue_[static_cast<int>(CacheClass::kOwned)].Add(t.get());
    adopted++;
  }
  return adopted;
}

// One remote tensor a fetch brings (FetchLocked): its arena bytes, whether
// it is kept as a replica, its own prefix's tokens (up to its last block),
// and where its segment is in the plan's groups.
struct Store::FetchJob {
  TensorHold t;  // its struct outlives the fetch (kFilling while it runs)
  uint64_t off;
  uint64_t blocks;
  bool keep;
  std::vector<uint32_t> names;  // the tensor's own prefix, up to its last block
  size_t group = 0, request = 0, segment = 0;
  std::vector<ChainKey> keys;   // of `names`, when only a head of it came (KeepHeadLocked)
};

// One fetch names its segments by one prompt, and an owner matches each
// segment's blocks along that prompt. The tensors of a pin need not lie
// on one path (a remote tensor split by a branch keeps the other branch's
// tail): tensors whose own prefixes extend one another share a fetch,
// named by the longest; any other gets a fetch of its own.
struct Store::FetchGroup {
  std::vector<uint32_t> names;
  std::vector<FetchRequest> requests;
  std::map<uint32_t, size_t> by_owner;
};

// What FetchLocked's steps share: the namespace as it was when the fetch
// began (`ns` itself may be dropped while the lock is released), the jobs
// and their groups.
struct Store::FetchPlan {
  NamespaceDef def;
  NamespaceKey ns;  // for its dram_pending
  ChainKey root;
  uint32_t bt = 0;
  uint64_t bb = 0;
  std::vector<FetchJob> jobs;
  std::vector<FetchGroup> groups;
};

void Store::FetchLocked(const Namespace& ns, const std::vector<Tensor*>& missing, core::UniqueLock& lk,
                        std::vector<TensorHold>* transient) {
  FetchPlan p;
  p.def = NamespaceDef{ns.info, ns.salt};
  p.ns = NamespaceKey::Of(ns);
  p.root = ns.root_key;
  p.bt = ns.info.layout.block_tokens;
  p.bb = ns.info.layout.BytesPerBlock();
  PlanFetchesLocked(p, missing, lk);
  GroupFetchesLocked(p);
  RemoteFetcher* fetcher = fetcher_;
  if (!p.jobs.empty() && fetcher != nullptr) {
    lk.Unlock(mu_);
    for (FetchGroup& g : p.groups) fetcher->Fetch(p.def, g.names, g.requests);
    for (FetchJob& j : p.jobs) {
      const FetchSegment& seg = p.groups[j.group].requests[j.request].segments[j.segment];
      if (seg.gone && seg.fetched_blocks > 0 && seg.fetched_blocks < j.blocks) j.keys = ChainKeys(p.root, j.names, p.bt);
    }
    lk.Lock(mu_);
  }
  for (FetchJob& j : p.jobs) LandFetchLocked(p, j, fetcher != nullptr, transient);
  io_done_.NotifyAll();
}

void Store::PlanFetchesLocked(FetchPlan& p, const std::vector<Tensor*>& missing, core::UniqueLock& lk) {
  for (Tensor* t : missing) {
    if (t->busy() || t->in_dram() || !t->in_index() || !t->remote() || t->nodes.empty()) continue;
    const uint64_t blocks = LiveTokens(*t) / p.bt;
    if (blocks == 0) continue;
    bool keep = options_.replicate_after > 0 && t->hits + 1 >= options_.replicate_after;
    // Within its namespace's DRAM quota, like a save of it.
    Result<uint64_t> off = AllocateLocked(blocks * p.bb, CacheClass::kReplica, lk, /*transient=*/!keep, t->ns);
    if (!off.ok() && keep && t->in_index()) {
      // No room to keep it (larger than the replica share, or the share is
      // pinned): this load still gets it, as a transient copy.
      keep = false;
      off = AllocateLocked(blocks * p.bb, CacheClass::kReplica, lk, /*transient=*/true, t->ns);
    }
    if (!off.ok()) {
      PTS_DEBUG("cluster", "no room to fetch " << blocks * p.bb << " bytes: " << off.status().ToString());
      break;  // the pin serves the part before it
    }
    if (!t->in_index() || t->in_dram() || t->busy()) {
      // It changed while the allocation waited for a spill.
      alloc_.Free(*off);
      continue;
    }
    t->BeginIo(Tensor::Io::kFilling);
    const uint64_t first = t->nodes.front()->start_block;
    std::vector<uint32_t> names = PrefixTokensLocked(t->nodes.back());
    names.resize(std::min<uint64_t>(names.size(), (first + blocks) * p.bt));
    p.jobs.push_back(FetchJob{TensorHold(*this, t), *off, blocks, keep, std::move(names), 0, 0, 0, {}});
    // Counted against the namespace's quota while it is fetched.
    AddPendingLocked(p.ns, static_cast<int64_t>(alloc_.AllocatedSize(*off)));
  }
}

void Store::GroupFetchesLocked(FetchPlan& p) {
  // The groups' names: the longest prefixes first, each shorter one a
  // group of its own only if no longer one begins with it. Then every job,
  // in path order (so each owner's segments stay in order), joins the first
  // group whose names begin with its own.
  std::vector<FetchJob>& jobs = p.jobs;
  std::vector<FetchGroup>& groups = p.groups;
  std::vector<size_t> order(jobs.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return jobs[a].names.size() > jobs[b].names.size(); });
  auto group_of = [&](const std::vector<uint32_t>& names) {
    size_t g = 0;
    while (g < groups.size() && !(names.size() <= groups[g].names.size() &&
                                  std::equal(names.begin(), names.end(), groups[g].names.begin()))) {
      ++g;
    }
    return g;
  };
  for (size_t i : order) {
    if (group_of(jobs[i].names) == groups.size()) groups.push_back(FetchGroup{jobs[i].names, {}, {}});
  }
  for (FetchJob& j : jobs) {
    j.group = group_of(j.names);
    FetchGroup& grp = groups[j.group];
    auto [it, fresh] = grp.by_owner.emplace(j.t->owner(), grp.requests.size());
    if (fresh) grp.requests.push_back(FetchRequest{j.t->owner(), {}});
    FetchRequest& req = grp.requests[it->second];
    const uint64_t first = j.t->nodes.front()->start_block;
    req.segments.push_back(FetchSegment{first, first + j.blocks, j.off, 0, false});
    j.request = it->second;
    j.segment = req.segments.size() - 1;
  }
}

void Store::LandFetchLocked(const FetchPlan& p, FetchJob& j, bool fetched, std::vector<TensorHold>* transient) {
  const uint32_t bt = p.bt;
  Tensor* t = j.t.get();
  t->EndIo(Tensor::Io::kFilling);
  AddPendingLocked(p.ns, -static_cast<int64_t>(alloc_.AllocatedSize(j.off)));
  const FetchSegment& seg = p.groups[j.group].requests[j.request].segments[j.segment];
  bool complete = fetched && seg.fetched_blocks == j.blocks;
  if (!complete && !j.keys.empty() && t->in_index() && !t->in_dram() && LiveTokens(*t) / bt == j.blocks) {
    // The owner sent the head of the run and holds no more of it along
    // the tensor's prefix: this node's remote tensor goes on where the
    // owner's data does not (a branch the owner lost without a removal
    // reaching this node, e.g. killed before it reached SSD, while this
    // node had learnt the run as one). The tail leaves this node's index;
    // the head is served.
    PTS_INFO("cluster", "node " << t->owner() << " holds only blocks [" << seg.start_block << ", "
                                << seg.start_block + seg.fetched_blocks << ") of its run [" << seg.start_block
                                << ", " << seg.end_block << ") in '" << p.def.info.name
                                << "' known here: dropping the rest from the index");
    KeepHeadLocked(j.t, seg.fetched_blocks, j.keys);
    complete = LiveTokens(*t) / bt == seg.fetched_blocks;
  }
  if (complete && t->in_index() && !t->in_dram() && LiveTokens(*t) / bt == seg.fetched_blocks) {
    t->MarkFilled(j.off, alloc_.AllocatedSize(j.off));
    ChargeLocked(t);
    stats_.replica_bytes += t->allocated;
    stats_.remote_fetches++;
    stats_.remote_fetch_bytes += seg.fetched_blocks * p.bb;
    if (j.keep) {
      t->priority = std::max(t->priority, gdsf_.Priority(*t));
      queue_[static_cast<int>(CacheClass::kReplica)].Add(t);
      stats_.replicas_kept++;
    } else {
      t->BecomeTransient();
      transient->emplace_back(*this, t);  // released by the pin (ReleaseTransientsLocked)
    }
    SyncTensorEventsLocked(t);
  } else {
    alloc_.Free(j.off);
    if (!complete) {
      stats_.remote_fetch_failures++;
      if (seg.gone && seg.fetched_blocks == 0 && t->in_index()) {
        PTS_INFO("cluster", "node " << t->owner() << " no longer holds blocks [" << seg.start_block << ", "
                                    << seg.end_block << ") of a prefix in '" << p.def.info.name
                                    << "': dropping them from the index");
        DropFromIndexLocked(j.t);
      }
    }
  }
  j.t.Release();  // freed if it left the index meanwhile
}

}  // namespace ptstore::storage

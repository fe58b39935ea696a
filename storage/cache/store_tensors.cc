// A tensor's life in the index (store.h): pin counts, priorities, freeing
// its DRAM, destroying it once nothing refers to it, nodes leaving the tree,
// and removals of increments.
#include <algorithm>

#include "core/logging.h"
#include "storage/cache/store.h"
#include "storage/cache/tensor_refs.h"

namespace ptstore::storage {

void Store::PinLocked(Tensor* t) {
  if (t->AddPin()) stats_.pinned_bytes += t->allocated;
}

void Store::UnpinLocked(Tensor* t) {
  if (t->DropPin()) {
    stats_.pinned_bytes -= t->allocated;
    // Fetched for the loads that pinned it, not hot enough to keep: back
    // to a placeholder (FreeDramLocked).
    if (t->transient()) FreeDramLocked(t);
    MaybeDestroyLocked(t);
  }
}

void Store::ReleaseTransientsLocked(std::vector<TensorHold>& tensors) {
  for (TensorHold& t : tensors) {
    if (t->transient() && t->pins() == 0) FreeDramLocked(t.get());
    t.Release();
  }
  tensors.clear();
}

void Store::FreeDramLocked(Tensor* t) {
  if (!t->in_dram()) return;
  EvictionQueue& q = queue_[static_cast<int>(t->cache_class)];
  if (t->in_index() && q.Contains(t)) q.Remove(t);
  alloc_.Free(t->arena_offset);
  (t->cache_class == CacheClass::kOwned ? stats_.owned_bytes : stats_.replica_bytes) -= t->allocated;
  t->DropDram();  // a transient replica is a placeholder again
  ChargeLocked(t);
  SyncTensorEventsLocked(t);
}

void Store::MaybeDestroyLocked(Tensor* t) {
  if (t->in_index() || t->pins() != 0 || t->holds() != 0 || t->busy()) return;
  FreeDramLocked(t);
  DropStubLocked(t);
  if (t->on_ssd()) {
    ssd_->Forget(t->ssd());
    RewriteRecordLocked(t->ssd(), 0);
    t->DropSsd();
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
  if (chain.empty() && t->in_index()) {
    if (t->in_dram()) queue_[static_cast<int>(t->cache_class)].Remove(t);
    if (t->on_ssd()) ssd_queue_.Remove(t);
    t->LeaveIndex();
    ChargeLocked(t);  // its namespace is rid of it now, whatever pins it
    if (t->remote()) {
      stats_.remote_tensors--;
      DropStubLocked(t);
    } else {
      t->ns->info.bytes -= t->bytes;
    }
    MaybeDestroyLocked(t);
  } else if (!chain.empty() && t->on_ssd()) {
    // The tail of the tensor went: its record must not bring it back.
    RewriteRecordLocked(t->ssd(), LiveTokens(*t));
  } else if (!chain.empty() && t->stub_on_ssd()) {
    RewriteRecordLocked(t->stub(), LiveTokens(*t));
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

void Store::PropagateLocked(RadixNode* node, double p) {
  for (RadixNode* a = node->parent; a != nullptr && a->tensor != nullptr; a = a->parent) {
    Tensor* t = a->tensor;
    if (t->priority < p) SetPriorityLocked(t, p);
  }
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

void Store::DropFromIndexLocked(const TensorHold& t) {
  // The caller's hold keeps the struct through the removal (which would
  // free an unreferenced tensor under our feet) and frees it when it goes.
  if (!t->in_index()) return;
  RemoveResult ignored;
  RemoveSubtreeLocked(t->ns, t->nodes.front(), &ignored);
}

}  // namespace ptstore::storage

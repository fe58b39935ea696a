// Saves (store.h): storing the blocks of a prompt past its longest stored
// prefix as one new tensor, once however many clients save it at a time.
//
// A save runs in steps on one SaveJob: its input checked, the claim on its
// next block taken (ClaimSaveLocked), the matched path held, the bytes
// allocated (AllocateSaveLocked, cut to the namespace's DRAM quota), the new
// tensor made, the bytes copied without mu_ (Save), and the tensor filed in
// the index (IndexSaveLocked).
#include "core/stream_copy.h"
#include "storage/cache/store.h"
#include "storage/cache/tensor_refs.h"

namespace ptstore::storage {

// What the steps of one save share. `ns` is looked up again by `key` after
// every drop of mu_ (it may have been dropped meanwhile).
struct Store::SaveJob {
  NamespaceKey key;
  Namespace* ns = nullptr;
  uint32_t bt = 0;                        // tokens per block
  uint64_t bb = 0;                        // bytes per block
  uint64_t blocks = 0;                    // whole blocks of the prompt
  uint64_t first_block = 0;               // where the client's bytes start
  CacheClass cache_class = CacheClass::kOwned;
  std::span<const uint32_t> full;         // the whole blocks' tokens
  std::span<const ChainKey> keys;         // their chain keys
  Match m;                                // what is stored already
  std::pair<Namespace*, ChainKey> claim;  // on inflight_, by the next block's key
  std::vector<TensorHold> path;           // the matched path, held while claimed
  uint64_t new_blocks = 0;                // what this save stores
  bool cut = false;                       // fewer than all the rest (the quota)
};

Result<SaveResult> Store::Save(const std::string& ns_name, std::span<const uint32_t> tokens, const uint8_t* data,
                               uint64_t length, uint64_t first_block, CacheClass cache_class) {
  PTS_ASSIGN_OR_RETURN(PromptKeys k, HashPrompt(ns_name, tokens));
  core::UniqueLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  RekeyLocked(*ns, tokens, &k);
  SaveJob job;
  job.key = NamespaceKey::Of(*ns);
  job.ns = ns;
  job.bt = ns->info.layout.block_tokens;
  job.bb = ns->info.layout.BytesPerBlock();
  job.blocks = tokens.size() / job.bt;
  job.first_block = first_block;
  job.cache_class = cache_class;
  PTS_RETURN_IF_ERROR(CheckSaveLocked(job, data, length));
  job.full = tokens.first(job.blocks * job.bt);
  job.keys = k.keys;
  stats_.saves++;

  PTS_ASSIGN_OR_RETURN(std::optional<SaveResult> done, ClaimSaveLocked(job, lk));
  if (done) return *done;
  HoldSavePathLocked(job);
  Result<uint64_t> off = AllocateSaveLocked(job, lk);
  if (!off.ok()) {
    FinishSaveClaimLocked(job);
    return off.status();
  }
  if (job.cut || job.new_blocks == 0) {
    if (Namespace* now = FindAgainLocked(job.key)) now->cut_saves++;
  }
  if (job.new_blocks == 0) {
    // Not one block fits in the namespace's quota: nothing is stored.
    FinishSaveClaimLocked(job);
    return SaveResult{job.m.blocks * job.bt, 0, 0};
  }
  Tensor* t = NewSaveTensorLocked(job, *off);
  const uint64_t bytes = job.new_blocks * job.bb;
  uint8_t* to = arena_->data() + t->arena_offset;

  // The copy runs without the lock: the region is ours, the path is pinned.
  lk.Unlock();
  core::CopyBytes(to, data + (job.m.blocks - first_block) * job.bb, bytes, bytes);
  lk.Lock();

  return IndexSaveLocked(job, t);
}

Status Store::CheckSaveLocked(const SaveJob& job, const uint8_t* data, uint64_t length) const {
  if (job.first_block > job.blocks) {
    return InvalidArgument("save: first_block " + std::to_string(job.first_block) + " is past the " +
                           std::to_string(job.blocks) + " whole blocks of the prompt");
  }
  const uint64_t want = (job.blocks - job.first_block) * job.bb;
  if (length != want) {
    return InvalidArgument("save: the KV buffer holds " + std::to_string(length) + " bytes, but " +
                           std::to_string(job.blocks - job.first_block) + " blocks of " + std::to_string(job.bt) +
                           " tokens in layout {" + job.ns->info.layout.ToString() + "} need " + std::to_string(want));
  }
  if (length > 0 && data == nullptr) return InvalidArgument("save: null KV buffer");
  return Status::OK();
}

Result<std::optional<SaveResult>> Store::ClaimSaveLocked(SaveJob& job, core::UniqueLock& lk) {
  for (;;) {
    job.m = job.ns->tree->Longest(job.full, job.keys);
    if (job.m.blocks >= job.blocks) {
      TouchLocked(job.ns, job.m, WallClockNs());  // the prompt came again: a use of what it matched
      stats_.dedup_bytes += job.blocks * job.bb;  // the whole prompt was stored already
      return std::optional<SaveResult>(SaveResult{job.blocks * job.bt, 0, 0});
    }
    if (job.m.blocks < job.first_block) {
      return Aborted("save: blocks before first_block " + std::to_string(job.first_block) +
                     " are no longer stored; save again from block 0");
    }
    job.claim = {job.ns, job.keys[job.m.blocks]};
    if (!inflight_.count(job.claim)) break;
    // Someone is storing the same next block: wait, then look again.
    inflight_done_.Wait(lk);
    PTS_ASSIGN_OR_RETURN(job.ns, FindLocked(job.key.name));
    if (job.ns->id != job.key.id) {
      return Aborted("save: namespace '" + job.key.name + "' was replaced during the save");
    }
  }
  inflight_.insert(job.claim);
  return std::optional<SaveResult>();
}

void Store::HoldSavePathLocked(SaveJob& job) {
  // Hold the matched path: neither eviction for our own allocation nor
  // another client's may take the parent we are about to hang below out of
  // the index (its bytes may move to SSD meanwhile; that is fine).
  for (const MatchStep& s : job.m.path) {
    if (job.path.empty() || job.path.back().get() != s.node->tensor) job.path.emplace_back(*this, s.node->tensor);
  }
}

void Store::FinishSaveClaimLocked(SaveJob& job) {
  job.path.clear();  // each freed if it left the index meanwhile
  inflight_.erase(job.claim);
  inflight_done_.NotifyAll();
}

Result<uint64_t> Store::AllocateSaveLocked(SaveJob& job, core::UniqueLock& lk) {
  const uint64_t bb = job.bb;
  job.new_blocks = job.blocks - job.m.blocks;
  // The namespace's DRAM quota bounds what one save can add: the blocks past
  // what fits in it are not stored (the prefix that fits is), as a load of
  // more than the arena holds is not an error either.
  if (job.ns->dram_quota != 0 && job.new_blocks > BlocksThatFit(job.ns->dram_quota, bb)) {
    job.new_blocks = BlocksThatFit(job.ns->dram_quota, bb);
    job.cut = true;
  }
  Result<uint64_t> off = job.new_blocks == 0
                             ? Result<uint64_t>(uint64_t{0})
                             : AllocateLocked(job.new_blocks * bb, job.cache_class, lk, false, job.ns);
  if (!off.ok() && off.status().code() == Code::kResourceExhausted && job.new_blocks > 1) {
    // Its own pinned data leaves room for fewer blocks: store those.
    Namespace* now = FindAgainLocked(job.key);
    if (now != nullptr && now->dram_quota != 0) {
      job.ns = now;
      const uint64_t used = job.ns->dram_bytes + job.ns->dram_pending;
      const uint64_t fit = used < job.ns->dram_quota ? BlocksThatFit(job.ns->dram_quota - used, bb) : 0;
      if (fit > 0 && fit < job.new_blocks) {
        job.new_blocks = fit;
        job.cut = true;
        off = AllocateLocked(job.new_blocks * bb, job.cache_class, lk, false, job.ns);
      }
    }
  }
  if (!off.ok() && off.status().code() == Code::kResourceExhausted) {
    // Its quota has no room, and none can be made: what stands in the way is
    // this save's own prefix (held while it hangs below it) or its pinned
    // data. Only the latter is the error a full arena gives; otherwise
    // nothing is stored, as when not one block fits.
    Namespace* now = FindAgainLocked(job.key);
    if (now != nullptr && now->dram_quota != 0 &&
        now->dram_bytes + now->dram_pending + AlignUp(job.new_blocks * bb, alloc_.alignment()) > now->dram_quota &&
        !NamespaceHasPinnedLocked(*now)) {
      job.ns = now;
      job.new_blocks = 0;
      off = uint64_t{0};
    }
  }
  return off;
}

Tensor* Store::NewSaveTensorLocked(const SaveJob& job, uint64_t offset) {
  auto owned = std::make_unique<Tensor>();
  Tensor* t = owned.get();
  t->id = TensorId::Make(NodeId{options_.node_id}, next_tensor_seq_++);
  t->cache_class = job.cache_class;
  t->ns = job.ns;
  t->MarkFilled(offset, alloc_.AllocatedSize(offset));
  t->bytes = job.new_blocks * job.bb;
  t->start_token = job.m.blocks * job.bt;
  t->tokens = job.new_blocks * job.bt;
  t->cost = Gdsf::RecomputeCost(t->start_token, t->tokens);
  (job.cache_class == CacheClass::kOwned ? stats_.owned_bytes : stats_.replica_bytes) += t->allocated;
  tensors_.emplace(t->id.value, std::move(owned));
  // Counted against the quota while it is copied (ChargeLocked takes over
  // once it is in the index).
  AddPendingLocked(job.key, static_cast<int64_t>(t->allocated));
  return t;
}

SaveResult Store::IndexSaveLocked(SaveJob& job, Tensor* t) {
  const uint32_t bt = job.bt;
  const uint64_t bytes = job.new_blocks * job.bb;
  const uint64_t end_blocks = job.m.blocks + job.new_blocks;
  Namespace* ns = job.ns;
  AddPendingLocked(job.key, -static_cast<int64_t>(t->allocated));
  FinishSaveClaimLocked(job);
  Namespace* again = FindAgainLocked(job.key);
  Match m2;
  if (again != nullptr) m2 = ns->tree->Longest(job.full, job.keys);
  if (again == nullptr || m2.blocks != job.m.blocks) {
    // A removal of the parent (or of the namespace) won the race: the save is
    // ordered before it, so its bytes are gone with it.
    MaybeDestroyLocked(t);
    return SaveResult{m2.blocks * bt, 0, 0};
  }
  const uint64_t now = WallClockNs();
  RadixNode* node = ns->tree->Insert(m2, job.full.first(end_blocks * bt), job.keys.first(end_blocks), t,
                                     Times{now, now, now});
  if (node == nullptr) {
    // A chain-key collision with an increment of other tokens: there is
    // nowhere to file this one. A miss, never a wrong answer: drop it.
    ns->info.prefixes = ns->tree->node_count();
    MaybeDestroyLocked(t);
    return SaveResult{m2.blocks * bt, 0, 0};
  }
  t->EnterIndex();
  ChargeLocked(t);
  SyncTensorEventsLocked(t);
  // The blocks it matched were used (the prompt came again): its ancestors,
  // after the split that made room for it, not the other half of a split.
  if (RaiseAncestorsAtimeLocked(node, now)) {
    changes_.Append(ChangeKind::kTimes, ns->info.name, node->parent->key, node->parent->parent->key);
  }
  t->priority = gdsf_.Priority(*t);
  queue_[static_cast<int>(job.cache_class)].Add(t);
  PropagateLocked(node, t->priority);
  ns->info.bytes += bytes;
  ns->info.prefixes = ns->tree->node_count();
  ns->info.times.Merge(node->times);
  stats_.saved_bytes += bytes;
  // Blocks of the prompt that were stored already, whether or not the client
  // copied them (it skips them when it looked them up first).
  stats_.dedup_bytes += job.m.blocks * job.bb;
  return SaveResult{job.m.blocks * bt, job.new_blocks * bt, bytes};
}

}  // namespace ptstore::storage

// Room in the arena (store.h): allocation within the arena and a
// namespace's DRAM quota, and eviction by GDSF (replicas first, owned data
// dropped or, with an SSD tier, spilled).
#include <optional>

#include "core/logging.h"
#include "storage/cache/bytes_text.h"
#include "storage/cache/store.h"
#include "storage/cache/tensor_refs.h"

namespace ptstore::storage {

void Store::EvictLocked(Tensor* t) {
  gdsf_.OnEvict(*t);
  stats_.evictions++;
  stats_.evicted_bytes += t->bytes;
  PTS_DEBUG("store", "evict tensor " << t->id.value << " (" << CacheClassName(t->cache_class) << ", "
                                     << BytesText(t->bytes) << ", priority " << t->priority << ")");
  NoteLostLocked(t);
  RemoveResult ignored;
  // A leaf tensor's nodes are one chain: removing its top node removes all.
  RemoveSubtreeLocked(t->ns, t->nodes.front(), &ignored);
}

bool Store::DropOneLocked(CacheClass from, Namespace* ns) {
  auto may_go = [](const Tensor* t) {
    if (t->pins() != 0 || t->busy()) return false;
    // A replica of another node's increment only gives up its bytes: its
    // metadata stays (what hangs below it stays reachable).
    return t->remote() || (t->holds() == 0 && t->foreign_children == 0);
  };
  const EvictionQueue& q = queue_[static_cast<int>(from)];
  Tensor* victim = ns ? q.PickVictimIn(ns, may_go) : q.PickVictim(may_go);
  if (victim == nullptr) return false;
  if (victim->remote()) {
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
    if (t->pins() != 0 || t->busy()) return false;
    if (t->on_ssd()) return true;
    if (t->spill_failed_gen != gen) return true;
    return t->holds() == 0 && t->foreign_children == 0;
  };
  const EvictionQueue& q = queue_[static_cast<int>(from)];
  Tensor* victim = ns ? q.PickVictimIn(ns, may_go) : q.PickVictim(may_go);
  if (victim == nullptr) return false;
  if (victim->on_ssd()) {
    FreeDramLocked(victim);
    stats_.evictions++;
    stats_.evicted_bytes += victim->bytes;
    return true;
  }
  // Held across the spill, so that its struct is still there to look at
  // below: a spill whose append failed after a removal took the tensor out
  // of the index meanwhile would free it (commit 086d638). (Nobody else
  // sees the hold: the tensor is kSpilling whenever the lock is released.)
  // The hold's release frees it if it was removed while its spill ran.
  std::optional<TensorHold> keep;
  if (victim->spill_failed_gen != gen) {
    keep.emplace(*this, victim);
    if (SpillLocked(victim, lk)) return true;
  }
  const uint32_t ours = keep ? 1 : 0;
  if (victim->holds() == ours && victim->foreign_children == 0 && victim->in_index() && victim->pins() == 0 &&
      !victim->busy() && !victim->on_ssd()) {
    keep.reset();
    EvictLocked(victim);
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
  const NamespaceKey key = NamespaceKey::Of(*ns);
  const std::string& name = key.name;
  auto again = [&]() REQUIRES(mu_) { return FindAgainLocked(key); };
  auto gone = [&] { return Aborted("namespace '" + name + "' was dropped while making room in it"); };
  for (;;) {
    if (!NamespaceRoomLocked(ns, bytes, lk)) {
      ns = again();
      if (ns == nullptr) return gone();
      if (ns->dram_quota == 0) return ArenaAllocateLocked(bytes, cls, lk, transient);
      if (AlignUp(bytes, alloc_.alignment()) > ns->dram_quota) {
        return ResourceExhausted("cannot store a tensor of " + BytesText(bytes) + " in namespace '" + name +
                                 "': it is larger than the namespace's DRAM quota of " + BytesText(ns->dram_quota));
      }
      return ResourceExhausted("cannot store a tensor of " + BytesText(bytes) + " in namespace '" + name +
                               "': its DRAM quota of " + BytesText(ns->dram_quota) + " is full of pinned data (used " +
                               BytesText(ns->dram_bytes + ns->dram_pending) + ")");
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
    return ResourceExhausted("cannot store a tensor of " + BytesText(bytes) + ": " + why + " (arena " +
                             BytesText(capacity) + ", used " + BytesText(alloc_.used_bytes()) + ", pinned " +
                             BytesText(stats_.pinned_bytes) + ", largest free extent " +
                             BytesText(alloc_.largest_free_extent()) + ")");
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

}  // namespace ptstore::storage

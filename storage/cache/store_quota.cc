// Byte quotas per namespace (ptstore/quota.h, docs/architecture.md
// "Quotas"): what each namespace's increments take in DRAM and on SSD,
// making room inside one namespace by GDSF, and setting quotas (persisted
// in the namespace's SSD record).
//
// Accounting: a tensor charges its namespace (Tensor::charged_dram,
// charged_ssd) while it is in the index: its arena allocation while in
// DRAM, its record's footprint while on SSD. ChargeLocked runs after every
// change of those, and once a tensor leaves the index its charges are 0, so
// a tensor a pin keeps after its namespace was dropped never touches it.
// Saves being copied count as dram_pending until they are indexed.
#include <algorithm>

#include "core/logging.h"
#include "storage/cache/store.h"

namespace ptstore::storage {

namespace {
std::string Show(uint64_t b) { return FormatQuotaBytes(b) == "unlimited" ? "0" : FormatQuotaBytes(b); }
}  // namespace

void Store::ChargeLocked(Tensor* t) {
  const uint64_t dram = t->in_index() && t->in_dram() ? t->allocated : 0;
  const uint64_t ssd = t->in_index() && t->on_ssd() ? t->ssd().footprint() : 0;
  if (dram == t->charged_dram && ssd == t->charged_ssd) return;
  Namespace* ns = t->ns;
  ns->dram_bytes = ns->dram_bytes - t->charged_dram + dram;
  ns->ssd_bytes = ns->ssd_bytes - t->charged_ssd + ssd;
  t->charged_dram = dram;
  t->charged_ssd = ssd;
}

Namespace* Store::FindAgainLocked(const NamespaceKey& k) const {
  auto it = namespaces_.find(k.name);
  return it == namespaces_.end() || it->second->id != k.id ? nullptr : it->second.get();
}

void Store::AddPendingLocked(const NamespaceKey& ns, int64_t delta) {
  Namespace* n = FindAgainLocked(ns);
  if (n == nullptr) return;  // dropped (or made again) meanwhile
  n->dram_pending = static_cast<uint64_t>(static_cast<int64_t>(n->dram_pending) + delta);
}

uint64_t Store::BlocksThatFit(uint64_t room, uint64_t bb) const {
  const uint64_t a = alloc_.alignment();
  uint64_t n = room / bb;
  // A tensor's allocation is its bytes rounded up to the alignment.
  while (n > 0 && AlignUp(n * bb, a) > room) --n;
  return n;
}

bool Store::NamespaceRoomLocked(Namespace* ns, uint64_t bytes, core::UniqueLock& lk) {
  const uint64_t need = AlignUp(bytes, alloc_.alignment());
  const NamespaceKey key = NamespaceKey::Of(*ns);  // each step below may drop mu_
  for (;;) {
    if (ns->dram_quota == 0 || ns->dram_bytes + ns->dram_pending + need <= ns->dram_quota) return true;
    if (need > ns->dram_quota) return false;  // never fits
    const uint64_t before = ns->dram_bytes;
    // Its replicas first (they can be fetched again), then its own data:
    // spilled to SSD where there is a tier, else dropped, leaves first.
    // Never another namespace's.
    bool changed = DropOneLocked(CacheClass::kReplica, ns) || MakeOwnedRoomLocked(lk, ns);
    const uint64_t waiting = appends_in_flight_;
    ns = FindAgainLocked(key);
    if (ns == nullptr) return false;
    if (ns->dram_bytes < before) ns->dram_evictions++;
    if (!changed) {
      // Spills of its tensors by other threads free DRAM when they end.
      if (waiting == 0) return false;
      io_done_.Wait(lk);
      ns = FindAgainLocked(key);
      if (ns == nullptr) return false;
    }
  }
}

bool Store::NamespaceSsdRoomLocked(Namespace* ns, uint64_t need) {
  if (ns->ssd_quota == 0) return true;
  if (need > ns->ssd_quota) return false;
  while (ns->ssd_bytes + need > ns->ssd_quota) {
    // As the tier does when it is full (MakeSsdRoomLocked), among this
    // namespace's records only.
    Tensor* v = ssd_queue_.PickVictimIn(ns, SsdEvictable);
    if (v == nullptr) return false;
    ns->ssd_evictions++;
    EvictFromSsdLocked(v);
  }
  return true;
}

bool Store::NamespaceHasPinnedLocked(const Namespace& ns) const {
  auto pinned = [](const Tensor* t) { return t->pins() != 0; };
  return queue_[0].PickVictimIn(&ns, pinned) != nullptr || queue_[1].PickVictimIn(&ns, pinned) != nullptr;
}

NamespaceQuota Store::QuotaOfLocked(const Namespace& ns) const {
  NamespaceQuota q;
  q.ns = ns.info.name;
  q.dram_quota = ns.dram_quota;
  q.ssd_quota = ns.ssd_quota;
  q.dram_bytes = ns.dram_bytes;
  q.ssd_bytes = ns.ssd_bytes;
  q.dram_evictions = ns.dram_evictions;
  q.ssd_evictions = ns.ssd_evictions;
  q.cut_saves = ns.cut_saves;
  return q;
}

RecordHeader Store::NamespaceRecordLocked(const Namespace& ns) const {
  RecordHeader h;
  h.kind = RecordKind::kNamespace;
  h.live_tokens = 1;
  h.owner_node = options_.node_id;
  h.ns_name = ns.info.name;
  h.ns_incarnation = ns.id;
  h.layout = ns.info.layout;
  h.salt = ns.salt;
  h.uid = ns.info.uid;
  h.gid = ns.info.gid;
  h.mode = ns.info.mode;
  h.times = ns.info.times;
  if (ns.dram_quota != 0 || ns.ssd_quota != 0) {
    h.flags |= kRecordQuotas;
    h.dram_quota = ns.dram_quota;
    h.ssd_quota = ns.ssd_quota;
  }
  return h;
}

Result<NamespaceQuota> Store::SetQuota(const std::string& name, const QuotaChange& change) {
  for (const auto& [tier, v] : {std::pair{"DRAM", change.dram}, std::pair{"SSD", change.ssd}}) {
    if (v && *v > kMaxQuotaBytes) {
      return InvalidArgument("namespace '" + name + "': a " + tier + " quota of " + std::to_string(*v) +
                             " bytes is too large (at most " + FormatQuotaBytes(kMaxQuotaBytes) + ")");
    }
  }
  core::UniqueLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(name));
  if (change.ssd && *change.ssd != 0 && !SsdEnabled()) {
    return InvalidArgument("namespace '" + name + "': an SSD quota needs an SSD tier, and this ptstored has none");
  }
  const NamespaceKey key = NamespaceKey::Of(*ns);  // the record's append drops mu_
  const uint64_t dram = change.dram.value_or(ns->dram_quota);
  const uint64_t ssd = change.ssd.value_or(ns->ssd_quota);
  if (SsdEnabled() && (dram != ns->dram_quota || ssd != ns->ssd_quota)) {
    // A new record of the namespace (same incarnation, a newer sequence
    // number) replaces the old one: a restart takes the newest. It is on
    // disk before the quota applies, so a failed write changes nothing.
    Namespace future = {};
    future.id = ns->id;
    future.info = ns->info;
    future.salt = ns->salt;
    future.dram_quota = dram;
    future.ssd_quota = ssd;
    RecordHeader h = NamespaceRecordLocked(future);
    h.seq = next_seq_++;
    Result<SsdLocation> loc = AppendHeaderLocked(std::move(h), lk);
    if (!loc.ok()) return loc.status().WithContext("set the quota of namespace '" + name + "'");
    ns = FindAgainLocked(key);
    if (ns == nullptr) {
      // Dropped meanwhile: the record must not bring it back.
      ssd_->Forget(*loc);
      RewriteRecordLocked(*loc, 0);
      return NotFound("namespace '" + name + "' was dropped while its quota was being set");
    }
    if (ns->record) {
      ssd_->Forget(*ns->record);
      RewriteRecordLocked(*ns->record, 0);
    }
    ns->record = *loc;
  }
  ns->dram_quota = dram;
  ns->ssd_quota = ssd;
  PTS_INFO("store", "namespace '" << name << "': DRAM quota " << Show(dram) << ", SSD quota " << Show(ssd)
                                  << " (using " << ns->dram_bytes << " and " << ns->ssd_bytes << " bytes)");
  // Under the new quotas at once, as far as unpinned data goes.
  if (ssd != 0 && ns->ssd_bytes > ssd) NamespaceSsdRoomLocked(ns, 0);
  if (dram != 0 && ns->dram_bytes > dram) {
    NamespaceRoomLocked(ns, 0, lk);
    ns = FindAgainLocked(key);
    if (ns == nullptr) return NotFound("namespace '" + name + "' was dropped while its quota was being set");
    // A spill may have taken SSD room: keep that under its quota too.
    if (ns->ssd_quota != 0 && ns->ssd_bytes > ns->ssd_quota) NamespaceSsdRoomLocked(ns, 0);
  }
  NamespaceQuota q = QuotaOfLocked(*ns);
  std::vector<std::future<Status>> writes = TakeRewritesLocked();
  lk.Unlock();
  for (auto& w : writes) {
    Status s = w.get();
    if (!s.ok()) PTS_WARN("store", "set quota of '" << name << "': " << s.ToString());
  }
  return q;
}

Result<NamespaceQuota> Store::GetQuota(const std::string& name) const {
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(name));
  return QuotaOfLocked(*ns);
}

std::vector<NamespaceQuota> Store::ListQuotas() const {
  core::MutexLock lk(mu_);
  std::vector<NamespaceQuota> out;
  for (const auto& [name, n] : namespaces_) out.push_back(QuotaOfLocked(*n));
  return out;
}

}  // namespace ptstore::storage

// Reclaiming the SSD tier's dead space (store.h, docs/ssd-tier.md): one
// sparse segment at a time, its live records copied to the tail and the
// segment deleted; and the cleaner thread that does it in the background
// (and writes the increments' times to their records).
#include <chrono>

#include "core/logging.h"
#include "storage/cache/store.h"
#include "storage/cache/tensor_refs.h"

namespace ptstore::storage {

// One live record of the segment a compaction empties: a tensor's record
// (its stub's when `stub`), or a namespace's; where it was, and where its
// copy went. The hold keeps a tensor's struct across the copy (a record's
// tensor is also kCopying, so that the record stays where it is).
struct Store::CompactionMove {
  TensorHold t;                   // a tensor's record (its stub's when `stub`), or
  bool stub = false;
  std::string ns_name;            // a namespace's record
  uint64_t ns_id = 0;
  SsdLocation from;
  uint64_t live_tokens = 0;
  Result<SsdLocation> to = Internal("not copied");
};

Result<bool> Store::CompactOnce() {
  // One compaction at a time (the cleaner, or a caller): two would copy the
  // same segment. Lock order: compact_mu_, then mu_.
  core::MutexLock one(compact_mu_);
  core::UniqueLock lk(mu_);
  if (!SsdEnabled()) return false;
  // An append that has finished on disk but not yet reached the index could
  // be in any segment: wait for a quiet moment.
  if (appends_in_flight_ > 0) return false;
  const bool pressure =
      static_cast<double>(ssd_->file_bytes()) > kSsdEvictAt * static_cast<double>(ssd_->capacity());
  std::optional<uint64_t> seg = ssd_->PickSegmentToCompact(pressure);
  if (!seg) return false;

  std::vector<CompactionMove> moves;
  if (!CollectMovesLocked(*seg, &moves)) return false;  // busy: next time
  lk.Unlock();
  for (CompactionMove& m : moves) m.to = ssd_->CopyRecord(m.from);
  lk.Lock();

  bool all_moved = true;
  for (CompactionMove& m : moves) {
    if (!LandMoveLocked(m)) all_moved = false;
  }
  moves.clear();  // LandMoveLocked released the holds; none outlives mu_
  stats_.ssd_compactions++;
  ssd_gen_++;  // space came back: spills that failed may try again
  io_done_.NotifyAll();
  lk.Unlock();
  // Whatever the accounting says is left there belongs to nobody.
  if (all_moved) PTS_RETURN_IF_ERROR(ssd_->DeleteSegment(*seg));
  return true;
}

bool Store::CollectMovesLocked(uint64_t seg, std::vector<CompactionMove>* moves) {
  for (auto& [id, t] : tensors_) {
    if (!t->on_ssd() || t->ssd().segment != seg) continue;
    if (t->busy()) {
      moves->clear();  // busy: next time (the holds go, nothing is marked yet)
      return false;
    }
    CompactionMove m;
    m.t = TensorHold(*this, t.get());
    m.from = t->ssd();
    m.live_tokens = LiveTokens(*t);
    moves->push_back(std::move(m));
  }
  for (auto& [id, t] : tensors_) {
    if (!t->stub_on_ssd() || t->stub().segment != seg) continue;
    CompactionMove m;
    m.t = TensorHold(*this, t.get());
    m.stub = true;
    m.from = t->stub();
    m.live_tokens = LiveTokens(*t);
    moves->push_back(std::move(m));
  }
  for (auto& [name, n] : namespaces_) {
    if (!n->record || n->record->segment != seg) continue;
    CompactionMove m;
    m.ns_name = name;
    m.ns_id = n->id;
    m.from = *n->record;
    moves->push_back(std::move(m));
  }
  for (CompactionMove& m : *moves) {
    if (m.t && !m.stub) m.t->BeginIo(Tensor::Io::kCopying);
  }
  return true;
}

bool Store::LandMoveLocked(CompactionMove& m) {
  const bool moved = m.to.ok();
  if (!moved) PTS_ERROR("ssd", "compaction: " << m.to.status().ToString());
  if (!m.t) {
    auto it = namespaces_.find(m.ns_name);
    const bool same = it != namespaces_.end() && it->second->id == m.ns_id && it->second->record == m.from;
    if (m.to.ok() && same) {
      it->second->record = *m.to;
      ssd_->Forget(m.from);
    } else if (m.to.ok()) {
      ssd_->Forget(*m.to);  // dropped meanwhile
      RewriteRecordLocked(*m.to, 0);
    }
    return moved;
  }
  Tensor* t = m.t.get();
  if (m.stub) {
    if (m.to.ok() && t->stub_on_ssd() && t->stub() == m.from) {
      t->MoveStub(*m.to);
      ssd_->Forget(m.from);
      t->record_times = {};  // a times rewrite meanwhile may have gone to the old copy
      NoteTimesChangedLocked(t);
      if (LiveTokens(*t) < m.live_tokens) RewriteRecordLocked(t->stub(), LiveTokens(*t));
    } else if (m.to.ok()) {
      ssd_->Forget(*m.to);  // gone meanwhile
      RewriteRecordLocked(*m.to, 0);
    } else if (m.to.status().code() == Code::kCorruption && t->stub_on_ssd()) {
      t->ForgetStub();  // written again with the next spill below it
    }
    m.t.Release();  // freed if it left the index meanwhile
    return moved;
  }
  t->EndIo(Tensor::Io::kCopying);
  if (!m.to.ok() && m.to.status().code() != Code::kCorruption) {
    // The copy failed, not the record: it stays where it is.
    m.t.Release();
    return moved;
  }
  if (m.to.ok()) {
    // The new copy replaces the old; if the tensor left the index
    // meanwhile, MaybeDestroyLocked below kills the new copy.
    t->MoveRecord(*m.to);
    ChargeLocked(t);
    ssd_->Forget(m.from);
    t->record_times = {};  // a times rewrite meanwhile may have gone to the old copy
    NoteTimesChangedLocked(t);
    if (t->in_index() && LiveTokens(*t) < m.live_tokens) RewriteRecordLocked(t->ssd(), LiveTokens(*t));
  } else if (t->in_dram()) {
    DropSsdCopyLocked(t);
  } else {
    DropFromIndexLocked(m.t);  // its only copy is corrupt
  }
  m.t.Release();
  return moved;
}

void Store::CleanerLoop() {
  core::UniqueLock lk(mu_);
  while (!stopping_) {
    cleaner_wake_.WaitFor(lk, std::chrono::milliseconds(500));
    if (stopping_) break;
    const bool sync_times = options_.times_sync_ms != 0 &&
                            Clock::now() - times_synced_ >= std::chrono::milliseconds(options_.times_sync_ms);
    lk.Unlock();
    if (sync_times) SyncTimes();
    for (int i = 0; i < 8; ++i) {
      Result<bool> did = CompactOnce();
      if (!did.ok()) {
        PTS_WARN("ssd", "compaction: " << did.status().ToString());
        break;
      }
      if (!*did) break;
    }
    lk.Lock();
  }
}

}  // namespace ptstore::storage

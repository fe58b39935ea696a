// The Store's SSD tier: spilling owned tensors that GDSF evicts from DRAM,
// reading them back on a pin, and keeping the tier under its capacity by
// GDSF (reclaiming dead space is store_compact.cc; docs/ssd-tier.md).
//
// All file I/O runs with mu_ released. A tensor under I/O is marked in
// Tensor::io, which keeps its DRAM bytes (a spill reads them) or its record
// (a fill or a copy reads it) where they are until the I/O ends.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/logging.h"
#include "storage/cache/store.h"
#include "storage/cache/tensor_refs.h"

namespace ptstore::storage {

Status Store::OpenSsd() {
  Env* env = options_.env ? options_.env : Env::Default();
  PTS_ASSIGN_OR_RETURN(ssd_, SsdTier::Open(env, options_.ssd, options_.node_id));
  io_ = std::make_unique<IoPool>(ssd_->options().io_threads);
  {
    core::UniqueLock lk(mu_);
    PTS_RETURN_IF_ERROR(RecoverLocked());
  }
  if (ssd_->options().background_compaction) cleaner_ = std::thread([this] { CleanerLoop(); });
  const SsdTierStats st = ssd_->Stats();
  PTS_INFO("ssd", "tier at " << ssd_->options().dir << ": capacity " << st.capacity << " bytes, segments of "
                             << ssd_->options().segment_bytes << ", compression "
                             << (ssd_->options().compress ? "on" : "off") << ", sync "
                             << SyncName(ssd_->options().sync));
  return Status::OK();
}

// ------------------------------------------------------------- records

RecordHeader Store::TensorRecordLocked(const Tensor& t, uint64_t* live_bytes) const {
  RecordHeader h;
  h.kind = RecordKind::kTensor;
  h.owner_node = options_.node_id;
  h.ns_name = t.ns->info.name;
  h.ns_incarnation = t.ns->id;
  h.layout = t.ns->info.layout;
  const RadixNode* first = t.nodes.front();
  h.parent_key = first->parent->tensor != nullptr ? first->parent->key : ChainKey{};
  h.start_token = t.start_token;
  h.hits = t.hits;
  for (const RadixNode* n : t.nodes) h.tokens.insert(h.tokens.end(), n->tokens.begin(), n->tokens.end());
  h.live_tokens = h.tokens.size();
  h.times = TensorTimesLocked(t);
  *live_bytes = h.tokens.size() * h.layout.BytesPerToken();
  return h;
}

void Store::RewriteRecordLocked(const SsdLocation& loc, uint64_t live_tokens) {
  if (pending_rewrites_.size() >= 64) {
    // Drop the futures of rewrites that are done.
    std::erase_if(pending_rewrites_, [](std::future<Status>& f) {
      return f.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
    });
  }
  SsdTier* tier = ssd_.get();
  pending_rewrites_.push_back(io_->Submit(
      [tier, loc, live_tokens]() -> Status {
        Status s = tier->SetLiveTokens(loc, live_tokens);
        // A segment reclaimed meanwhile took the record with it.
        return s.code() == Code::kNotFound ? Status::OK() : s;
      },
      IoPool::Priority::kBackground));
}

std::vector<std::future<Status>> Store::TakeRewritesLocked() {
  std::vector<std::future<Status>> out;
  out.swap(pending_rewrites_);
  return out;
}

void Store::FlushSsd() {
  std::vector<std::future<Status>> writes;
  {
    core::MutexLock lk(mu_);
    writes = TakeRewritesLocked();
  }
  for (auto& w : writes) w.get().IgnoreError();
}

uint64_t Store::SyncTimes() {
  std::vector<std::future<Status>> writes;
  {
    core::MutexLock lk(mu_);
    times_synced_ = Clock::now();
    if (!SsdEnabled()) return 0;
    SsdTier* tier = ssd_.get();
    for (uint64_t id : times_dirty_) {
      auto it = tensors_.find(id);
      if (it == tensors_.end()) continue;
      Tensor* t = it->second.get();
      if (!t->in_index() || t->nodes.empty() || (!t->on_ssd() && !t->stub_on_ssd())) continue;
      const Times times = TensorTimesLocked(*t);
      if (times == t->record_times) continue;
      t->record_times = times;
      const SsdLocation loc = t->on_ssd() ? t->ssd() : t->stub();
      writes.push_back(io_->Submit(
          [tier, loc, times]() -> Status {
            Status s = tier->SetTimes(loc, times);
            // A segment reclaimed meanwhile took the record with it.
            return s.code() == Code::kNotFound ? Status::OK() : s;
          },
          IoPool::Priority::kBackground));
    }
    times_dirty_.clear();
  }
  uint64_t written = 0;
  for (auto& w : writes) {
    Status s = w.get();
    if (s.ok()) {
      ++written;
    } else {
      PTS_WARN("ssd", "writing an increment's times: " << s.ToString());
    }
  }
  return written;
}

void Store::DropSsdCopyLocked(Tensor* t) {
  if (!t->on_ssd()) return;
  if (t->in_index()) ssd_queue_.Remove(t);
  ssd_->Forget(t->ssd());
  RewriteRecordLocked(t->ssd(), 0);
  t->DropSsd();
  ChargeLocked(t);
  SyncTensorEventsLocked(t);
}

// ------------------------------------------------------------- spilling

bool Store::MakeSsdRoomLocked(uint64_t need) {
  const auto mark = static_cast<uint64_t>(kSsdEvictAt * static_cast<double>(ssd_->capacity()));
  while (ssd_->live_bytes() + need > mark) {
    Tensor* v = ssd_queue_.PickVictim(SsdEvictable);
    if (v == nullptr) return false;
    EvictFromSsdLocked(v);
  }
  return true;
}

bool Store::SsdEvictable(const Tensor* t) {
  // The SSD copy of a tensor that DRAM holds can always go; an SSD-only
  // tensor goes from the index, so only a leaf nothing holds.
  if (t->busy()) return false;
  return t->in_dram() || (t->holds() == 0 && t->pins() == 0 && t->foreign_children == 0);
}

void Store::EvictFromSsdLocked(Tensor* v) {
  stats_.ssd_evictions++;
  if (v->in_dram()) {
    DropSsdCopyLocked(v);
  } else {
    gdsf_.OnEvict(*v);
    NoteLostLocked(v);
    RemoveResult ignored;
    RemoveSubtreeLocked(v->ns, v->nodes.front(), &ignored);
  }
}

bool Store::SpillLocked(Tensor* t, core::UniqueLock& lk, bool free_dram) {
  // Ancestors first (keeping their DRAM copies): a record is only of use
  // after a restart if the records of its whole prefix are there too.
  // GDSF keeps ancestors' priority above their descendants', so this
  // writes little: shared heads, once.
  std::vector<Tensor*> up;
  for (const RadixNode* n = t->nodes.front()->parent; n->tensor != nullptr; n = n->parent) {
    Tensor* a = n->tensor;
    if (a != t && (up.empty() || up.back() != a)) up.push_back(a);
  }
  if (!up.empty()) {
    t->BeginIo(Tensor::Io::kSpilling);  // nobody else takes it meanwhile
    // Holds keep the ancestors in the index (and their structs alive)
    // across the lock releases; their bytes may come and go meanwhile.
    std::vector<TensorHold> held;
    held.reserve(up.size());
    for (Tensor* a : up) held.emplace_back(*this, a);
    for (auto it = held.rbegin(); it != held.rend(); ++it) {
      Tensor* a = it->get();
      if (a->in_index() && a->in_dram() && !a->on_ssd() && !a->busy() && a->cache_class == CacheClass::kOwned &&
          !a->remote() && a->spill_failed_gen != ssd_gen_) {
        SpillOneLocked(a, lk, /*free_dram=*/false);
      } else if (a->in_index() && a->remote() && !a->stub_on_ssd()) {
        // Another node's increment: its tokens and owner, so that this one
        // can be placed below it again after a restart.
        WriteStubLocked(a, lk);
      }
    }
    held.clear();  // each freed if it left the index meanwhile
    t->EndIo(Tensor::Io::kSpilling);
    io_done_.NotifyAll();
    if (!t->in_index() || !t->in_dram() || t->on_ssd() || t->pins() != 0) {
      // It changed while the lock was released: let the caller look again.
      MaybeDestroyLocked(t);
      return true;
    }
  }
  return SpillOneLocked(t, lk, free_dram);
}

Result<SsdLocation> Store::AppendHeaderLocked(RecordHeader h, core::UniqueLock& lk) {
  appends_in_flight_++;
  lk.Unlock(mu_);
  Result<SsdLocation> loc = ssd_->Append(std::move(h), {});
  lk.Lock(mu_);
  appends_in_flight_--;
  io_done_.NotifyAll();
  return loc;
}

void Store::WriteStubLocked(Tensor* a, core::UniqueLock& lk) {
  uint64_t ignored;
  RecordHeader h = TensorRecordLocked(*a, &ignored);
  h.kind = RecordKind::kRemote;
  h.owner_node = a->owner();
  h.seq = next_seq_++;
  const uint64_t written_tokens = h.tokens.size();
  const Times written_times = h.times;
  Result<SsdLocation> loc = AppendHeaderLocked(std::move(h), lk);
  if (!loc.ok()) {
    PTS_WARN("ssd", "writing the record of a remote increment: " << loc.status().ToString());
    return;
  }
  if (!a->in_index() || a->stub_on_ssd()) {
    // Removed (or written by another spill) meanwhile.
    ssd_->Forget(*loc);
    RewriteRecordLocked(*loc, 0);
    return;
  }
  a->SetStub(*loc);
  a->record_times = written_times;
  if (TensorTimesLocked(*a) != written_times) NoteTimesChangedLocked(a);
  if (const uint64_t live = LiveTokens(*a); live < written_tokens) RewriteRecordLocked(*loc, live);
}

void Store::DropStubLocked(Tensor* t) {
  if (!t->stub_on_ssd()) return;
  ssd_->Forget(t->stub());
  RewriteRecordLocked(t->stub(), 0);
  t->ForgetStub();
}

bool Store::SpillOneLocked(Tensor* t, core::UniqueLock& lk, bool free_dram) {
  uint64_t bytes = 0;
  RecordHeader h = TensorRecordLocked(*t, &bytes);
  const uint64_t written_tokens = h.tokens.size();
  const Times written_times = h.times;
  h.seq = next_seq_++;
  auto failed = [&](const Status& why) REQUIRES(mu_) {
    t->spill_failed_gen = ssd_gen_;
    stats_.ssd_spill_failures++;
    if (stats_.ssd_spill_failures <= 10 || stats_.ssd_spill_failures % 1000 == 0) {
      PTS_WARN("ssd", "spill of tensor " << t->id.value << " (" << bytes << " bytes) failed: " << why.ToString()
                                         << " [" << stats_.ssd_spill_failures << " so far]");
    }
    cleaner_wake_.NotifyOne();
    return false;
  };
  if (!NamespaceSsdRoomLocked(t->ns, SsdTier::FootprintBound(h))) {
    return failed(ResourceExhausted("namespace '" + t->ns->info.name + "' is at its SSD quota of " +
                                    std::to_string(t->ns->ssd_quota) + " bytes with data that cannot go"));
  }
  if (!MakeSsdRoomLocked(SsdTier::FootprintBound(h))) {
    return failed(ResourceExhausted("the SSD tier is full of data that cannot go"));
  }
  t->BeginIo(Tensor::Io::kSpilling);
  appends_in_flight_++;
  const uint8_t* src = arena_->data() + t->arena_offset;
  lk.Unlock(mu_);
  Result<SsdLocation> loc = ssd_->Append(std::move(h), std::span<const uint8_t>(src, bytes));
  lk.Lock(mu_);
  appends_in_flight_--;
  t->EndIo(Tensor::Io::kSpilling);
  io_done_.NotifyAll();
  if (!loc.ok()) {
    failed(loc.status());
    MaybeDestroyLocked(t);
    return false;
  }
  stats_.ssd_spills++;
  stats_.ssd_spill_bytes += bytes;
  stats_.ssd_stored_bytes += loc->stored_bytes;
  if (!t->in_index()) {
    // Removed while it was being written: the record must not outlive it.
    ssd_->Forget(*loc);
    RewriteRecordLocked(*loc, 0);
    MaybeDestroyLocked(t);
    return true;
  }
  t->MarkSpilled(*loc);
  ChargeLocked(t);
  // Other spills of its namespace ran while the lock was released.
  if (t->ns->ssd_quota != 0 && t->ns->ssd_bytes > t->ns->ssd_quota) NamespaceSsdRoomLocked(t->ns, 0);
  if (!t->in_index() || !t->on_ssd()) {
    MaybeDestroyLocked(t);
    return true;
  }
  SyncTensorEventsLocked(t);
  t->record_times = written_times;
  if (TensorTimesLocked(*t) != written_times) NoteTimesChangedLocked(t);
  ssd_queue_.Add(t);
  if (const uint64_t live = LiveTokens(*t); live < written_tokens) RewriteRecordLocked(*loc, live);
  if (free_dram && t->pins() == 0 && t->in_dram()) {
    // A pin that came meanwhile keeps the DRAM copy; otherwise it goes now.
    FreeDramLocked(t);
    stats_.evictions++;
    stats_.evicted_bytes += t->bytes;
  }
  return true;
}

Result<uint64_t> Store::PersistAll() {
  core::UniqueLock lk(mu_);
  if (!SsdEnabled()) return uint64_t{0};
  std::vector<std::pair<double, uint64_t>> order;  // (priority, tensor id)
  for (const auto& [id, t] : tensors_) {
    if (t->cache_class == CacheClass::kOwned && t->in_index() && t->in_dram() && !t->on_ssd()) {
      order.push_back({t->priority, id});
    }
  }
  std::sort(order.begin(), order.end(), std::greater<>());
  uint64_t written = 0, failed = 0;
  for (const auto& [prio, id] : order) {
    auto it = tensors_.find(id);  // the lock was released: look it up again
    if (it == tensors_.end()) continue;
    Tensor* t = it->second.get();
    if (!t->in_index() || !t->in_dram() || t->on_ssd() || t->busy()) continue;
    if (SpillLocked(t, lk, /*free_dram=*/false)) {
      ++written;
    } else {
      ++failed;
    }
  }
  PTS_INFO("ssd", "persisted " << written << " tensor(s) to SSD" << (failed ? ", " : "")
                               << (failed ? std::to_string(failed) + " did not fit or failed" : ""));
  lk.Unlock();
  SyncTimes();  // and the times of those that were there already
  return written;
}

// --------------------------------------------------------------- filling

void Store::FillLocked(const std::vector<Tensor*>& missing, core::UniqueLock& lk) {
  struct Job {
    TensorHold t;  // its struct outlives the reads (kFilling keeps its record)
    SsdLocation loc;
    uint64_t off = 0;
    Status status;
    NamespaceKey ns;  // its namespace, charged dram_pending for it meanwhile
    uint64_t pending = 0;
  };
  std::vector<Job> jobs;
  for (Tensor* t : missing) {
    if (t->busy() || t->in_dram() || !t->on_ssd() || !t->in_index()) continue;
    t->BeginIo(Tensor::Io::kFilling);
    jobs.push_back(Job{TensorHold(*this, t), t->ssd(), 0, Status::OK(), NamespaceKey::Of(*t->ns), 0});
  }
  for (size_t i = 0; i < jobs.size(); ++i) {
    // Within its namespace's DRAM quota (its own tensors make room), while
    // it is still in the index (the lock was released for the last one).
    Tensor* jt = jobs[i].t.get();
    Result<uint64_t> off = jt->in_index() ? AllocateLocked(jobs[i].loc.payload_bytes, CacheClass::kOwned, lk, false, jt->ns)
                                        : Result<uint64_t>(Aborted("removed meanwhile"));
    if (!off.ok()) {
      // No room for the rest: the pin serves the part before them.
      for (size_t j = i; j < jobs.size(); ++j) jobs[j].t->EndIo(Tensor::Io::kFilling);
      jobs.resize(i);  // their holds go: each freed if it left the index meanwhile
      break;
    }
    jobs[i].off = *off;
    jobs[i].pending = alloc_.AllocatedSize(*off);
    AddPendingLocked(jobs[i].ns, static_cast<int64_t>(jobs[i].pending));
  }
  if (!jobs.empty()) {
    uint8_t* arena = arena_->data();
    lk.Unlock(mu_);
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t read_bytes = 0;
    std::vector<std::future<Status>> reads;
    for (const Job& j : jobs) {
      read_bytes += j.loc.payload_bytes;
      SsdTier* tier = ssd_.get();
      std::span<uint8_t> dst(arena + j.off, j.loc.payload_bytes);
      reads.push_back(io_->Submit([tier, loc = j.loc, dst] { return tier->ReadPayload(loc, dst); }));
    }
    for (size_t i = 0; i < jobs.size(); ++i) jobs[i].status = reads[i].get();
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    PTS_DEBUG("ssd", "filled " << jobs.size() << " tensor(s), " << read_bytes << " bytes in " << secs << " s ("
                               << (secs > 0 ? read_bytes / secs / 1e9 : 0) << " GB/s)");
    lk.Lock(mu_);
  }
  for (Job& j : jobs) {
    Tensor* t = j.t.get();
    t->EndIo(Tensor::Io::kFilling);
    AddPendingLocked(j.ns, -static_cast<int64_t>(j.pending));
    if (j.status.ok() && t->in_index() && t->on_ssd() && t->ssd() == j.loc) {
      t->MarkFilled(j.off, alloc_.AllocatedSize(j.off));
      ChargeLocked(t);
      stats_.owned_bytes += t->allocated;
      queue_[static_cast<int>(t->cache_class)].Add(t);
      SyncTensorEventsLocked(t);
      stats_.ssd_fills++;
      stats_.ssd_fill_bytes += j.loc.payload_bytes;
    } else {
      alloc_.Free(j.off);
      if (!j.status.ok()) {
        // Never serve what failed its checksum: the tensor leaves the index
        // (with what hangs below it, which cannot be reached without it),
        // and a later save stores it again.
        PTS_ERROR("ssd", "tensor " << t->id.value << ": " << j.status.ToString()
                                   << "; dropping it and its descendants from the index");
        DropFromIndexLocked(j.t);
      }
    }
    j.t.Release();  // freed if it left the index meanwhile
  }
  io_done_.NotifyAll();
}

}  // namespace ptstore::storage

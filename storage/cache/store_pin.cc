// Lookups, pins and leases (store.h): the longest stored prefix of a
// prompt, brought into DRAM (SSD fills, remote fetches) and pinned under a
// lease; releases and expiry; LoadCopy.
#include <algorithm>

#include "core/logging.h"
#include "core/stream_copy.h"
#include "storage/cache/store.h"
#include "storage/cache/tensor_refs.h"

namespace ptstore::storage {

namespace {
constexpr uint64_t kInternalSession = 0;
constexpr uint64_t kNeverExpires = UINT64_MAX;  // lease_ms of the store's own pins

// Whether step `st` of a match (its blocks start at block `first`) must be
// in DRAM for a pin of blocks [from_block, ...).
bool Needed(uint64_t first, const MatchStep& st, uint64_t from_block) { return first + st.blocks > from_block; }
}  // namespace

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

std::vector<TensorPin> Store::PinDramPathLocked(const Match& m) {
  std::vector<TensorPin> pins;
  // (Transient fetched tensors are in no eviction queue: they stay.)
  for (const MatchStep& st : m.path) {
    Tensor* t = st.node->tensor;
    if (t->in_dram() && !t->transient() && (pins.empty() || pins.back().get() != t)) pins.emplace_back(*this, t);
  }
  return pins;
}

// What a pin's path lacks in DRAM (PinNeedsLocked): tensors only SSD holds,
// remote ones to fetch, whether another's I/O is on one (busy), and whether
// one can be brought back by nothing (stuck: the pin ends before it).
struct Store::PinNeeds {
  std::vector<Tensor*> from_ssd, from_peers;
  bool busy = false, stuck = false;
  bool reads() const { return !from_ssd.empty() || !from_peers.empty(); }
};

Result<PrefixResult> Store::PinImpl(const std::string& ns_name, std::span<const uint32_t> tokens, uint64_t session,
                                    uint64_t lease_ms, uint64_t from_block, bool fetch_remote, bool count) {
  core::UniqueLock lk(mu_);
  Namespace* ns;
  Match m;
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
  std::vector<TensorHold> transient;
  // Declared after `lk`, so destroyed before it: runs with mu_ held. (The
  // analysis does not look into destructors; AssertHeld says what holds.)
  struct TransientGuard {
    Store* store;
    std::vector<TensorHold>* tensors;
    ~TransientGuard() {
      store->mu_.AssertHeld();
      store->ReleaseTransientsLocked(*tensors);
    }
  } guard{this, &transient};
  for (int round = 0;;) {
    PTS_ASSIGN_OR_RETURN(ns, FindLocked(ns_name));
    m = WalkLocked(*ns, tokens);
    const PinNeeds need = PinNeedsLocked(m, from_block, fetch_remote, tried);
    if (!need.busy && !need.reads()) {
      if (!need.stuck) break;
    } else if (need.busy && !need.reads()) {
      WaitForPathIoLocked(m, lk);
      continue;
    }
    if (round >= kFillRounds || !need.reads()) {
      // Serve the prefix up to the first needed tensor that is not in DRAM.
      m = DramPrefixLocked(m, from_block);
      break;
    }
    if (!need.from_ssd.empty()) filled = true;
    if (!need.from_peers.empty()) fetched = true;
    ReadPathLocked(NamespaceKey::Of(*ns), m, need, lk, &tried, &transient);
    ++round;
  }
  if (filled) stats_.ssd_hits++;
  if (fetched) stats_.remote_hits++;
  if (count && !filled && !fetched && m.blocks > from_block) stats_.dram_hits++;
  const uint32_t bt = ns->info.layout.block_tokens;
  if (m.blocks > from_block && leases_.size() >= options_.max_leases) {
    return ResourceExhausted("too many active leases (" + std::to_string(leases_.size()) +
                             "): release pins or raise max_leases");
  }
  if (count) CountRequestLocked(tokens.size() / bt * bt, m.blocks * bt);
  if (m.blocks <= from_block) return PrefixResult{};
  // A hit also when a peer's fetch pins it (count == false): data other
  // nodes load is valuable to GDSF on its owner too.
  HitLocked(m);
  return LeaseLocked(*ns, m, session, lease_ms, from_block);
}

Store::PinNeeds Store::PinNeedsLocked(const Match& m, uint64_t from_block, bool fetch_remote,
                                      const std::vector<Tensor*>& tried) const {
  PinNeeds need;
  uint64_t first = 0;
  for (const MatchStep& st : m.path) {
    Tensor* t = st.node->tensor;
    const bool needed = Needed(first, st, from_block);
    first += st.blocks;
    if (!needed || t->in_dram()) continue;
    if (t->busy()) {
      need.busy = true;
    } else if (t->on_ssd() && SsdEnabled()) {
      if (need.from_ssd.empty() || need.from_ssd.back() != t) need.from_ssd.push_back(t);
    } else if (t->remote() && fetch_remote && fetcher_ != nullptr &&
               std::find(tried.begin(), tried.end(), t) == tried.end()) {
      if (need.from_peers.empty() || need.from_peers.back() != t) need.from_peers.push_back(t);
    } else {
      need.stuck = true;  // nothing brings it back: the pin ends before it
      break;
    }
  }
  return need;
}

void Store::WaitForPathIoLocked(const Match& m, core::UniqueLock& lk) {
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
  const std::vector<TensorPin> pinned = PinDramPathLocked(m);
  io_done_.Wait(lk);
}

void Store::ReadPathLocked(const NamespaceKey& ns, const Match& m, const PinNeeds& need, core::UniqueLock& lk,
                           std::vector<Tensor*>* tried, std::vector<TensorHold>* transient) {
  // Keep the DRAM part of the path while the rest is read (unpinned when
  // this returns, after the holds below go).
  const std::vector<TensorPin> present = PinDramPathLocked(m);
  // The structs of the remote ones outlive every unlock below (the SSD
  // fill first, then the fetch): a removal from another node meanwhile
  // takes them out of the index (the fetch then skips them) but must not
  // free them under us.
  std::vector<TensorHold> peers;
  peers.reserve(need.from_peers.size());
  for (Tensor* t : need.from_peers) peers.emplace_back(*this, t);
  if (!need.from_ssd.empty()) FillLocked(need.from_ssd, lk);
  // The fill released the lock: the namespace may have been dropped (its
  // struct freed) or made again meanwhile, so only its key crossed the
  // drop. Fetch only for the same one; otherwise the next round's lookup
  // says what is left.
  const Namespace* now = FindAgainLocked(ns);
  if (!need.from_peers.empty() && now != nullptr) {
    tried->insert(tried->end(), need.from_peers.begin(), need.from_peers.end());
    FetchLocked(*now, need.from_peers, lk, transient);
  }
}

Match Store::DramPrefixLocked(const Match& m, uint64_t from_block) const {
  Match cut;
  uint64_t at = 0;
  for (const MatchStep& st : m.path) {
    if (Needed(at, st, from_block) && !st.node->tensor->in_dram()) break;
    at += st.blocks;
    cut.path.push_back(st);
    cut.blocks += st.blocks;
  }
  return cut;
}

PrefixResult Store::LeaseLocked(const Namespace& ns, const Match& m, uint64_t session, uint64_t lease_ms,
                                uint64_t from_block) {
  PrefixResult r;
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
    const bool need = Needed(at, s, from_block);
    at += s.blocks;
    if (!need) continue;
    if (lease.tensors.empty() || lease.tensors.back() != s.node->tensor) lease.tensors.push_back(s.node->tensor);
  }
  for (Tensor* t : lease.tensors) PinLocked(t);
  r.lease_id = next_lease_++;
  r.matched_tokens = m.blocks * ns.info.layout.block_tokens;
  const uint64_t bb = ns.info.layout.BytesPerBlock();
  if (from_block == 0) {
    r.extents = ExtentsLocked(m, bb, true);
  } else {
    // Only the extents of blocks [from_block, ...).
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

}  // namespace ptstore::storage

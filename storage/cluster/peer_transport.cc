// What every transport shares (storage/cluster/peer_transport.h): the
// requester's message, the owner's pins of a fetch (the one owner side), the
// requester's check of an owner's reply and the in-process copy.
#include "storage/cluster/peer_transport.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "storage/cache/store.h"

namespace ptstore::storage {
namespace {

// An owner keeps the pins of an RMA fetch until the reader releases them,
// its connection closes, or this long (the other paths release at once).
constexpr uint64_t kFetchLeaseMs = 60000;

}  // namespace

ServedFetch::ServedFetch(ServedFetch&& o) noexcept
    : reply(std::move(o.reply)),
      extents(std::move(o.extents)),
      store_(o.store_),
      session_(o.session_),
      leases_(std::move(o.leases_)) {
  o.leases_.clear();
}

ServedFetch::~ServedFetch() {
  for (uint64_t l : leases_) store_->Release(l, session_).IgnoreError();
}

uint64_t ServedFetch::bytes() const {
  uint64_t n = 0;
  for (const auto& seg : extents) {
    for (const Extent& x : seg) n += x.length;
  }
  return n;
}

const uint8_t* ServedFetch::arena() const { return store_->arena_base(); }

core::PeerFetch FetchMessage(const NamespaceDef& ns, std::span<const uint32_t> tokens, const FetchRequest& req,
                             uint64_t* bytes) {
  const uint64_t bb = ns.info.layout.BytesPerBlock();
  const uint32_t bt = ns.info.layout.block_tokens;
  core::PeerFetch msg;
  msg.ns = ns;
  uint64_t spanned = 0, end = 0;
  for (const FetchSegment& s : req.segments) {
    msg.segments.push_back({s.start_block, s.end_block});
    spanned += (s.end_block - s.start_block) * bb;
    end = std::max(end, s.end_block);
  }
  msg.tokens.assign(tokens.begin(), tokens.begin() + std::min<uint64_t>(tokens.size(), end * bt));
  if (bytes != nullptr) *bytes = spanned;
  return msg;
}

Result<ServedFetch> PinForFetch(Store* store, const core::PeerFetch& req, uint64_t session) {
  const std::string& ns = req.ns.info.name;
  const uint32_t bt = req.ns.info.layout.block_tokens;
  const uint64_t prompt_blocks = req.tokens.size() / bt;
  ServedFetch served(store, session);
  served.reply.segments.resize(req.segments.size());
  served.extents.resize(req.segments.size());
  for (size_t i = 0; i < req.segments.size(); ++i) {
    const auto& seg = req.segments[i];
    auto& out = served.reply.segments[i];
    const uint64_t end = std::min(seg.end_block, prompt_blocks);
    if (end <= seg.start_block) {
      out.gone = true;
      continue;
    }
    auto prompt = std::span<const uint32_t>(req.tokens).first(end * bt);
    // On an error `served` releases what was pinned so far.
    PTS_ASSIGN_OR_RETURN(PrefixResult pin, store->PinHeld(ns, prompt, seg.start_block, session, kFetchLeaseMs));
    const uint64_t got_end = pin.matched_tokens / bt;
    if (pin.lease_id) served.AddLease(pin.lease_id);
    if (got_end < end) {
      // Short: the blocks past what was pinned are gone when this node does
      // not hold them along `prompt` (its index stops, or names another
      // owner there), not when the pin was only cut (DRAM full of pins).
      // The requester's run of this node's blocks may go on along a branch
      // this node lost without the requester hearing of it (e.g. killed
      // before the branch reached SSD): it then keeps the head sent here and
      // drops the tail, where a reply of no use to it would fail every load
      // through the head.
      Result<bool> held = store->Holds(ns, prompt, std::max(got_end, seg.start_block));
      out.gone = !held.ok() || !*held;
    }
    if (got_end <= seg.start_block) continue;  // nothing to send
    out.blocks = got_end - seg.start_block;
    served.extents[i] = std::move(pin.extents);
  }
  return served;
}

Status CheckFetchReply(const core::PeerFetchReply& rep, const FetchRequest& req) {
  if (rep.segments.size() != req.segments.size()) {
    return ProtocolError("PeerFetchReply has " + std::to_string(rep.segments.size()) + " segments, not " +
                         std::to_string(req.segments.size()));
  }
  for (size_t i = 0; i < rep.segments.size(); ++i) {
    if (rep.segments[i].blocks > req.segments[i].end_block - req.segments[i].start_block) {
      return ProtocolError("PeerFetchReply: more blocks than asked for");
    }
  }
  return Status::OK();
}

void ApplyFetchReply(const core::PeerFetchReply& rep, FetchRequest& req) {
  for (size_t i = 0; i < rep.segments.size(); ++i) {
    req.segments[i].fetched_blocks = rep.segments[i].blocks;
    req.segments[i].gone = rep.segments[i].gone;
  }
}

Status CopyServedFetch(const ServedFetch& served, FetchRequest& req, uint64_t block_bytes, uint8_t* arena,
                       uint64_t* copied) {
  PTS_RETURN_IF_ERROR(CheckFetchReply(served.reply, req));
  for (size_t i = 0; i < served.extents.size(); ++i) {
    uint64_t n = 0;
    for (const Extent& x : served.extents[i]) n += x.length;
    if (n != served.reply.segments[i].blocks * block_bytes) {
      return ProtocolError("PeerFetch: the owner's extents do not add up to the segment's blocks");
    }
  }
  uint64_t total = 0;
  for (size_t i = 0; i < served.extents.size(); ++i) {
    uint64_t at = req.segments[i].arena_offset;
    for (const Extent& x : served.extents[i]) {
      std::memcpy(arena + at, served.arena() + x.arena_offset, x.length);
      at += x.length;
    }
    total += at - req.segments[i].arena_offset;
  }
  ApplyFetchReply(served.reply, req);
  if (copied != nullptr) *copied = total;
  return Status::OK();
}

}  // namespace ptstore::storage

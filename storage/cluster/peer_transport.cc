// What every transport shares (storage/cluster/peer_transport.h): the
// owner's pins of a fetch, and the requester's check of an owner's reply.
#include "storage/cluster/peer_transport.h"

#include <string>

#include "storage/cache/store.h"

namespace ptstore::storage {

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

}  // namespace ptstore::storage

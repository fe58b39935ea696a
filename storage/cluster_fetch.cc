// Remote loads (storage/cluster.h): one PeerFetch per owner carrying all of
// that owner's segments, all owners in parallel; the bytes come back as a
// TCP stream after the reply, or are pulled by one-sided RMA reads from the
// owner's registered arena (then released with PeerRelease).
#include <thread>

#include "core/logging.h"
#include "rdma/fabric.h"
#include "storage/cluster.h"
#include "storage/cluster_peer.h"

namespace ptstore::storage {

namespace {
// How long a timed-out RMA read may still land in its destination before
// the destination is handed back (rdma/fabric.h: reads are not cancellable).
constexpr int kRmaDrainMs = 5000;
}  // namespace

void Cluster::Fetch(const NamespaceDef& ns, std::span<const uint32_t> tokens, std::vector<FetchRequest>& requests) {
  std::vector<std::thread> others;
  for (size_t i = 1; i < requests.size(); ++i) {
    others.emplace_back([this, &ns, tokens, &requests, i] {
      if (std::shared_ptr<Peer> p = FindPeer(requests[i].owner)) FetchFrom(p.get(), ns, tokens, requests[i]);
    });
  }
  if (!requests.empty()) {
    if (std::shared_ptr<Peer> p = FindPeer(requests[0].owner)) FetchFrom(p.get(), ns, tokens, requests[0]);
  }
  for (std::thread& t : others) t.join();
}

void Cluster::FetchFrom(Peer* p, const NamespaceDef& ns, std::span<const uint32_t> tokens, FetchRequest& req) {
  if (!IsAlive(p)) return;  // its extents count as missing
  const uint64_t bb = ns.info.layout.BytesPerBlock();
  const uint32_t bt = ns.info.layout.block_tokens;
  core::PeerFetch msg;
  msg.ns = ns;
  uint64_t bytes = 0, end = 0;
  for (const FetchSegment& s : req.segments) {
    msg.segments.push_back({s.start_block, s.end_block});
    bytes += (s.end_block - s.start_block) * bb;
    end = std::max(end, s.end_block);
  }
  msg.tokens.assign(tokens.begin(), tokens.begin() + std::min<uint64_t>(tokens.size(), end * bt));
  bool rma = false;
  if (options_.data_path == core::DataPath::kRma && fabric_) {
    std::lock_guard lk(p->mu);
    rma = p->fabric_ready;
  }
  msg.path = rma ? core::DataPath::kRma : core::DataPath::kTcp;
  const int timeout_ms =
      options_.rpc_timeout_ms + static_cast<int>(static_cast<double>(bytes) / options_.min_fetch_bytes_per_s * 1000);
  counters_.fetch_requests++;
  const auto t0 = Clock::now();
  Result<rdma::PeerChannel::Conn> c = p->channel->Acquire(options_.connect_timeout_ms);
  auto attempt = [&] {
    return c.ok() ? (rma ? FetchRma(p, *c, msg, req, bb, timeout_ms) : FetchTcp(p, *c, msg, req, bb, timeout_ms))
                  : c.status();
  };
  Status st = attempt();
  // Once more on another connection when this one failed its MACs (a tamper
  // on the way: it is closed, and nothing it carried was kept) or was found
  // closed after idling in the pool (e.g. the owner closed it when it
  // refused a tampered frame). Anything else is the owner's answer or its
  // absence.
  if (c.ok() && (st.code() == Code::kCorruption || (st.code() == Code::kUnavailable && c->reused()))) {
    c->Poison();
    counters_.fetch_retries++;
    PTS_DEBUG("cluster", "fetch from node " << p->member.node_id << " again on another connection: " << st.ToString());
    c = p->channel->Acquire(options_.connect_timeout_ms);
    st = attempt();
  }
  counters_.fetch_latency.Observe(Clock::now() - t0);
  if (!st.ok()) {
    if (c.ok()) c->Poison();
    for (FetchSegment& s : req.segments) s.fetched_blocks = 0;  // a partial fetch serves nothing
    counters_.fetch_failures++;
    PTS_DEBUG("cluster", "fetch of " << bytes << " bytes from node " << p->member.node_id << ": " << st.ToString());
    if (st.code() == Code::kUnavailable || st.code() == Code::kDeadlineExceeded) MarkFailed(p, st);
  }
}

Status Cluster::FetchTcp(Peer* p, rdma::PeerChannel::Conn& c, const core::PeerFetch& msg, FetchRequest& req,
                         uint64_t bb, int timeout_ms) {
  core::Encoder e;
  msg.Encode(e);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  PTS_ASSIGN_OR_RETURN(rdma::Frame f, p->channel->Exchange(c, static_cast<uint16_t>(core::MsgType::kPeerFetch),
                                                            e.buffer(), timeout_ms));
  core::PeerFetchReply rep;
  PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &rep));
  if (rep.segments.size() != req.segments.size()) {
    return ProtocolError("PeerFetchReply has " + std::to_string(rep.segments.size()) + " segments, not " +
                         std::to_string(req.segments.size()));
  }
  uint64_t total = 0;
  for (size_t i = 0; i < rep.segments.size(); ++i) {
    if (rep.segments[i].blocks > req.segments[i].end_block - req.segments[i].start_block) {
      return ProtocolError("PeerFetchReply: more blocks than asked for");
    }
    total += rep.segments[i].blocks * bb;
  }
  if (total != rep.stream_bytes) {
    return ProtocolError("PeerFetchReply announces " + std::to_string(rep.stream_bytes) + " bytes for " +
                         std::to_string(total) + " bytes of blocks");
  }
  uint8_t* arena = const_cast<uint8_t*>(store_->arena_base());
  for (size_t i = 0; i < rep.segments.size(); ++i) {
    const uint64_t n = rep.segments[i].blocks * bb;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (n > 0) PTS_RETURN_IF_ERROR(c->ReceiveRaw(arena + req.segments[i].arena_offset, n, std::max<int64_t>(left, 1)));
  }
  // With frame MACs, the bytes count only once their tag matched: a run that
  // was altered on the way fails the fetch (its blocks a miss), before any
  // of them is marked fetched.
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
  PTS_RETURN_IF_ERROR(c->FinishReceiveRaw(std::max<int64_t>(left, 1)));
  for (size_t i = 0; i < rep.segments.size(); ++i) {
    req.segments[i].fetched_blocks = rep.segments[i].blocks;
    req.segments[i].gone = rep.segments[i].gone;
  }
  counters_.bytes_tcp += total;
  return Status::OK();
}

Status Cluster::FetchRma(Peer* p, rdma::PeerChannel::Conn& c, const core::PeerFetch& msg, FetchRequest& req,
                         uint64_t bb, int timeout_ms) {
  core::Encoder e;
  msg.Encode(e);
  PTS_ASSIGN_OR_RETURN(rdma::Frame f, p->channel->Exchange(c, static_cast<uint16_t>(core::MsgType::kPeerFetch),
                                                            e.buffer(), options_.rpc_timeout_ms));
  core::PeerFetchReply rep;
  PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &rep));
  if (rep.segments.size() != req.segments.size()) {
    return ProtocolError("PeerFetchReply has " + std::to_string(rep.segments.size()) + " segments, not " +
                         std::to_string(req.segments.size()));
  }
  std::vector<rdma::Fabric::ReadOp> ops;
  uint64_t total = 0;
  for (size_t i = 0; i < rep.segments.size(); ++i) {
    const auto& s = rep.segments[i];
    if (s.blocks > req.segments[i].end_block - req.segments[i].start_block) {
      return ProtocolError("PeerFetchReply: more blocks than asked for");
    }
    uint64_t local = req.segments[i].arena_offset, len = 0;
    for (const auto& piece : s.pieces) {
      ops.push_back({local, piece.remote_offset, piece.length});
      local += piece.length;
      len += piece.length;
    }
    if (len != s.blocks * bb) return ProtocolError("PeerFetchReply: pieces do not add up to the segment's blocks");
    total += len;
  }
  uint64_t handle, key;
  {
    std::lock_guard lk(p->mu);
    handle = p->fabric_handle;
    key = p->last.region_key;
  }
  Status read = ops.empty() ? Status::OK() : fabric_->Read(handle, key, ops, timeout_ms);
  if (!read.ok() && read.code() == Code::kDeadlineExceeded) {
    // Reads still in flight may land later: wait for them before the
    // destination goes back to the allocator.
    const auto until = Clock::now() + std::chrono::milliseconds(kRmaDrainMs);
    while (fabric_->reads_in_flight() > 0 && Clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }
  if (rep.lease_id != 0) {
    // The owner keeps the pins until released (or this connection closes).
    Result<core::EmptyReply> r = p->channel->CallOn<core::PeerRelease, core::EmptyReply>(
        c, core::PeerRelease{rep.lease_id}, options_.rpc_timeout_ms);
    if (!r.ok()) c.Poison();
  }
  PTS_RETURN_IF_ERROR(read);
  for (size_t i = 0; i < rep.segments.size(); ++i) {
    req.segments[i].fetched_blocks = rep.segments[i].blocks;
    req.segments[i].gone = rep.segments[i].gone;
  }
  counters_.bytes_rma += total;
  return Status::OK();
}

}  // namespace ptstore::storage

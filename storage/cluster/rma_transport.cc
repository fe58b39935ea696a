// The libfabric-RMA transport (storage/cluster/rma_transport.h).
#include "storage/cluster/rma_transport.h"

#include <thread>

#include "core/logging.h"
#include "storage/cache/store.h"

namespace ptstore::storage {

namespace {
// How long a timed-out RMA read may still land in its destination before
// the destination is handed back (rdma/fabric.h: reads are not cancellable).
constexpr int kRmaDrainMs = 5000;
}  // namespace

Result<std::unique_ptr<RmaTransport>> RmaTransport::Create(const ClusterOptions& options, core::Member self,
                                                           rdma::ClusterSecret secret, Store* store) {
  rdma::FabricOptions fo;
  fo.provider = options.fabric_provider;
  fo.node = self.host;
  PTS_ASSIGN_OR_RETURN(std::unique_ptr<rdma::Fabric> fabric, rdma::Fabric::Open(fo));
  uint8_t* arena = const_cast<uint8_t*>(store->arena_base());
  PTS_RETURN_IF_ERROR(fabric->RegisterRegion(arena, store->arena_bytes(), uint64_t{self.node_id} + 1));
  return std::unique_ptr<RmaTransport>(
      new RmaTransport(options, std::move(self), std::move(secret), arena, std::move(fabric)));
}

RmaTransport::RmaTransport(const ClusterOptions& options, core::Member self, rdma::ClusterSecret secret,
                           uint8_t* arena, std::unique_ptr<rdma::Fabric> fabric)
    : TcpTransport(options, std::move(self), std::move(secret), arena), fabric_(std::move(fabric)) {}

RmaTransport::~RmaTransport() { Stop(); }  // no connection serves reads of the arena past here

std::unique_ptr<PeerLink> RmaTransport::Connect(const core::Member& m) {
  return std::make_unique<RmaLink>(
      std::make_unique<rdma::PeerChannel>(self_.node_id, m.node_id, m.host, m.port, &secret_, PeerAuth()), options_,
      counters_, arena_, fabric_.get());
}

void RmaTransport::DescribeSelf(core::PeerPingReply* rep) const {
  rep->fabric_provider = fabric_->provider();
  const std::vector<uint8_t> a = fabric_->address();
  rep->fabric_address.assign(a.begin(), a.end());
  rep->region_key = fabric_->region_key();
}

Status RmaTransport::ServeRmaFetch(local::FramedSocket& sock, const local::Frame& f, const core::PeerFetch& req,
                                   ConnState& conn) {
  PTS_ASSIGN_OR_RETURN(ServedFetch served, service_->PinFetch(req, conn.session));
  for (size_t i = 0; i < served.extents.size(); ++i) {
    for (const Extent& x : served.extents[i]) served.reply.segments[i].pieces.push_back({x.arena_offset, x.length});
  }
  // The reader pulls the bytes, then releases them (PeerRelease).
  served.reply.lease_id = served.empty() ? 0 : conn.next_fetch++;
  core::Encoder e;
  served.reply.Encode(e);
  if (!Reply(sock, f, e.buffer()).ok()) {
    sock.Shutdown();  // the connection is done for; the pins go with `served`
    return Status::OK();
  }
  if (!served.empty()) conn.rma_fetches[served.reply.lease_id] = served.TakeLeases();
  return Status::OK();
}

// ------------------------------------------------------------------ link

RmaLink::RmaLink(std::unique_ptr<rdma::PeerChannel> channel, const ClusterOptions& options,
                 ClusterCounters* counters, uint8_t* arena, rdma::Fabric* fabric)
    : TcpLink(std::move(channel), options, counters, arena), fabric_(fabric) {}

RmaLink::~RmaLink() {
  core::MutexLock lk(mu_);
  if (ready_) fabric_->RemovePeer(handle_);
}

void RmaLink::OnPing(const core::PeerPingReply& rep) {
  core::MutexLock lk(mu_);
  region_key_ = rep.region_key;
  if (rep.fabric_address.empty() || rep.fabric_address == address_) return;
  if (ready_) fabric_->RemovePeer(handle_);
  ready_ = false;
  auto bytes = std::span(reinterpret_cast<const uint8_t*>(rep.fabric_address.data()), rep.fabric_address.size());
  Result<uint64_t> h = fabric_->AddPeer(bytes);
  if (h.ok()) {
    handle_ = *h;
    ready_ = true;
    address_ = rep.fabric_address;
  } else {
    PTS_WARN("cluster", "node " << channel_->peer_id() << ": its RMA address does not work: "
                                << h.status().ToString() << "; loads from it use TCP");
  }
}

Status RmaLink::FetchOn(rdma::PeerChannel::Conn& c, core::PeerFetch msg, FetchRequest& req, uint64_t bb,
                        int timeout_ms) {
  uint64_t handle = 0, key = 0;
  {
    core::MutexLock lk(mu_);
    if (!ready_) return FetchStream(c, std::move(msg), req, bb, timeout_ms);
    handle = handle_;
    key = region_key_;
  }
  msg.path = core::DataPath::kRma;
  core::Encoder e;
  msg.Encode(e);
  PTS_ASSIGN_OR_RETURN(local::Frame f, channel_->Exchange(c, static_cast<uint16_t>(core::MsgType::kPeerFetch),
                                                           e.buffer(), options_.rpc_timeout_ms));
  core::PeerFetchReply rep;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &rep));
  PTS_RETURN_IF_ERROR(CheckFetchReply(rep, req));
  std::vector<rdma::Fabric::ReadOp> ops;
  uint64_t total = 0;
  for (size_t i = 0; i < rep.segments.size(); ++i) {
    const auto& s = rep.segments[i];
    uint64_t local = req.segments[i].arena_offset, len = 0;
    for (const auto& piece : s.pieces) {
      ops.push_back({local, piece.remote_offset, piece.length});
      local += piece.length;
      len += piece.length;
    }
    if (len != s.blocks * bb) return ProtocolError("PeerFetchReply: pieces do not add up to the segment's blocks");
    total += len;
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
    Result<core::EmptyReply> r = channel_->CallOn<core::PeerRelease, core::EmptyReply>(
        c, core::PeerRelease{rep.lease_id}, options_.rpc_timeout_ms);
    if (!r.ok()) c.Poison();
  }
  PTS_RETURN_IF_ERROR(read);
  ApplyFetchReply(rep, req);
  counters_->bytes_rma += total;
  return Status::OK();
}

}  // namespace ptstore::storage

// The peer-facing side of a node (storage/cluster.h): accepts connections
// from other ptstored, authenticates them, and serves shard lookups and
// announcements, fetches of this node's bytes, removals and pings.
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <map>

#include "core/logging.h"
#include "rdma/fabric.h"
#include "rdma/framed_socket.h"
#include "rdma/tcp.h"
#include "storage/cluster.h"
#include "storage/cluster_peer.h"

namespace ptstore::storage {

namespace {
constexpr int kAuthTimeoutMs = 2000;
constexpr int kSendTimeoutMs = 10000;
// An owner keeps the pins of an RMA fetch until the reader releases them,
// its connection closes, or this long.
constexpr uint64_t kFetchLeaseMs = 60000;
constexpr int kRefusalLogMs = 10000;
// Replies to request `f` with `m` as message type f.type + 1.
template <typename M>
Status Reply(rdma::FramedSocket& sock, const rdma::Frame& f, const M& m) {
  core::Encoder e;
  m.Encode(e);
  return sock.Send(static_cast<uint16_t>(f.type + 1), f.request_id, e.buffer());
}

}  // namespace

Status Cluster::Listen() {
  PTS_ASSIGN_OR_RETURN(listen_fd_, rdma::ListenTcp(self_.host, self_.port, &port_));
  return Status::OK();
}

void Cluster::AcceptLoop() {
  while (!stopping_.load()) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    int fd = accept4(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_CLOEXEC);
    if (fd < 0) {
      if (stopping_.load()) return;
      if (errno == EINTR || errno == ECONNABORTED) continue;
      PTS_WARN("cluster", "accept: " << std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    rdma::TuneTcp(fd, kSendTimeoutMs);
    char host[256] = "?";
    getnameinfo(reinterpret_cast<sockaddr*>(&ss), len, host, sizeof(host), nullptr, 0, NI_NUMERICHOST);
    std::lock_guard lk(conns_mu_);
    // Reap the connections that ended.
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (it->done->load()) {
        it->thread.join();
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
    auto done = std::make_shared<std::atomic<bool>>(false);
    conns_.push_back(ServedConn{fd, std::thread([this, fd, remote = std::string(host), done] {
                                  ServePeer(fd, remote);
                                  done->store(true);
                                }),
                                done});
  }
}

void Cluster::ServePeer(int fd, std::string remote) {
  rdma::FramedSocket sock(fd);
  uint16_t version = 0;
  Result<uint32_t> peer =
      rdma::AuthenticateResponder(sock, secret_, self_.node_id, remote, kAuthTimeoutMs, &version, PeerAuth());
  if (!peer.ok()) {
    // Version refusals are counted apart (ptstore_peer_version_refusals_total).
    if (peer.status().code() == Code::kPermissionDenied &&
        peer.status().message().find("no common peer-protocol version") == std::string::npos) {
      counters_.auth_failures++;
    }
    return;  // logged by the responder
  }
  PTS_DEBUG("cluster", "node " << *peer << " from " << remote << " authenticated, peer protocol " << version);
  std::shared_ptr<Peer> member = FindPeer(*peer);
  if (member == nullptr) {
    // A node not (yet) in this node's file retries every heartbeat: warned
    // of once per kRefusalLogMs per node id, the rest at debug level.
    bool warn = false;
    {
      std::lock_guard lk(refused_mu_);
      auto [it, fresh] = refused_.try_emplace(*peer, Clock::now());
      if (fresh || Clock::now() - it->second > std::chrono::milliseconds(kRefusalLogMs)) {
        it->second = Clock::now();
        warn = true;
      }
    }
    if (warn) {
      PTS_WARN("cluster", "refusing node " << *peer << " from " << remote << ": not in the cluster file"
                                           << " (a SIGHUP after adding it there admits it)");
    } else {
      PTS_DEBUG("cluster", "refusing node " << *peer << " from " << remote << ": not in the cluster file");
    }
    return;
  }
  const uint64_t session = next_session_++;
  std::map<uint64_t, std::vector<uint64_t>> rma_fetches;  // fetch id -> leases
  uint64_t next_fetch = 1;
  while (!stopping_.load()) {
    Result<rdma::Frame> f = sock.Receive(-1);
    if (!f.ok()) break;  // closed, or garbage: the connection ends
    if (member->removed.load()) {
      // A Reload took it out of the cluster since it connected, or moved it
      // (then it is a member still, at its new address).
      member = FindPeer(*peer);
      if (member == nullptr) {
        PTS_WARN("cluster", "closing the connection of node " << *peer << " from " << remote
                                                              << ": no longer in the cluster file");
        break;
      }
    }
    ptstore::Status st;
    if (f->type == static_cast<uint16_t>(core::MsgType::kPeerFetch)) {
      core::PeerFetch req;
      st = rdma::DecodeBody(*f, &req);
      if (st.ok()) st = ServeFetch(sock, *f, req, session, &rma_fetches, &next_fetch);
    } else if (f->type == static_cast<uint16_t>(core::MsgType::kPeerRelease)) {
      core::PeerRelease req;
      st = rdma::DecodeBody(*f, &req);
      if (st.ok()) {
        auto it = rma_fetches.find(req.fetch_id);
        if (it == rma_fetches.end()) {
          st = NotFound("fetch " + std::to_string(req.fetch_id) + " is not held on this connection");
        } else {
          for (uint64_t l : it->second) store_->Release(l, session).IgnoreError();
          rma_fetches.erase(it);
          st = Reply(sock, *f, core::EmptyReply{});
          if (!st.ok()) break;
          continue;
        }
      }
    } else {
      st = DispatchPeer(sock, *f, session);
    }
    if (!st.ok()) {
      core::ErrorReply e{st.code(), st.message()};
      core::Encoder enc;
      e.Encode(enc);
      if (!sock.Send(static_cast<uint16_t>(core::MsgType::kError), f->request_id, enc.buffer()).ok()) break;
    }
  }
  store_->ReleaseSession(session);
}

Status Cluster::EnsureNamespace(const NamespaceDef& def) {
  // Creates it, or checks that ours has the same layout and salt (a node
  // whose namespace differs cannot share its data: an error, not a miss).
  Result<NamespaceInfo> r = store_->CreateNamespace(def.info.name, def.info.layout, def.salt, def.info.uid,
                                                    def.info.gid, def.info.mode, /*exist_ok=*/true);
  if (!r.ok()) return r.status().WithContext("namespace from another node");
  return Status::OK();
}

Status Cluster::DispatchPeer(rdma::FramedSocket& sock, const rdma::Frame& f, uint64_t session) {
  using core::MsgType;
  switch (static_cast<MsgType>(f.type)) {
    case MsgType::kPeerPing: {
      core::PeerPing req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      const StoreStats s = store_->Stats();
      core::PeerPingReply rep;
      rep.node_id = self_.node_id;
      rep.incarnation = incarnation_;
      rep.arena_bytes = s.arena_bytes;
      rep.used_bytes = s.used_bytes;
      rep.owned_bytes = s.owned_bytes;
      rep.replica_bytes = s.replica_bytes;
      if (fabric_) {
        rep.fabric_provider = fabric_->provider();
        const std::vector<uint8_t> a = fabric_->address();
        rep.fabric_address.assign(a.begin(), a.end());
        rep.region_key = fabric_->region_key();
      }
      return Reply(sock, f, rep);
    }
    case MsgType::kShardLookup: {
      core::ShardLookup req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_RETURN_IF_ERROR(EnsureNamespace(req.ns));
      PTS_ASSIGN_OR_RETURN(Ownership o, store_->Resolve(req.ns.info.name, req.tokens));
      return Reply(sock, f, core::ShardLookupReply{o.blocks, std::move(o.ranges), o.continues});
    }
    case MsgType::kShardAnnounce: {
      core::ShardAnnounce req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      PTS_RETURN_IF_ERROR(EnsureNamespace(req.ns));
      for (const auto& e : req.entries) {
        Result<uint64_t> r = store_->InsertRemote(req.ns.info.name, e.tokens, e.ranges);
        if (!r.ok()) PTS_DEBUG("cluster", "announce: " << r.status().ToString());
      }
      return Reply(sock, f, core::EmptyReply{});
    }
    case MsgType::kPeerHolds: {
      core::PeerHolds req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      core::PeerHoldsReply rep;
      for (const auto& e : req.entries) {
        Result<bool> h = store_->Holds(req.ns, e.tokens, e.from_block);
        rep.held.push_back(h.ok() && *h);  // an unknown namespace holds nothing
      }
      return Reply(sock, f, rep);
    }
    case MsgType::kPeerTiers: {
      core::PeerTiers req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      core::PeerTiersReply rep;
      for (const auto& e : req.entries) {
        Result<uint8_t> m = store_->HeldMedia(req.ns, e.tokens, e.from_block);
        rep.media.push_back(m.ok() ? *m : 0);  // an unknown namespace holds nothing
      }
      if (!req.hashes.empty()) {
        Result<std::vector<uint32_t>> t = store_->TokensOfHashes(req.ns, req.hashes, req.low64);
        if (t.ok()) rep.tokens = std::move(*t);
      }
      return Reply(sock, f, rep);
    }
    case MsgType::kPeerRemove: {
      core::PeerRemove req;
      PTS_RETURN_IF_ERROR(rdma::DecodeBody(f, &req));
      Result<RemoveResult> r = store_->RemoveFrom(req.ns, req.tokens, req.from_block);
      if (!r.ok() && r.status().code() != Code::kNotFound) return r.status();
      counters_.removals_applied++;
      const RemoveResult done = r.ok() ? *r : RemoveResult{};
      return Reply(sock, f, core::RemoveReply{done.nodes, done.bytes});
    }
    default:
      return ProtocolError(std::string("unexpected message type ") + std::to_string(f.type) + " (" +
                           core::MsgTypeName(f.type) + ") from another node");
  }
}

Status Cluster::ServeFetch(rdma::FramedSocket& sock, const rdma::Frame& f, const core::PeerFetch& req,
                           uint64_t session, std::map<uint64_t, std::vector<uint64_t>>* rma_fetches,
                           uint64_t* next_fetch) {
  PTS_RETURN_IF_ERROR(EnsureNamespace(req.ns));
  const std::string& ns = req.ns.info.name;
  const uint32_t bt = req.ns.info.layout.block_tokens;
  const uint64_t prompt_blocks = req.tokens.size() / bt;
  const bool rma = req.path == core::DataPath::kRma;
  if (rma && !fabric_) return InvalidArgument("this node has no RMA endpoint (its data_path is tcp)");
  core::PeerFetchReply rep;
  rep.segments.resize(req.segments.size());
  std::vector<uint64_t> leases;
  std::vector<std::vector<Extent>> extents(req.segments.size());
  auto release_all = [&] {
    for (uint64_t l : leases) store_->Release(l, session).IgnoreError();
  };
  for (size_t i = 0; i < req.segments.size(); ++i) {
    const auto& seg = req.segments[i];
    const uint64_t end = std::min(seg.end_block, prompt_blocks);
    if (end <= seg.start_block) {
      rep.segments[i].gone = true;
      continue;
    }
    auto prompt = std::span<const uint32_t>(req.tokens).first(end * bt);
    Result<PrefixResult> pin = store_->PinHeld(ns, prompt, seg.start_block, session, kFetchLeaseMs);
    if (!pin.ok()) {
      release_all();
      return pin.status();
    }
    const uint64_t got_end = pin->matched_tokens / bt;
    if (pin->lease_id) leases.push_back(pin->lease_id);
    if (got_end < end) {
      // Short: the blocks past what was pinned are gone when this node does
      // not hold them along `prompt` (its index stops, or names another
      // owner there), not when the pin was only cut (DRAM full of pins).
      // The requester's run of this node's blocks may go on along a branch
      // this node lost without the requester hearing of it (e.g. killed
      // before the branch reached SSD): it then keeps the head sent here and
      // drops the tail, where a reply of no use to it would fail every load
      // through the head.
      Result<bool> held = store_->Holds(ns, prompt, std::max(got_end, seg.start_block));
      rep.segments[i].gone = !held.ok() || !*held;
    }
    if (got_end <= seg.start_block) continue;  // nothing to send
    rep.segments[i].blocks = got_end - seg.start_block;
    extents[i] = std::move(pin->extents);
    if (rma) {
      for (const Extent& x : extents[i]) rep.segments[i].pieces.push_back({x.arena_offset, x.length});
    } else {
      for (const Extent& x : extents[i]) rep.stream_bytes += x.length;
    }
  }
  if (rma) {
    // The reader pulls the bytes, then releases them (PeerRelease).
    rep.lease_id = leases.empty() ? 0 : (*next_fetch)++;
    if (!Reply(sock, f, rep).ok()) {
      release_all();
      sock.Shutdown();  // the connection is done for
      return Status::OK();
    }
    if (!leases.empty()) (*rma_fetches)[rep.lease_id] = std::move(leases);
    return Status::OK();
  }
  // TCP: the reply, then every segment's bytes straight from the arena.
  Status st = Reply(sock, f, rep);
  const uint8_t* arena = store_->arena_base();
  for (size_t i = 0; st.ok() && i < extents.size(); ++i) {
    for (const Extent& x : extents[i]) {
      st = sock.SendRaw(arena + x.arena_offset, x.length);
      if (!st.ok()) break;
    }
  }
  // With frame MACs, the bytes' tag follows them (rdma/frame_mac.h).
  if (st.ok()) st = sock.FinishSendRaw();
  release_all();
  if (!st.ok()) {
    // Mid-stream: the reader cannot make sense of this connection any more.
    PTS_DEBUG("cluster", "sending a fetch: " << st.ToString());
    sock.Shutdown();
  }
  return Status::OK();
}

}  // namespace ptstore::storage

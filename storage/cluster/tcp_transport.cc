// The TCP-stream transport (storage/cluster/tcp_transport.h): the listener
// and the served connections (the owner side), then the link to a peer
// (the requester side).
#include "storage/cluster/tcp_transport.h"

#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "core/logging.h"
#include "rdma/tcp.h"

namespace ptstore::storage {

namespace {
constexpr int kAuthTimeoutMs = 2000;
constexpr int kSendTimeoutMs = 10000;

int64_t MsLeft(Clock::time_point deadline) {
  return std::max<int64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count(), 1);
}
}  // namespace

TcpTransport::TcpTransport(const ClusterOptions& options, core::Member self, rdma::ClusterSecret secret,
                           uint8_t* arena)
    : options_(options), self_(std::move(self)), secret_(std::move(secret)), arena_(arena) {}

TcpTransport::~TcpTransport() { Stop(); }

rdma::AuthOptions TcpTransport::PeerAuth() const {
  rdma::AuthOptions a;
  a.versions = rdma::LocalPeerVersions();
  if (options_.require_integrity) a.versions.min = std::max(a.versions.min, rdma::kPeerProtocolIntegrity);
  a.counters = &counters_->wire;
  return a;
}

Status TcpTransport::Open(PeerService* service, ClusterCounters* counters) {
  service_ = service;
  counters_ = counters;
  PTS_ASSIGN_OR_RETURN(listen_fd_, rdma::ListenTcp(self_.host, self_.port, &port_));
  return Status::OK();
}

void TcpTransport::Serve() {
  accept_thread_ = std::thread([this] { AcceptLoop(); });
}

void TcpTransport::Stop() {
  if (stopping_.exchange(true)) return;
  if (listen_fd_ >= 0) shutdown(listen_fd_, SHUT_RDWR);
  if (accept_thread_.joinable()) accept_thread_.join();
  std::list<ServedConn> conns;
  {
    core::MutexLock lk(conns_mu_);
    for (ServedConn& c : conns_) shutdown(c.fd, SHUT_RDWR);
    conns.swap(conns_);
  }
  for (ServedConn& c : conns) c.thread.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  listen_fd_ = -1;
}

std::unique_ptr<PeerLink> TcpTransport::Connect(const core::Member& m) {
  return std::make_unique<TcpLink>(
      std::make_unique<rdma::PeerChannel>(self_.node_id, m.node_id, m.host, m.port, &secret_, PeerAuth()), options_,
      counters_, arena_);
}

Status TcpTransport::Reply(local::FramedSocket& sock, const local::Frame& f, const std::vector<uint8_t>& body) {
  return sock.Send(static_cast<uint16_t>(f.type + 1), f.request_id, body);
}

void TcpTransport::AcceptLoop() {
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
    core::MutexLock lk(conns_mu_);
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

void TcpTransport::ServePeer(int fd, const std::string& remote) {
  local::FramedSocket sock(fd);
  uint16_t version = 0;
  Result<uint32_t> peer =
      rdma::AuthenticateResponder(sock, secret_, self_.node_id, remote, kAuthTimeoutMs, &version, PeerAuth());
  if (!peer.ok()) {
    // Version refusals are counted apart (ptstore_peer_version_refusals_total).
    if (peer.status().code() == Code::kPermissionDenied &&
        peer.status().message().find("no common peer-protocol version") == std::string::npos) {
      counters_->auth_failures++;
    }
    return;  // logged by the responder
  }
  PTS_DEBUG("cluster", "node " << *peer << " from " << remote << " authenticated, peer protocol " << version);
  if (!service_->Admit(*peer, remote, /*first=*/true)) return;
  ServeFrames(sock, *peer, remote);
}

void TcpTransport::ServeFrames(local::FramedSocket& sock, uint32_t peer, const std::string& remote) {
  ConnState conn;
  conn.session = service_->NewSession();
  while (!stopping_.load()) {
    Result<local::Frame> f = sock.Receive(-1);
    if (!f.ok()) break;  // closed, or garbage: the connection ends
    // A Reload may have taken it out of the cluster since it connected.
    if (!service_->Admit(peer, remote, /*first=*/false)) break;
    Status st;
    if (f->type == static_cast<uint16_t>(core::MsgType::kPeerFetch)) {
      core::PeerFetch req;
      st = local::DecodeBody(*f, &req);
      if (st.ok()) {
        st = req.path == core::DataPath::kRma ? ServeRmaFetch(sock, *f, req, conn)
                                              : ServeStreamFetch(sock, *f, req, conn.session);
      }
    } else if (f->type == static_cast<uint16_t>(core::MsgType::kPeerRelease)) {
      core::PeerRelease req;
      st = local::DecodeBody(*f, &req);
      if (st.ok()) {
        auto it = conn.rma_fetches.find(req.fetch_id);
        if (it == conn.rma_fetches.end()) {
          st = NotFound("fetch " + std::to_string(req.fetch_id) + " is not held on this connection");
        } else {
          service_->Release(it->second, conn.session);
          conn.rma_fetches.erase(it);
          if (!Reply(sock, *f, {}).ok()) break;  // EmptyReply: no fields
          continue;
        }
      }
    } else {
      Result<std::vector<uint8_t>> rep = service_->Handle(*f, conn.session);
      st = rep.ok() ? Reply(sock, *f, *rep) : rep.status();
      if (rep.ok() && !st.ok()) break;
      if (rep.ok()) continue;
    }
    if (!st.ok()) {
      core::ErrorReply e{st.code(), st.message()};
      core::Encoder enc;
      e.Encode(enc);
      if (!sock.Send(static_cast<uint16_t>(core::MsgType::kError), f->request_id, enc.buffer()).ok()) break;
    }
  }
  service_->EndSession(conn.session);
}

Status TcpTransport::ServeRmaFetch(local::FramedSocket&, const local::Frame&, const core::PeerFetch&, ConnState&) {
  return InvalidArgument("this node has no RMA endpoint (its data_path is tcp)");
}

Status TcpTransport::ServeStreamFetch(local::FramedSocket& sock, const local::Frame& f, const core::PeerFetch& req,
                                      uint64_t session) {
  PTS_ASSIGN_OR_RETURN(ServedFetch served, service_->PinFetch(req, session));
  served.reply.stream_bytes = served.bytes();
  core::Encoder e;
  served.reply.Encode(e);
  // The reply, then every segment's bytes straight from the arena.
  Status st = Reply(sock, f, e.buffer());
  for (size_t i = 0; st.ok() && i < served.extents.size(); ++i) {
    for (const Extent& x : served.extents[i]) {
      st = sock.SendRaw(served.arena() + x.arena_offset, x.length);
      if (!st.ok()) break;
    }
  }
  // With frame MACs, the bytes' tag follows them (rdma/frame_mac.h).
  if (st.ok()) st = sock.FinishSendRaw();
  if (!st.ok()) {
    // Mid-stream: the reader cannot make sense of this connection any more.
    PTS_DEBUG("cluster", "sending a fetch: " << st.ToString());
    sock.Shutdown();
  }
  return Status::OK();  // the pins go with `served`
}

// ------------------------------------------------------------------ link

TcpLink::TcpLink(std::unique_ptr<rdma::PeerChannel> channel, const ClusterOptions& options,
                 ClusterCounters* counters, uint8_t* arena)
    : channel_(std::move(channel)), options_(options), counters_(counters), arena_(arena) {}

Result<std::vector<uint8_t>> TcpLink::Exchange(core::MsgType type, const std::vector<uint8_t>& body,
                                               int timeout_ms) {
  PTS_ASSIGN_OR_RETURN(rdma::PeerChannel::Conn c, channel_->Acquire(timeout_ms));
  PTS_ASSIGN_OR_RETURN(local::Frame f, channel_->Exchange(c, static_cast<uint16_t>(type), body, timeout_ms));
  return std::move(f.body);
}

Status TcpLink::Fetch(const core::PeerFetch& msg, FetchRequest& req, uint64_t bb, int timeout_ms) {
  Result<rdma::PeerChannel::Conn> c = channel_->Acquire(options_.connect_timeout_ms);
  auto attempt = [&] { return c.ok() ? FetchOn(*c, msg, req, bb, timeout_ms) : c.status(); };
  Status st = attempt();
  // Once more on another connection when this one failed its MACs (a tamper
  // on the way: it is closed, and nothing it carried was kept) or was found
  // closed after idling in the pool (e.g. the owner closed it when it
  // refused a tampered frame). Anything else is the owner's answer or its
  // absence.
  if (c.ok() && (st.code() == Code::kCorruption || (st.code() == Code::kUnavailable && c->reused()))) {
    c->Poison();
    counters_->fetch_retries++;
    PTS_DEBUG("cluster", "fetch from node " << channel_->peer_id() << " again on another connection: "
                                            << st.ToString());
    c = channel_->Acquire(options_.connect_timeout_ms);
    st = attempt();
  }
  if (!st.ok() && c.ok()) c->Poison();
  return st;
}

Status TcpLink::FetchOn(rdma::PeerChannel::Conn& c, core::PeerFetch msg, FetchRequest& req, uint64_t bb,
                        int timeout_ms) {
  return FetchStream(c, std::move(msg), req, bb, timeout_ms);
}

Status TcpLink::FetchStream(rdma::PeerChannel::Conn& c, core::PeerFetch msg, FetchRequest& req, uint64_t bb,
                            int timeout_ms) {
  msg.path = core::DataPath::kTcp;
  core::Encoder e;
  msg.Encode(e);
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  PTS_ASSIGN_OR_RETURN(local::Frame f, channel_->Exchange(c, static_cast<uint16_t>(core::MsgType::kPeerFetch),
                                                           e.buffer(), timeout_ms));
  core::PeerFetchReply rep;
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, &rep));
  PTS_RETURN_IF_ERROR(CheckFetchReply(rep, req));
  uint64_t total = 0;
  for (const auto& s : rep.segments) total += s.blocks * bb;
  if (total != rep.stream_bytes) {
    return ProtocolError("PeerFetchReply announces " + std::to_string(rep.stream_bytes) + " bytes for " +
                         std::to_string(total) + " bytes of blocks");
  }
  for (size_t i = 0; i < rep.segments.size(); ++i) {
    const uint64_t n = rep.segments[i].blocks * bb;
    if (n > 0) PTS_RETURN_IF_ERROR(c->ReceiveRaw(arena_ + req.segments[i].arena_offset, n, MsLeft(deadline)));
  }
  // With frame MACs, the bytes count only once their tag matched: a run that
  // was altered on the way fails the fetch (its blocks a miss), before any
  // of them is marked fetched.
  PTS_RETURN_IF_ERROR(c->FinishReceiveRaw(MsLeft(deadline)));
  ApplyFetchReply(rep, req);
  counters_->bytes_tcp += total;
  return Status::OK();
}

}  // namespace ptstore::storage

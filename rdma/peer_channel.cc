#include "rdma/peer_channel.h"

#include "core/logging.h"
#include "rdma/tcp.h"

namespace ptstore::rdma {

PeerChannel::PeerChannel(uint32_t self_id, uint32_t peer_id, std::string host, uint16_t port,
                         const ClusterSecret* secret, AuthOptions auth, size_t max_idle)
    : self_id_(self_id),
      peer_id_(peer_id),
      host_(std::move(host)),
      port_(port),
      address_(host_ + ":" + std::to_string(port_)),
      secret_(secret),
      auth_(auth),
      max_idle_(max_idle) {}

PeerChannel::Conn::~Conn() {
  if (channel_ != nullptr && sock_ != nullptr && !poisoned_) channel_->Return(std::move(sock_), generation_);
}

void PeerChannel::Return(std::unique_ptr<local::FramedSocket> s, uint64_t generation) {
  core::MutexLock lk(mu_);
  if (generation == generation_ && idle_.size() < max_idle_) idle_.push_back(std::move(s));
}

void PeerChannel::Reset() {
  core::MutexLock lk(mu_);
  idle_.clear();
  generation_++;
}

Result<PeerChannel::Conn> PeerChannel::Acquire(int timeout_ms) {
  Conn c;
  c.channel_ = this;
  {
    core::MutexLock lk(mu_);
    c.generation_ = generation_;
    if (!idle_.empty()) {
      c.sock_ = std::move(idle_.back());
      idle_.pop_back();
      c.reused_ = true;
      return c;
    }
  }
  PTS_ASSIGN_OR_RETURN(int fd, ConnectTcp(host_, port_, timeout_ms));
  auto sock = std::make_unique<local::FramedSocket>(fd);
  Result<uint32_t> peer = AuthenticateInitiator(*sock, *secret_, self_id_, address_, peer_id_, timeout_ms, nullptr, auth_);
  if (!peer.ok()) return peer.status();
  c.sock_ = std::move(sock);
  return c;
}

Result<local::Frame> PeerChannel::Exchange(Conn& c, uint16_t type, const std::vector<uint8_t>& body, int timeout_ms) {
  const uint64_t id = c.NextRequestId();
  if (Status st = c->Send(type, id, body); !st.ok()) {
    c.Poison();
    return st.WithContext(std::string("node ") + std::to_string(peer_id_) + " at " + address_);
  }
  Result<local::Frame> f = c->Receive(timeout_ms);
  if (!f.ok()) {
    c.Poison();
    return f.status().WithContext(std::string(core::MsgTypeName(type)) + " to node " + std::to_string(peer_id_) +
                                  " at " + address_);
  }
  if (f->request_id != id) {
    c.Poison();
    return ProtocolError("node " + std::to_string(peer_id_) + " answered request " + std::to_string(f->request_id) +
                         ", not " + std::to_string(id));
  }
  if (f->type == static_cast<uint16_t>(core::MsgType::kError)) {
    core::ErrorReply e;
    if (Status st = local::DecodeBody(*f, &e); !st.ok()) {
      c.Poison();
      return st;
    }
    return e.ToStatus();
  }
  if (f->type != type + 1) {
    c.Poison();
    return ProtocolError(std::string("node ") + std::to_string(peer_id_) + " answered " + core::MsgTypeName(type) +
                         " with " + core::MsgTypeName(f->type));
  }
  return f;
}

}  // namespace ptstore::rdma

// Connections from this node to one peer node: a small pool of TCP
// connections, each authenticated with the cluster secret (rdma/auth.h)
// when it is opened, used for one request at a time.
//
// Every call has a deadline: connecting, authenticating, sending and
// waiting for the reply. A connection on which anything failed is closed,
// never reused (the peer may still answer the old request on it).
//
// Thread safety: all methods may be called from many threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/messages.h"
#include "core/mutex.h"
#include "rdma/auth.h"
#include "local/framed_socket.h"

namespace ptstore::rdma {

class PeerChannel {
 public:
  // `auth`: the versions offered and the counters (rdma/auth.h); with an
  // agreed version of kPeerProtocolIntegrity or later every connection
  // carries MACs, and a reply whose MAC fails ends its call with Corruption
  // (logged, counted) and closes that connection.
  PeerChannel(uint32_t self_id, uint32_t peer_id, std::string host, uint16_t port, const ClusterSecret* secret,
              AuthOptions auth = {}, size_t max_idle = 4);
  PeerChannel(const PeerChannel&) = delete;
  PeerChannel& operator=(const PeerChannel&) = delete;

  // A connection borrowed from the pool; back to the pool when destroyed
  // unless Poison() was called.
  class Conn {
   public:
    Conn() = default;
    Conn(Conn&& o) noexcept = default;
    Conn& operator=(Conn&& o) noexcept = default;
    ~Conn();
    local::FramedSocket* operator->() const { return sock_.get(); }
    local::FramedSocket& socket() const { return *sock_; }
    void Poison() { poisoned_ = true; }
    // It came from the idle pool (not opened for this call): the peer may
    // have closed it meanwhile.
    bool reused() const { return reused_; }
    uint64_t NextRequestId() { return ++request_id_; }

   private:
    friend class PeerChannel;
    PeerChannel* channel_ = nullptr;
    std::unique_ptr<local::FramedSocket> sock_;
    bool poisoned_ = false;
    bool reused_ = false;
    uint64_t request_id_ = 0;
    uint64_t generation_ = 0;
  };

  // An idle connection, or a new one (connected and authenticated within
  // timeout_ms).
  Result<Conn> Acquire(int timeout_ms) EXCLUDES(mu_);

  // Sends `req` and waits for a reply of type Rep (or an ErrorReply, which
  // becomes its Status) within timeout_ms.
  template <typename Req, typename Rep>
  Result<Rep> Call(const Req& req, int timeout_ms) EXCLUDES(mu_) {
    PTS_ASSIGN_OR_RETURN(Conn c, Acquire(timeout_ms));
    return CallOn<Req, Rep>(c, req, timeout_ms);
  }
  template <typename Req, typename Rep>
  Result<Rep> CallOn(Conn& c, const Req& req, int timeout_ms) {
    PTS_ASSIGN_OR_RETURN(local::Frame f, Exchange(c, static_cast<uint16_t>(Req::kType), Encode(req), timeout_ms));
    Rep rep;
    if (Status st = local::DecodeBody(f, &rep); !st.ok()) {
      c.Poison();
      return st;
    }
    return rep;
  }
  // Sends a request frame and returns its reply frame (an ErrorReply turned
  // into its Status; a reply of another type or id is a Protocol error).
  Result<local::Frame> Exchange(Conn& c, uint16_t type, const std::vector<uint8_t>& body, int timeout_ms);

  // Closes the idle connections (the peer died or restarted).
  void Reset() EXCLUDES(mu_);
  uint32_t peer_id() const { return peer_id_; }
  const std::string& address() const { return address_; }

 private:
  template <typename M>
  static std::vector<uint8_t> Encode(const M& m) {
    core::Encoder e;
    m.Encode(e);
    return e.buffer();
  }
  void Return(std::unique_ptr<local::FramedSocket> s, uint64_t generation) EXCLUDES(mu_);

  const uint32_t self_id_;
  const uint32_t peer_id_;
  const std::string host_;
  const uint16_t port_;
  const std::string address_;
  const ClusterSecret* secret_;
  const AuthOptions auth_;
  const size_t max_idle_;
  core::Mutex mu_;
  std::vector<std::unique_ptr<local::FramedSocket>> idle_ GUARDED_BY(mu_);
  uint64_t generation_ GUARDED_BY(mu_) = 0;  // bumped by Reset
};

}  // namespace ptstore::rdma

// The TCP-stream transport (storage/cluster/peer_transport.h): every
// message on a small pool of authenticated TCP connections per peer
// (rdma/peer_channel.h); a fetch's reply is followed on its connection by
// the pinned bytes, straight from the owner's arena into the requester's
// (with frame MACs, their tag after them).
//
// Serving: one accept thread, one thread per accepted connection. A
// connection is authenticated with the cluster secret, then served while its
// node is a member (PeerService::Admit before every request); its pins live
// in one session that ends with the connection.
//
// Thread safety: all public methods may be called from any thread. Lock
// order: conns_mu_ alone (nothing is called under it but thread creation).
#pragma once

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/mutex.h"
#include "rdma/auth.h"
#include "rdma/peer_channel.h"
#include "storage/cluster/cluster.h"
#include "storage/cluster/peer_transport.h"

namespace ptstore::storage {

class TcpTransport : public PeerTransport {
 public:
  // `self`: where this node listens (port 0: any, tests); `arena`: this
  // node's arena, the destination of fetches. The secret must outlive it.
  TcpTransport(const ClusterOptions& options, core::Member self, rdma::ClusterSecret secret, uint8_t* arena);
  ~TcpTransport() override;  // Stop()

  Status Open(PeerService* service, ClusterCounters* counters) override;
  void Serve() override;
  void Stop() override;
  std::unique_ptr<PeerLink> Connect(const core::Member& m) override;
  uint16_t port() const override { return port_; }
  std::string data_path() const override { return "tcp"; }

 protected:
  // What one served connection holds: its session, and the pins of the RMA
  // fetches its reader has not released yet (by fetch id).
  struct ConnState {
    uint64_t session = 0;
    std::map<uint64_t, std::vector<uint64_t>> rma_fetches;
    uint64_t next_fetch = 1;
  };
  // Serves a fetch asked for with DataPath::kRma: here, an error (this node
  // has no RMA endpoint); RmaTransport pins and sends the addresses.
  virtual Status ServeRmaFetch(local::FramedSocket& sock, const local::Frame& f, const core::PeerFetch& req,
                               ConnState& conn);
  // The versions this node offers (require_integrity: only those with frame
  // MACs) and the counters, for every connection in and out.
  rdma::AuthOptions PeerAuth() const;
  // Replies to request `f` with `body` as message type f.type + 1.
  static Status Reply(local::FramedSocket& sock, const local::Frame& f, const std::vector<uint8_t>& body);

  const ClusterOptions options_;
  const core::Member self_;
  const rdma::ClusterSecret secret_;
  uint8_t* const arena_;
  PeerService* service_ = nullptr;
  ClusterCounters* counters_ = nullptr;

 private:
  void AcceptLoop();
  // Serves one connection until it closes or its node is no longer a member.
  void ServePeer(int fd, const std::string& remote);
  // The frames of one authenticated connection.
  void ServeFrames(local::FramedSocket& sock, uint32_t peer, const std::string& remote);
  Status ServeStreamFetch(local::FramedSocket& sock, const local::Frame& f, const core::PeerFetch& req,
                          uint64_t session);

  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stopping_{false};
  std::thread accept_thread_;
  struct ServedConn {
    int fd;
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };
  core::Mutex conns_mu_;
  std::list<ServedConn> conns_ GUARDED_BY(conns_mu_);
};

// The link to one peer over a PeerChannel.
class TcpLink : public PeerLink {
 public:
  TcpLink(std::unique_ptr<rdma::PeerChannel> channel, const ClusterOptions& options, ClusterCounters* counters,
          uint8_t* arena);
  Result<std::vector<uint8_t>> Exchange(core::MsgType type, const std::vector<uint8_t>& body,
                                        int timeout_ms) override;
  // One try, and once more on another connection when the first failed its
  // MACs or was found closed after idling in the pool.
  Status Fetch(const core::PeerFetch& msg, FetchRequest& req, uint64_t block_bytes, int timeout_ms) override;
  void Reset() override { channel_->Reset(); }

 protected:
  // One try on connection `c`: here the TCP stream.
  virtual Status FetchOn(rdma::PeerChannel::Conn& c, core::PeerFetch msg, FetchRequest& req, uint64_t block_bytes,
                         int timeout_ms);
  Status FetchStream(rdma::PeerChannel::Conn& c, core::PeerFetch msg, FetchRequest& req, uint64_t block_bytes,
                     int timeout_ms);

  const std::unique_ptr<rdma::PeerChannel> channel_;
  const ClusterOptions& options_;  // the transport's
  ClusterCounters* const counters_;
  uint8_t* const arena_;
};

}  // namespace ptstore::storage

// One client connection of ptstored: decodes requests, checks permissions,
// calls the node (storage/server/node.h: the store, and the cluster around it),
// encodes replies.
//
// Thread safety: a Session runs on its own thread; Stop() may be called from
// another thread to end it.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <thread>

#include "core/shm.h"
#include "rdma/framed_socket.h"
#include "storage/access.h"
#include "storage/cache/store.h"

namespace ptstore::storage {

class Node;
struct ServerOptions;

class Session {
 public:
  // `peer`: the connection's kernel-checked credentials (SO_PEERCRED).
  Session(Node* node, const ServerOptions* options, int fd, uint64_t id, const Credentials& peer);
  ~Session();  // joins the thread

  void Start();
  void Stop();  // wakes the thread; the session then releases its leases
  bool done() const { return done_.load(); }
  const Credentials& peer() const { return peer_; }

 private:
  void Run();
  // Handles one request and sends its reply; a failure it returns is sent
  // back by the caller as an ErrorReply.
  Status Dispatch(rdma::Frame& f);
  // One handler per request type (Dispatch picks it): decode, check, do,
  // reply. The connection and namespaces are in session.cc, prefixes and
  // locations in session_requests.cc.
  Status OnHello(rdma::Frame& f);
  Status OnRegisterBuffer(rdma::Frame& f);
  Status OnUnregisterBuffer(rdma::Frame& f);
  Status OnCreateNamespace(rdma::Frame& f);
  Status OnGetNamespace(rdma::Frame& f);
  Status OnListNamespaces(rdma::Frame& f);
  Status OnDropNamespace(rdma::Frame& f);
  Status OnSave(rdma::Frame& f);
  Status OnLookup(rdma::Frame& f);
  Status OnPin(rdma::Frame& f);
  Status OnLoadCopy(rdma::Frame& f);
  Status OnRelease(rdma::Frame& f);
  Status OnRemove(rdma::Frame& f);
  Status OnStats(rdma::Frame& f);
  Status OnListTree(rdma::Frame& f);
  Status OnIncrement(rdma::Frame& f);
  Status OnSetTimes(rdma::Frame& f);
  Status OnChanges(rdma::Frame& f);
  Status OnLocate(rdma::Frame& f);
  Status OnLocatePrefix(rdma::Frame& f);
  Status OnSetQuota(rdma::Frame& f);
  Status OnQuotas(rdma::Frame& f);
  Status OnClusterStatus(rdma::Frame& f);
  // Replies to `req` with `m` as message type req.type + 1.
  template <typename M>
  Status Reply(const rdma::Frame& req, const M& m, int pass_fd = -1) {
    core::Encoder e;
    m.Encode(e);
    return socket_.Send(static_cast<uint16_t>(req.type + 1), req.request_id, e.buffer(), pass_fd);
  }
  Result<NamespaceInfo> Authorize(const std::string& ns, Access access);
  // The registered buffer range [offset, offset + bytes), or an error.
  Result<uint8_t*> BufferRange(uint32_t buffer_id, uint64_t offset, uint64_t bytes);

  Node* const node_;
  Store* const store_;  // node_->store(): namespaces, listings, leases, quotas
  const ServerOptions* options_;
  rdma::FramedSocket socket_;
  const uint64_t id_;
  Credentials peer_;
  bool trusted_ = false;
  bool hello_ = false;
  std::map<uint32_t, std::unique_ptr<core::SharedMemory>> buffers_;
  uint32_t next_buffer_ = 1;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace ptstore::storage

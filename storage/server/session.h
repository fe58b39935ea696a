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
#include "local/framed_socket.h"
#include "local/access.h"
#include "storage/cache/store.h"

namespace ptstore::storage {

class Node;
struct ServerOptions;

class Session {
 public:
  // `peer`: the connection's kernel-checked credentials (SO_PEERCRED).
  Session(Node* node, const ServerOptions* options, int fd, uint64_t id, const local::Credentials& peer);
  ~Session();  // joins the thread

  void Start();
  void Stop();  // wakes the thread; the session then releases its leases
  bool done() const { return done_.load(); }
  const local::Credentials& peer() const { return peer_; }

 private:
  void Run();
  // Handles one request and sends its reply; a failure it returns is sent
  // back by the caller as an ErrorReply.
  Status Dispatch(local::Frame& f);
  // One handler per request type (Dispatch picks it): decode, check, do,
  // reply. The connection and namespaces are in session.cc, prefixes and
  // locations in session_requests.cc.
  Status OnHello(local::Frame& f);
  Status OnRegisterBuffer(local::Frame& f);
  Status OnUnregisterBuffer(local::Frame& f);
  Status OnCreateNamespace(local::Frame& f);
  Status OnGetNamespace(local::Frame& f);
  Status OnListNamespaces(local::Frame& f);
  Status OnDropNamespace(local::Frame& f);
  Status OnSave(local::Frame& f);
  Status OnLookup(local::Frame& f);
  Status OnPin(local::Frame& f);
  Status OnLoadCopy(local::Frame& f);
  Status OnRelease(local::Frame& f);
  Status OnRemove(local::Frame& f);
  Status OnStats(local::Frame& f);
  Status OnListTree(local::Frame& f);
  Status OnIncrement(local::Frame& f);
  Status OnSetTimes(local::Frame& f);
  Status OnChanges(local::Frame& f);
  Status OnLocate(local::Frame& f);
  Status OnLocatePrefix(local::Frame& f);
  Status OnSetQuota(local::Frame& f);
  Status OnQuotas(local::Frame& f);
  Status OnClusterStatus(local::Frame& f);
  // Replies to `req` with `m` as message type req.type + 1.
  template <typename M>
  Status Reply(const local::Frame& req, const M& m, int pass_fd = -1) {
    core::Encoder e;
    m.Encode(e);
    return socket_.Send(static_cast<uint16_t>(req.type + 1), req.request_id, e.buffer(), pass_fd);
  }
  Result<NamespaceInfo> Authorize(const std::string& ns, local::Access access);
  // The registered buffer range [offset, offset + bytes), or an error.
  Result<uint8_t*> BufferRange(uint32_t buffer_id, uint64_t offset, uint64_t bytes);

  Node* const node_;
  Store* const store_;  // node_->store(): namespaces, listings, leases, quotas
  const ServerOptions* options_;
  local::FramedSocket socket_;
  const uint64_t id_;
  local::Credentials peer_;
  bool trusted_ = false;
  bool hello_ = false;
  std::map<uint32_t, std::unique_ptr<core::SharedMemory>> buffers_;
  uint32_t next_buffer_ = 1;
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace ptstore::storage

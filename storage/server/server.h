// The local front of ptstored: a unix socket that serves libptstore clients.
//
// Each connection is a session with the kernel-checked credentials of its
// peer. A trusted peer (root, the server's own uid, or a member of the
// configured store group) gets the arena fd with its Hello and loads by
// mapping it; any other peer may only have loads copied into buffers it
// registered, and namespace modes decide what each peer may read or write.
// When a session ends, every lease it held is released.
//
// Thread safety: Start and Stop from one thread; sessions run on their own
// threads.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <list>
#include <memory>
#include <string>
#include <thread>

#include "core/mutex.h"
#include "ptstore/status.h"
#include "storage/cache/store.h"

namespace ptstore::storage {

struct ServerOptions {
  std::string socket_path = "/run/ptstore/ptstored.sock";
  uint32_t socket_mode = 0666;       // access control is by peer credentials
  int64_t trusted_gid = -1;          // members get the zero-copy arena mapping
  uint32_t lease_reap_ms = 500;      // how often expired leases are dropped
  uint32_t max_sessions = 4096;
  // Sessions one uid other than root may hold open at once: more are refused
  // (closed at accept), so one user cannot take every session thread.
  uint32_t max_sessions_per_uid = 1024;
  // A frame that has begun must be complete within this time, or the session
  // is closed: a peer that sends half a frame and stalls holds no thread.
  uint32_t frame_timeout_ms = 10000;
  // While a client's requests come within this many microseconds of its
  // last reply, its session waits for the next awake this long before
  // sleeping (local/framed_socket.h SetSpin); 0: sleep at once.
  uint32_t spin_us = 50;
};

class Node;
class Session;

class Server {
 public:
  // Sessions serve `node` (storage/server/node.h), which must outlive the server.
  Server(Node* node, ServerOptions options);
  ~Server();  // Stop()

  Status Start();
  // Stops accepting, ends every session (releasing their leases), joins.
  void Stop() EXCLUDES(mu_);
  const ServerOptions& options() const { return options_; }
  uint64_t sessions_served() const { return next_session_.load() - 1; }
  // Connections refused at accept (over max_sessions or a uid's cap).
  uint64_t sessions_refused() const { return refused_.load(); }
  // Sessions open now (for metrics).
  uint64_t sessions_open() const EXCLUDES(mu_);

 private:
  void AcceptLoop() EXCLUDES(mu_);
  void ReapLoop() EXCLUDES(mu_);

  Node* const node_;
  const ServerOptions options_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::atomic<uint64_t> next_session_{1};
  std::atomic<uint64_t> refused_{0};
  std::thread accept_thread_;
  std::thread reap_thread_;
  mutable core::Mutex mu_;
  core::CondVar reap_cv_;
  std::list<std::unique_ptr<Session>> sessions_ GUARDED_BY(mu_);
};

}  // namespace ptstore::storage

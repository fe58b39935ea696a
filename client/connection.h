// One connection of a client to the local ptstored, and the pool of them
// that a Client shares between its threads.
//
// Thread safety: a Connection is used by the thread that holds its mutex
// (ClientCore::Acquire returns it locked). ClientCore is thread safe. Lock
// order: ClientCore::mu_, then a Connection::mu.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/messages.h"
#include "core/mutex.h"
#include "core/shm.h"
#include "ptstore/options.h"
#include "ptstore/status.h"
#include "local/framed_socket.h"

namespace ptstore::client {

class Connection {
 public:
  // Connects and says Hello; a received arena fd is left in *arena_fd.
  static Result<std::shared_ptr<Connection>> Open(const ClientOptions& options, core::HelloReply* hello,
                                                  int* arena_fd);

  // One request, one reply of type `reply_type` (or an ErrorReply, returned
  // as its Status). A transport failure marks the connection broken.
  // REQUIRES: mu held.
  template <typename Req, typename Rep>
  Status Call(core::MsgType type, const Req& req, core::MsgType reply_type, Rep* rep, int pass_fd = -1) {
    core::Encoder e;
    req.Encode(e);
    PTS_ASSIGN_OR_RETURN(local::Frame f, RoundTrip(static_cast<uint16_t>(type), e.buffer(),
                                                  static_cast<uint16_t>(reply_type), pass_fd));
    return local::DecodeBody(f, rep);
  }

  // A registered staging buffer of at least `bytes` bytes. REQUIRES: mu held.
  Status EnsureStaging(uint64_t bytes);
  uint8_t* staging() const { return staging_->data(); }
  uint32_t staging_id() const { return staging_id_; }
  // Registers a memfd of `shm` with the server. REQUIRES: mu held.
  Result<uint32_t> Register(const core::SharedMemory& shm);
  // Tells the server to unmap a registered buffer. REQUIRES: mu held.
  Status Unregister(uint32_t buffer_id);

  bool broken() const { return broken_.load(); }
  std::shared_ptr<core::SharedMemory> arena() const { return arena_; }
  void set_arena(std::shared_ptr<core::SharedMemory> a) { arena_ = std::move(a); }

  // A std::mutex, not a core::Mutex: Acquire hands it to the caller locked
  // (ClientCore::Held, a movable std::unique_lock), across a return the
  // analysis cannot follow. The REQUIRES: comments above are its contract.
  std::mutex mu;

 private:
  Connection(int fd, int timeout_ms, uint64_t staging_bytes);
  Result<local::Frame> RoundTrip(uint16_t type, std::span<const uint8_t> body, uint16_t reply_type, int pass_fd);

  local::FramedSocket socket_;
  const int timeout_ms_;
  const uint64_t initial_staging_;
  uint64_t next_request_ = 1;
  std::atomic<bool> broken_{false};
  std::unique_ptr<core::SharedMemory> staging_;
  uint32_t staging_id_ = 0;
  std::shared_ptr<core::SharedMemory> arena_;  // the mapping this session's extents refer to
};

// What every Client handle, pin and buffer of one client shares.
class ClientCore {
 public:
  explicit ClientCore(ClientOptions options) : options_(std::move(options)) {}

  struct Held {
    std::shared_ptr<Connection> conn;
    std::unique_lock<std::mutex> lock;
  };
  // A working connection, locked for the caller: an idle one, a new one
  // while under max_connections, else waits for one.
  Result<Held> Acquire() EXCLUDES(mu_);

  // Layout of a namespace, cached (layouts never change while it exists).
  Result<Layout> LayoutOf(Held& h, const std::string& ns) EXCLUDES(mu_);
  void ForgetLayout(const std::string& ns) EXCLUDES(mu_);

  const ClientOptions& options() const { return options_; }
  // The last connection's Hello (a copy: a new connection replaces it).
  core::HelloReply hello() const EXCLUDES(mu_);
  // The current arena mapping (null for a client without it).
  std::shared_ptr<core::SharedMemory> arena() EXCLUDES(mu_);
  // The current arena's id (its memfd's inode; 0 without the mapping).
  uint64_t arena_id() EXCLUDES(mu_);

  // The GPU copy path's per-client state (client/gpu_copy.cc): made by
  // `make` on first use, destroyed with the core. Type-erased so that
  // libptstore itself needs no CUDA.
  std::shared_ptr<void> GpuState(const std::function<std::shared_ptr<void>()>& make) EXCLUDES(mu_);

 private:
  Result<std::shared_ptr<Connection>> OpenLocked() REQUIRES(mu_);

  ClientOptions options_;
  mutable core::Mutex mu_;  // taken before any Connection::mu
  std::vector<std::shared_ptr<Connection>> conns_ GUARDED_BY(mu_);
  size_t round_robin_ GUARDED_BY(mu_) = 0;
  core::HelloReply hello_ GUARDED_BY(mu_);
  std::shared_ptr<core::SharedMemory> arena_ GUARDED_BY(mu_);
  uint64_t arena_inode_ GUARDED_BY(mu_) = 0;
  std::map<std::string, Layout, std::less<>> layouts_ GUARDED_BY(mu_);
  std::shared_ptr<void> gpu_state_ GUARDED_BY(mu_);
};

}  // namespace ptstore::client

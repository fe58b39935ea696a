// One connection of a client to the local ptstored, and the pool of them
// that a Client shares between its threads.
//
// Thread safety: a Connection is used by the thread that holds its mutex
// (ClientCore::Acquire returns it locked). ClientCore is thread safe.
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
  Result<Held> Acquire();

  // Layout of a namespace, cached (layouts never change while it exists).
  Result<Layout> LayoutOf(Held& h, const std::string& ns);
  void ForgetLayout(const std::string& ns);

  const ClientOptions& options() const { return options_; }
  const core::HelloReply& hello() const { return hello_; }
  // The current arena mapping (null for a client without it).
  std::shared_ptr<core::SharedMemory> arena();
  // The current arena's id (its memfd's inode; 0 without the mapping).
  uint64_t arena_id();

  // The GPU copy path's per-client state (client/gpu_copy.cc): made by
  // `make` on first use, destroyed with the core. Type-erased so that
  // libptstore itself needs no CUDA.
  std::shared_ptr<void> GpuState(const std::function<std::shared_ptr<void>()>& make);

 private:
  Result<std::shared_ptr<Connection>> OpenLocked();

  ClientOptions options_;
  std::mutex mu_;  // guards everything below; taken before any Connection::mu
  std::vector<std::shared_ptr<Connection>> conns_;
  size_t round_robin_ = 0;
  core::HelloReply hello_;
  std::shared_ptr<core::SharedMemory> arena_;
  uint64_t arena_inode_ = 0;
  std::map<std::string, Layout, std::less<>> layouts_;
  std::shared_ptr<void> gpu_state_;
};

}  // namespace ptstore::client

#include "client/connection.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

#include "core/blocking_hint.h"

namespace ptstore::client {

using core::MsgType;

Connection::Connection(int fd, int timeout_ms, uint64_t staging_bytes)
    : socket_(fd), timeout_ms_(timeout_ms), initial_staging_(staging_bytes) {}

Result<std::shared_ptr<Connection>> Connection::Open(const ClientOptions& options, core::HelloReply* hello,
                                                     int* arena_fd) {
  std::string path = options.socket_path;
  if (path.empty()) {
    const char* env = std::getenv("PTSTORE_SOCKET");
    path = env && *env ? env : kDefaultSocketPath;
  }
  PTS_ASSIGN_OR_RETURN(int fd, local::ConnectUnix(path));
  std::shared_ptr<Connection> c(new Connection(fd, options.rpc_timeout_ms, options.staging_bytes));
  int spin_us = options.spin_us;
  if (const char* env = std::getenv("PTSTORE_SPIN_US"); env != nullptr && *env != '\0') spin_us = std::atoi(env);
  c->socket_.SetSpin(static_cast<uint32_t>(std::clamp(spin_us, 0, 10000)));
  core::HelloRequest req{options.client_name, options.want_mapping};
  core::Encoder e;
  req.Encode(e);
  PTS_ASSIGN_OR_RETURN(local::Frame f, c->RoundTrip(static_cast<uint16_t>(MsgType::kHello), e.buffer(),
                                                   static_cast<uint16_t>(MsgType::kHelloReply), -1));
  PTS_RETURN_IF_ERROR(local::DecodeBody(f, hello));
  if (hello->mapped && f.fd < 0) return ProtocolError("the server granted the arena mapping but sent no fd");
  *arena_fd = f.TakeFd();
  return c;
}

Result<local::Frame> Connection::RoundTrip(uint16_t type, std::span<const uint8_t> body, uint16_t reply_type,
                                          int pass_fd) {
  core::WillBlock();  // a round trip: as long as ptstored takes (core/blocking_hint.h)
  if (broken_) return Unavailable("the connection to ptstored was lost");
  const uint64_t id = next_request_++;
  Status st = socket_.Send(type, id, body, pass_fd);
  if (!st.ok()) {
    broken_ = true;
    return Unavailable("ptstored went away: " + st.message());
  }
  Result<local::Frame> f = socket_.Receive(timeout_ms_);
  if (!f.ok()) {
    // After a timeout a late reply could still arrive: the connection can
    // no longer pair requests with replies, so it is retired.
    broken_ = true;
    return f.status().WithContext(std::string("waiting for the reply to ") + core::MsgTypeName(type));
  }
  if (f->type == static_cast<uint16_t>(MsgType::kError)) {
    core::ErrorReply err;
    PTS_RETURN_IF_ERROR(local::DecodeBody(*f, &err));
    if (err.code == Code::kProtocol) broken_ = true;
    return err.ToStatus();
  }
  if (f->type != reply_type || f->request_id != id) {
    broken_ = true;
    return ProtocolError(std::string("expected ") + core::MsgTypeName(reply_type) + " #" + std::to_string(id) +
                         ", got " + core::MsgTypeName(f->type) + " #" + std::to_string(f->request_id));
  }
  return f;
}

Result<uint32_t> Connection::Register(const core::SharedMemory& shm) {
  int fd = shm.fd();
  core::RegisterBufferRequest req{shm.size()};
  core::RegisterBufferReply rep;
  PTS_RETURN_IF_ERROR(Call(MsgType::kRegisterBuffer, req, MsgType::kRegisterBufferReply, &rep, fd));
  return rep.buffer_id;
}

Status Connection::Unregister(uint32_t buffer_id) {
  core::UnregisterBufferRequest req{buffer_id};
  core::EmptyReply rep;
  return Call(MsgType::kUnregisterBuffer, req, MsgType::kUnregisterBufferReply, &rep);
}

Status Connection::EnsureStaging(uint64_t bytes) {
  if (staging_ && staging_->size() >= bytes) return Status::OK();
  // Exactly what is needed, in whole 2 MiB units: a staging buffer is
  // pre-faulted, so every byte of slack costs time once and memory always.
  constexpr uint64_t kUnit = 2ull << 20;
  uint64_t size = std::max<uint64_t>(initial_staging_, (bytes + kUnit - 1) / kUnit * kUnit);
  core::SharedMemory::CreateOptions o;
  o.name = "ptstore-staging";
  o.prefault = true;  // paid once; fresh pages are slow on every later touch otherwise
  o.try_huge_pages = false;
  o.seal_future_writes = false;  // the server maps it writable
  PTS_ASSIGN_OR_RETURN(auto shm, core::SharedMemory::Create(size, o));
  PTS_ASSIGN_OR_RETURN(uint32_t id, Register(*shm));
  if (staging_) Unregister(staging_id_).IgnoreError();  // the old one is unmapped on both sides
  staging_ = std::move(shm);
  staging_id_ = id;
  return Status::OK();
}

Result<std::shared_ptr<Connection>> ClientCore::OpenLocked() {
  core::HelloReply hello;
  int fd = -1;
  PTS_ASSIGN_OR_RETURN(auto conn, Connection::Open(options_, &hello, &fd));
  hello_ = hello;
  if (fd >= 0) {
    struct stat st {};
    fstat(fd, &st);
    if (!arena_ || static_cast<uint64_t>(st.st_ino) != arena_inode_) {
      // First connection, or the server restarted with a new arena.
      PTS_ASSIGN_OR_RETURN(auto m, core::SharedMemory::Map(fd, hello.arena_bytes, /*read_only=*/true,
                                                           /*populate=*/true));
      arena_ = std::move(m);
      arena_inode_ = st.st_ino;
    } else {
      close(fd);
    }
    conn->set_arena(arena_);
  }
  return conn;
}

Result<ClientCore::Held> ClientCore::Acquire() {
  core::WillBlock();  // what follows may wait for a connection, then for ptstored
  core::UniqueLock lk(mu_);
  std::erase_if(conns_, [](const auto& c) { return c->broken(); });
  for (auto& c : conns_) {
    std::unique_lock cl(c->mu, std::try_to_lock);
    if (cl.owns_lock()) return Held{c, std::move(cl)};
  }
  if (conns_.size() < static_cast<size_t>(std::max(1, options_.max_connections))) {
    PTS_ASSIGN_OR_RETURN(auto c, OpenLocked());
    conns_.push_back(c);
    std::unique_lock cl(c->mu);
    return Held{c, std::move(cl)};
  }
  auto c = conns_[round_robin_++ % conns_.size()];
  lk.Unlock();  // never wait for a connection while holding mu_
  std::unique_lock cl(c->mu);
  if (c->broken()) return Unavailable("the connection to ptstored was lost");
  return Held{c, std::move(cl)};
}

Result<Layout> ClientCore::LayoutOf(Held& h, const std::string& ns) {
  {
    core::MutexLock lk(mu_);
    auto it = layouts_.find(ns);
    if (it != layouts_.end()) return it->second;
  }
  core::NameRequest req{ns};
  core::NamespaceReply rep;
  PTS_RETURN_IF_ERROR(h.conn->Call(MsgType::kGetNamespace, req, MsgType::kGetNamespaceReply, &rep));
  core::MutexLock lk(mu_);
  layouts_[ns] = rep.info.layout;
  return rep.info.layout;
}

void ClientCore::ForgetLayout(const std::string& ns) {
  core::MutexLock lk(mu_);
  layouts_.erase(ns);
}

core::HelloReply ClientCore::hello() const {
  core::MutexLock lk(mu_);
  return hello_;
}

std::shared_ptr<core::SharedMemory> ClientCore::arena() {
  core::MutexLock lk(mu_);
  return arena_;
}

uint64_t ClientCore::arena_id() {
  core::MutexLock lk(mu_);
  return arena_ ? arena_inode_ : 0;
}

std::shared_ptr<void> ClientCore::GpuState(const std::function<std::shared_ptr<void>()>& make) {
  core::MutexLock lk(mu_);
  if (!gpu_state_) gpu_state_ = make();
  return gpu_state_;
}

}  // namespace ptstore::client

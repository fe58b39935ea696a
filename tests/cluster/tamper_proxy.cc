#include "tests/cluster/tamper_proxy.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/messages.h"
#include "core/peer_messages.h"
#include "core/wire.h"

namespace ptstore::testing {

namespace {

constexpr size_t kTag = 16;           // rdma::kFrameTagBytes
constexpr int kHandshakeFrames = 2;   // per direction, bare

bool ReadExact(int fd, uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t r = ::read(fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

bool WriteAll(int fd, const uint8_t* p, size_t n) {
  while (n > 0) {
    ssize_t w = ::send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool WriteAll(int fd, const std::vector<uint8_t>& v) { return WriteAll(fd, v.data(), v.size()); }

}  // namespace

TamperProxy::~TamperProxy() {
  stopping_.store(true);
  if (acceptor_.joinable()) acceptor_.join();
  std::vector<std::thread> threads;
  {
    std::lock_guard lk(mu_);
    for (int fd : fds_) ::shutdown(fd, SHUT_RDWR);
    threads.swap(threads_);
  }
  for (std::thread& t : threads) t.join();
  for (int fd : fds_) ::close(fd);
  if (listen_fd_ >= 0) ::close(listen_fd_);
}

Status TamperProxy::Start() {
  listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0) return ErrnoError("socket", errno);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(listen_fd_, 16) != 0 ||
      ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    return ErrnoError("proxy listen", errno);
  }
  port_ = ntohs(a.sin_port);
  acceptor_ = std::thread([this] { AcceptLoop(); });
  return Status::OK();
}

void TamperProxy::Arm(Mode mode, uint16_t type) {
  std::lock_guard lk(mu_);
  mode_ = mode;
  type_ = type;
}

bool TamperProxy::Take(Mode mode, uint16_t type) {
  std::lock_guard lk(mu_);
  if (mode_ != mode || (mode != Mode::kFlipBulk && type_ != type)) return false;
  mode_ = Mode::kNone;
  fired_++;
  return true;
}

void TamperProxy::AcceptLoop() {
  while (!stopping_.load()) {
    pollfd p{listen_fd_, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    int in = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (in < 0) continue;
    int out = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(target_port_);
    if (out < 0 || ::connect(out, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
      ::close(in);
      if (out >= 0) ::close(out);
      continue;
    }
    std::lock_guard lk(mu_);
    fds_.push_back(in);
    fds_.push_back(out);
    threads_.emplace_back([this, in, out] { Pump(in, out, /*to_listener=*/true); });
    threads_.emplace_back([this, in, out] { Pump(out, in, /*to_listener=*/false); });
  }
}

// One direction of one connection, unit by unit; on any end of it both
// sockets are shut down (the nodes see the connection close).
void TamperProxy::Pump(int from, int to, bool to_listener) {
  int frames = 0;
  for (;;) {
    uint8_t header[core::kFrameHeaderBytes];
    if (!ReadExact(from, header, sizeof(header))) break;
    Result<core::FrameHeader> h = core::DecodeFrameHeader(std::span<const uint8_t>(header, sizeof(header)));
    if (!h.ok()) break;
    std::vector<uint8_t> body(h->body_len);
    if (!ReadExact(from, body.data(), body.size())) break;
    const bool tagged = frames++ >= kHandshakeFrames;
    std::vector<uint8_t> tag(tagged ? kTag : 0);
    if (!ReadExact(from, tag.data(), tag.size())) break;

    std::vector<uint8_t> unit(header, header + sizeof(header));
    if (tagged && to_listener && !body.empty() && Take(Mode::kFlipRequest, h->type)) {
      body[body.size() - 1] ^= 0x01;
      core::EncodeFrameHeader(h->type, h->request_id, body, unit.data());  // a checksum that matches again
    }
    unit.insert(unit.end(), body.begin(), body.end());
    unit.insert(unit.end(), tag.begin(), tag.end());
    if (tagged && !to_listener && Take(Mode::kInjectReply, h->type)) {
      core::ErrorReply forged{Code::kNotFound, "injected by the proxy"};
      core::Encoder e;
      forged.Encode(e);
      std::vector<uint8_t> f(core::kFrameHeaderBytes);
      core::EncodeFrameHeader(static_cast<uint16_t>(core::MsgType::kError), h->request_id, e.buffer(), f.data());
      f.insert(f.end(), e.buffer().begin(), e.buffer().end());
      f.insert(f.end(), kTag, 0x5a);
      if (!WriteAll(to, f)) break;
    }
    if (!WriteAll(to, unit)) break;
    if (tagged && to_listener && Take(Mode::kReplayRequest, h->type)) {
      if (!WriteAll(to, unit)) break;
    }

    // The bytes of a TCP fetch follow its reply, then their tag.
    if (tagged && !to_listener && h->type == static_cast<uint16_t>(core::MsgType::kPeerFetchReply)) {
      core::PeerFetchReply rep;
      core::Decoder d(body);
      if (!rep.Decode(d).ok()) break;
      if (rep.stream_bytes == 0) continue;
      std::vector<uint8_t> bulk(rep.stream_bytes + kTag);
      if (!ReadExact(from, bulk.data(), bulk.size())) break;
      if (Take(Mode::kFlipBulk, 0)) bulk[rep.stream_bytes / 2] ^= 0x80;
      if (!WriteAll(to, bulk)) break;
    }
  }
  ::shutdown(from, SHUT_RDWR);
  ::shutdown(to, SHUT_RDWR);
}

}  // namespace ptstore::testing

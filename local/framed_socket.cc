#include "local/framed_socket.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

#include "core/logging.h"

namespace ptstore::local {

Frame::Frame(Frame&& o) noexcept
    : type(o.type), request_id(o.request_id), body(std::move(o.body)), fd(o.TakeFd()) {}

Frame& Frame::operator=(Frame&& o) noexcept {
  if (this != &o) {
    if (fd >= 0) close(fd);
    type = o.type;
    request_id = o.request_id;
    body = std::move(o.body);
    fd = o.TakeFd();
  }
  return *this;
}

Frame::~Frame() {
  if (fd >= 0) close(fd);
}

FramedSocket::FramedSocket(int fd) : fd_(fd) {}

FramedSocket::~FramedSocket() {
  if (fd_ >= 0) close(fd_);
}

void FramedSocket::Shutdown() {
  if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
}

Status FramedSocket::Send(uint16_t type, uint64_t request_id, std::span<const uint8_t> body, int pass_fd) {
  uint8_t header[core::kFrameHeaderBytes];
  core::EncodeFrameHeader(type, request_id, body, header);
  FrameTag tag{};
  if (mac_ != nullptr) {
    RecordSeal& h = mac_->send();
    PTS_RETURN_IF_ERROR(h.Begin(RecordKind::kFrame));
    PTS_RETURN_IF_ERROR(h.Update(header, sizeof(header)));
    PTS_RETURN_IF_ERROR(h.Update(body.data(), body.size()));
    PTS_ASSIGN_OR_RETURN(tag, h.Finish());
  }
  struct iovec iov[3] = {{header, sizeof(header)},
                         {const_cast<uint8_t*>(body.data()), body.size()},
                         {tag.data(), mac_ != nullptr ? tag.size() : 0}};
  size_t total = sizeof(header) + body.size() + iov[2].iov_len;
  size_t sent = 0;
  bool fd_sent = pass_fd < 0;
  alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int))];
  while (sent < total) {
    // Skip what is already out.
    struct iovec cur[3];
    int n = 0;
    size_t skip = sent;
    for (auto& v : iov) {
      if (skip >= v.iov_len) {
        skip -= v.iov_len;
        continue;
      }
      cur[n].iov_base = static_cast<uint8_t*>(v.iov_base) + skip;
      cur[n].iov_len = v.iov_len - skip;
      skip = 0;
      ++n;
    }
    struct msghdr msg {};
    msg.msg_iov = cur;
    msg.msg_iovlen = n;
    if (!fd_sent) {
      std::memset(control, 0, sizeof(control));
      msg.msg_control = control;
      msg.msg_controllen = sizeof(control);
      struct cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int));
      std::memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    ssize_t w = sendmsg(fd_, &msg, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      return ErrnoError(std::string("sending ") + core::MsgTypeName(type), errno);
    }
    fd_sent = true;
    sent += static_cast<size_t>(w);
  }
  return Status::OK();
}

Status FramedSocket::ReadFull(uint8_t* p, size_t n, int timeout_ms, int* got_fd) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms < 0 ? 0 : timeout_ms);
  size_t done = 0;
  while (done < n) {
    int wait_ms = -1;
    if (timeout_ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return DeadlineExceeded("no reply from the peer within " + std::to_string(timeout_ms) + " ms");
      wait_ms = static_cast<int>(left);
    }
    struct pollfd pfd {fd_, POLLIN, 0};
    int pr = poll(&pfd, 1, wait_ms);
    if (pr < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("poll", errno);
    }
    if (pr == 0) continue;  // the deadline check above decides
    struct iovec iov {p + done, n - done};
    alignas(struct cmsghdr) char control[CMSG_SPACE(sizeof(int) * 4)];
    struct msghdr msg {};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t r = recvmsg(fd_, &msg, MSG_CMSG_CLOEXEC);
    if (r < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return ErrnoError("receiving from the peer", errno);
    }
    for (struct cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int f;
        std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        if (*got_fd < 0) *got_fd = f;
        else close(f);  // one descriptor per frame; extras are dropped
      }
    }
    if (r == 0) return Unavailable(done == 0 ? "the peer closed the connection" : "the peer closed the connection mid-message");
    done += static_cast<size_t>(r);
  }
  return Status::OK();
}

void FramedSocket::EnableIntegrity(std::unique_ptr<FrameIntegrity> mac, std::string peer, WireCounters* counters) {
  mac_ = std::move(mac);
  peer_ = std::move(peer);
  counters_ = counters;
}

Status FramedSocket::IntegrityFailure(Status st) {
  if (counters_ != nullptr) counters_->integrity_failures++;
  st = st.WithContext("from " + peer_);
  PTS_WARN("peer", st.ToString() << "; closing the connection");
  return st;
}

Status FramedSocket::FinishSendRaw() {
  if (mac_ == nullptr || !mac_->send().open()) return Status::OK();
  PTS_ASSIGN_OR_RETURN(FrameTag tag, mac_->send().Finish());
  return SendBytes(tag.data(), tag.size());
}

Status FramedSocket::FinishReceiveRaw(int timeout_ms) {
  if (mac_ == nullptr || !mac_->receive().open()) return Status::OK();
  FrameTag tag{};
  int fd = -1;
  Status st = ReadFull(tag.data(), tag.size(), timeout_ms, &fd);
  if (fd >= 0) close(fd);
  PTS_RETURN_IF_ERROR(st);
  st = mac_->receive().Check(tag);
  if (!st.ok()) return IntegrityFailure(st.WithContext("bulk bytes"));
  return Status::OK();
}

Status FramedSocket::SendRaw(const uint8_t* p, size_t n) {
  if (mac_ == nullptr || n == 0) return SendBytes(p, n);
  RecordSeal& h = mac_->send();
  if (!h.open()) PTS_RETURN_IF_ERROR(h.Begin(RecordKind::kBulk));
  // In pieces: each is still in cache when it is sent, and the receiver
  // works on one piece while this side MACs the next.
  constexpr size_t kPiece = 256u << 10;
  for (size_t done = 0; done < n;) {
    const size_t m = std::min(kPiece, n - done);
    PTS_RETURN_IF_ERROR(h.Update(p + done, m));
    PTS_RETURN_IF_ERROR(SendBytes(p + done, m));
    done += m;
  }
  return Status::OK();
}

Status FramedSocket::SendBytes(const uint8_t* p, size_t n) {
  size_t sent = 0;
  while (sent < n) {
    ssize_t w = send(fd_, p + sent, n - sent, MSG_NOSIGNAL);
    if (w < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return DeadlineExceeded("the peer stopped reading bulk data");
      return ErrnoError("sending bulk data", errno);
    }
    sent += static_cast<size_t>(w);
  }
  return Status::OK();
}

Status FramedSocket::ReceiveRaw(uint8_t* p, size_t n, int timeout_ms) {
  int fd = -1;
  if (mac_ == nullptr || n == 0) {
    Status st = ReadFull(p, n, timeout_ms, &fd);
    if (fd >= 0) close(fd);
    return st;
  }
  RecordSeal& h = mac_->receive();
  if (!h.open()) PTS_RETURN_IF_ERROR(h.Begin(RecordKind::kBulk));
  // In pieces that are still in cache when the MAC reads them.
  constexpr size_t kPiece = 256u << 10;
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
  for (size_t done = 0; done < n;) {
    const size_t m = std::min(kPiece, n - done);
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return DeadlineExceeded("no reply from the peer within " + std::to_string(timeout_ms) + " ms");
    Status st = ReadFull(p + done, m, static_cast<int>(left), &fd);
    if (fd >= 0) close(fd);
    fd = -1;
    PTS_RETURN_IF_ERROR(st);
    PTS_RETURN_IF_ERROR(h.Update(p + done, m));
    done += m;
  }
  return Status::OK();
}

void FramedSocket::Spin(const core::SpinWait::Window& w) {
  if (!spin_.Spins(w)) return;
  do {
    struct pollfd pfd {fd_, POLLIN, 0};
    if (poll(&pfd, 1, 0) != 0) return;  // readable, closed or failed: the caller's wait says which
  } while (spin_.Again(w));
}

Result<Frame> FramedSocket::Receive(int timeout_ms) {
  // Never spins past the receive's own deadline.
  const core::SpinWait::Window w = spin_.Begin(timeout_ms >= 0 ? int64_t{timeout_ms} * 1000000 : -1);
  Spin(w);
  int left_ms = timeout_ms;  // the spin's time is the receive's
  if (spin_.enabled() && timeout_ms > 0) {
    left_ms = std::max(1, timeout_ms - static_cast<int>((core::SpinWait::NowNs() - w.start) / 1000000));
  }
  Result<Frame> f = ReceiveFrame(left_ms);
  spin_.Came(w);
  return f;
}

Result<Frame> FramedSocket::ReceiveWithin(int frame_ms) {
  const core::SpinWait::Window w = spin_.Begin();
  Spin(w);
  for (;;) {
    struct pollfd pfd {fd_, POLLIN, 0};
    const int pr = poll(&pfd, 1, -1);
    if (pr < 0 && errno == EINTR) continue;
    if (pr < 0) return ErrnoError("poll", errno);
    break;  // readable, closed or failed: Receive says which
  }
  spin_.Came(w);
  Result<Frame> f = ReceiveFrame(frame_ms);
  if (f.status().code() == Code::kDeadlineExceeded) {
    return DeadlineExceeded("the peer sent part of a frame and nothing more for " + std::to_string(frame_ms) + " ms");
  }
  return f;
}

Result<Frame> FramedSocket::ReceiveFrame(int timeout_ms) {
  Frame f;
  uint8_t header[core::kFrameHeaderBytes];
  PTS_RETURN_IF_ERROR(ReadFull(header, sizeof(header), timeout_ms, &f.fd));
  Result<core::FrameHeader> hr = core::DecodeFrameHeader(header);
  if (!hr.ok() && mac_ != nullptr) {
    // An authenticated peer sends well-formed frames: this one was altered.
    return IntegrityFailure(Status(Code::kCorruption, "frame integrity check failed: " + hr.status().message()));
  }
  PTS_ASSIGN_OR_RETURN(core::FrameHeader h, std::move(hr));
  f.type = h.type;
  f.request_id = h.request_id;
  // Grow the body as bytes arrive: a header alone must not make us hold
  // kMaxBodyBytes for a peer that then stalls.
  constexpr size_t kChunk = 1u << 20;
  size_t have = 0;
  while (have < h.body_len) {
    size_t n = std::min<size_t>(kChunk, h.body_len - have);
    f.body.resize(have + n);
    PTS_RETURN_IF_ERROR(ReadFull(f.body.data() + have, n, timeout_ms, &f.fd));
    have += n;
  }
  if (mac_ != nullptr) {
    FrameTag tag{};
    PTS_RETURN_IF_ERROR(ReadFull(tag.data(), tag.size(), timeout_ms, &f.fd));
    RecordSeal& m = mac_->receive();
    PTS_RETURN_IF_ERROR(m.Begin(RecordKind::kFrame));
    PTS_RETURN_IF_ERROR(m.Update(header, sizeof(header)));
    PTS_RETURN_IF_ERROR(m.Update(f.body.data(), f.body.size()));
    if (Status st = m.Check(tag); !st.ok()) {
      return IntegrityFailure(st.WithContext(std::string(core::MsgTypeName(f.type)) + " frame"));
    }
  }
  PTS_RETURN_IF_ERROR(core::VerifyFrameChecksum(header, f.body));
  return f;
}

namespace {
Result<sockaddr_un> UnixAddress(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(addr.sun_path)) {
    return InvalidArgument("unix socket path '" + path + "' must be 1.." +
                           std::to_string(sizeof(addr.sun_path) - 1) + " characters");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}
}  // namespace

Result<int> ConnectUnix(const std::string& path) {
  PTS_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path));
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    close(fd);
    Status st = ErrnoError("connecting to ptstored at " + path, err);
    if (err == ENOENT || err == ECONNREFUSED) st = Unavailable(st.message() + " (is ptstored running?)");
    return st;
  }
  return fd;
}

Result<int> ListenUnix(const std::string& path, uint32_t mode) {
  PTS_ASSIGN_OR_RETURN(sockaddr_un addr, UnixAddress(path));
  // A socket file left by a dead server is replaced; a live server keeps it.
  if (auto probe = ConnectUnix(path); probe.ok()) {
    close(*probe);
    return Status(Code::kAlreadyExists, "another ptstored is already listening on " + path);
  }
  unlink(path.c_str());
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return ErrnoError("socket", errno);
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    int err = errno;
    close(fd);
    return ErrnoError("binding " + path, err);
  }
  if (chmod(path.c_str(), mode) != 0 || listen(fd, 128) != 0) {
    int err = errno;
    close(fd);
    return ErrnoError("listening on " + path, err);
  }
  return fd;
}

}  // namespace ptstore::local

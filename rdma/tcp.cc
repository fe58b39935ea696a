#include "rdma/tcp.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace ptstore::rdma {

namespace {

struct AddrInfo {
  addrinfo* list = nullptr;
  ~AddrInfo() {
    if (list) freeaddrinfo(list);
  }
};

Status Resolve(const std::string& host, uint16_t port, bool passive, AddrInfo* out) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  if (passive) hints.ai_flags = AI_PASSIVE;
  const std::string service = std::to_string(port);
  int rc = getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &out->list);
  if (rc != 0) return Unavailable("cannot resolve '" + host + "': " + gai_strerror(rc));
  return Status::OK();
}

}  // namespace

void TuneTcp(int fd, int send_timeout_ms) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval tv{send_timeout_ms / 1000, (send_timeout_ms % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
}

Result<int> ConnectTcp(const std::string& host, uint16_t port, int timeout_ms, int send_timeout_ms) {
  AddrInfo ai;
  PTS_RETURN_IF_ERROR(Resolve(host, port, false, &ai));
  const std::string where = host + ":" + std::to_string(port);
  Status last = Unavailable("no address for " + where);
  for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) {
      last = ErrnoError("socket", errno);
      continue;
    }
    int rc = connect(fd, a->ai_addr, a->ai_addrlen);
    if (rc != 0 && errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int pr;
      do {
        pr = poll(&p, 1, timeout_ms);
      } while (pr < 0 && errno == EINTR);
      if (pr == 0) {
        close(fd);
        last = DeadlineExceeded("connecting to " + where + ": no answer within " + std::to_string(timeout_ms) + " ms");
        continue;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
      rc = err == 0 ? 0 : -1;
      errno = err;
    }
    if (rc != 0) {
      const int err = errno;
      close(fd);
      last = Unavailable("connecting to " + where + ": " + std::strerror(err));
      continue;
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
    TuneTcp(fd, send_timeout_ms);
    return fd;
  }
  return last;
}

Result<int> ListenTcp(const std::string& host, uint16_t port, uint16_t* bound_port) {
  AddrInfo ai;
  PTS_RETURN_IF_ERROR(Resolve(host, port, true, &ai));
  const std::string where = host + ":" + std::to_string(port);
  Status last = Unavailable("no address for " + where);
  for (addrinfo* a = ai.list; a != nullptr; a = a->ai_next) {
    int fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = ErrnoError("socket", errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, a->ai_addr, a->ai_addrlen) != 0 || listen(fd, 256) != 0) {
      last = ErrnoError("listening on " + where, errno);
      close(fd);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port
                                                 : reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    return fd;
  }
  return last;
}

}  // namespace ptstore::rdma

#include "storage/metrics_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <string_view>
#include <vector>

#include "core/logging.h"

namespace ptstore::storage {

namespace {

using Clock = std::chrono::steady_clock;

constexpr std::string_view kMetricsType = "text/plain; version=0.0.4; charset=utf-8";
constexpr std::string_view kIndexPage =
    "<html><head><title>ptstored</title></head>\n"
    "<body><h1>ptstored</h1><p><a href=\"/metrics\">Metrics</a> (Prometheus text format)</p></body></html>\n";
constexpr int kDrainMs = 500;  // after the response: how long to wait for the peer's FIN

struct Response {
  int code = 200;
  std::string_view reason = "OK";
  std::string_view content_type = "text/plain; charset=utf-8";
  std::string body;
  bool head = false;  // a HEAD request: headers only
  std::string_view extra_headers;
};

Response Error(int code, std::string_view reason, std::string_view extra = {}) {
  Response r;
  r.code = code;
  r.reason = reason;
  r.body = std::to_string(code) + " " + std::string(reason) + "\n";
  r.extra_headers = extra;
  return r;
}

std::string Serialize(const Response& r) {
  std::string out = "HTTP/1.1 " + std::to_string(r.code) + " " + std::string(r.reason) + "\r\n";
  out += "Content-Type: " + std::string(r.content_type) + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  out += r.extra_headers;
  out += "Connection: close\r\n\r\n";
  if (!r.head) out += r.body;
  return out;
}

bool IsTokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// Where the request's headers end (the index past the blank line), or npos.
size_t HeaderEnd(std::string_view in) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\n') continue;
    if (i + 1 < in.size() && in[i + 1] == '\n') return i + 2;
    if (i + 2 < in.size() && in[i + 1] == '\r' && in[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

// The answer to one request whose headers are `head` (up to the blank line).
Response Respond(std::string_view head, const MetricsHttpServer::Render& render) {
  std::vector<std::string_view> lines;
  while (!head.empty()) {
    size_t nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    head.remove_prefix(nl == std::string_view::npos ? head.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    lines.push_back(line);
  }
  if (lines.empty()) return Error(400, "Bad Request");
  // Request line: METHOD SP target SP HTTP/x.y
  std::string_view rl = lines[0];
  size_t sp1 = rl.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos) return Error(400, "Bad Request");
  std::string_view method = rl.substr(0, sp1);
  std::string_view target = rl.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = rl.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), IsTokenChar)) return Error(400, "Bad Request");
  if (target.empty() || target[0] != '/') return Error(400, "Bad Request");
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return Error(400, "Bad Request");
  }
  if (version.size() != 8 || !version.starts_with("HTTP/") || version[6] != '.' || !std::isdigit(static_cast<unsigned char>(version[5])) ||
      !std::isdigit(static_cast<unsigned char>(version[7]))) {
    return Error(400, "Bad Request");
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") return Error(505, "HTTP Version Not Supported");
  for (size_t i = 1; i < lines.size(); ++i) {
    std::string_view h = lines[i];
    size_t colon = h.find(':');
    // A header is "name: value"; folded continuation lines are obsolete.
    if (colon == 0 || colon == std::string_view::npos) return Error(400, "Bad Request");
    if (!std::all_of(h.begin(), h.begin() + colon, IsTokenChar)) return Error(400, "Bad Request");
  }
  const bool head_only = method == "HEAD";
  if (method != "GET" && !head_only) return Error(405, "Method Not Allowed", "Allow: GET, HEAD\r\n");
  std::string_view path = target.substr(0, target.find('?'));
  Response r;
  if (path == "/metrics") {
    try {
      r.body = render();
      r.content_type = kMetricsType;
    } catch (const std::exception& e) {
      PTS_WARN("metrics", "rendering the metrics failed: " << e.what());
      r = Error(500, "Internal Server Error");
    }
  } else if (path == "/") {
    r.body = std::string(kIndexPage);
    r.content_type = "text/html; charset=utf-8";
  } else {
    r = Error(404, "Not Found");
  }
  r.head = head_only;
  return r;
}

struct Conn {
  enum class State { kReading, kWriting, kDraining };
  int fd = -1;
  State state = State::kReading;
  std::string in;
  std::string out;
  size_t sent = 0;
  Clock::time_point deadline;
};

std::string FormatAddress(const sockaddr_storage& ss, uint16_t* port) {
  char host[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    inet_ntop(AF_INET6, &a->sin6_addr, host, sizeof(host));
    *port = ntohs(a->sin6_port);
    return "[" + std::string(host) + "]:" + std::to_string(*port);
  }
  const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
  inet_ntop(AF_INET, &a->sin_addr, host, sizeof(host));
  *port = ntohs(a->sin_port);
  return std::string(host) + ":" + std::to_string(*port);
}

}  // namespace

MetricsHttpServer::MetricsHttpServer(MetricsHttpOptions options) : options_(options) {}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

Status MetricsHttpServer::Start(const std::string& bind, uint16_t port, Render render) {
  if (thread_.joinable() || listen_fd_ >= 0) return InvalidArgument("the metrics server is already started");
  if (!render) return InvalidArgument("the metrics server needs a render function");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(bind.empty() ? nullptr : bind.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return InvalidArgument("metrics address '" + bind + "': " + gai_strerror(rc));
  }
  Status last = IOError("metrics address '" + bind + "' has no usable address");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = ErrnoError("socket", errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      last = ErrnoError("metrics: binding " + bind + " port " + service, errno);
      close(fd);
      continue;
    }
    listen_fd_ = fd;
    break;
  }
  freeaddrinfo(res);
  if (listen_fd_ < 0) return last;
  sockaddr_storage ss{};
  socklen_t len = sizeof(ss);
  getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&ss), &len);
  address_ = FormatAddress(ss, &port_);
  wake_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) {
    Status st = ErrnoError("eventfd", errno);
    close(listen_fd_);
    listen_fd_ = -1;
    return st;
  }
  render_ = std::move(render);
  thread_ = std::thread([this] { Loop(); });
  return Status::OK();
}

void MetricsHttpServer::Stop() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof(one));
    (void)n;
    thread_.join();
  }
  if (listen_fd_ >= 0) close(listen_fd_);
  if (wake_fd_ >= 0) close(wake_fd_);
  listen_fd_ = wake_fd_ = -1;
}

void MetricsHttpServer::Loop() {
  std::list<Conn> conns;
  auto close_conn = [&](std::list<Conn>::iterator it) {
    close(it->fd);
    return conns.erase(it);
  };
  auto start_response = [&](Conn& c, const Response& r) {
    c.out = Serialize(r);
    c.sent = 0;
    c.state = Conn::State::kWriting;
    c.deadline = Clock::now() + std::chrono::milliseconds(options_.write_timeout_ms);
    requests_.fetch_add(1, std::memory_order_relaxed);
  };
  Clock::time_point accept_paused_until{};
  Clock::time_point last_accept_warning{};
  std::vector<pollfd> pfds;
  std::vector<std::list<Conn>::iterator> polled;
  char buf[4096];
  for (;;) {
    const Clock::time_point now = Clock::now();
    // Connections past their deadline are dropped.
    for (auto it = conns.begin(); it != conns.end();) {
      if (now >= it->deadline) {
        if (it->state == Conn::State::kReading) PTS_DEBUG("metrics", "dropping a client that sent no request in time");
        if (it->state == Conn::State::kWriting) {
          // A client that does not read: reset, so the kernel drops the
          // unsent rest instead of keeping it for an orphaned socket.
          linger l{1, 0};
          setsockopt(it->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
          PTS_DEBUG("metrics", "dropping a client that did not take its response in time");
        }
        it = close_conn(it);
      } else {
        ++it;
      }
    }
    pfds.clear();
    polled.clear();
    pfds.push_back({wake_fd_, POLLIN, 0});
    const bool accepting = now >= accept_paused_until;
    if (accepting) pfds.push_back({listen_fd_, POLLIN, 0});
    Clock::time_point next = now + std::chrono::seconds(1);
    if (!accepting) next = std::min(next, accept_paused_until);
    for (auto it = conns.begin(); it != conns.end(); ++it) {
      pfds.push_back({it->fd, static_cast<short>(it->state == Conn::State::kWriting ? POLLOUT : POLLIN), 0});
      polled.push_back(it);
      next = std::min(next, it->deadline);
    }
    int timeout = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(next - now).count());
    int pr = poll(pfds.data(), pfds.size(), std::max(timeout, 0));
    if (pr < 0) {
      if (errno == EINTR) continue;
      PTS_ERROR("metrics", "poll: " << std::strerror(errno) << "; the metrics server stops");
      break;
    }
    if (pfds[0].revents != 0) break;  // Stop
    const size_t first_conn = accepting ? 2 : 1;

    // Serve the open connections first (the iterators stay valid: erasing
    // from a list invalidates only the erased element).
    for (size_t i = first_conn; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      auto it = polled[i - first_conn];
      Conn& c = *it;
      bool close_it = false;
      if (c.state == Conn::State::kReading) {
        for (;;) {
          ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
          if (n > 0) {
            c.in.append(buf, static_cast<size_t>(n));
            if (c.in.size() > options_.max_request_bytes + sizeof(buf)) break;  // enough to decide
            continue;
          }
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          if (n < 0 && errno == EINTR) continue;
          close_it = true;  // EOF or an error before a whole request
          break;
        }
        size_t end = HeaderEnd(c.in);
        if (end != std::string::npos && end <= options_.max_request_bytes) {
          start_response(c, Respond(std::string_view(c.in).substr(0, end), render_));
          close_it = false;
        } else if (c.in.size() > options_.max_request_bytes) {
          start_response(c, Error(431, "Request Header Fields Too Large"));
          close_it = false;
        }
      }
      if (!close_it && c.state == Conn::State::kWriting) {
        while (c.sent < c.out.size()) {
          ssize_t n = send(c.fd, c.out.data() + c.sent, c.out.size() - c.sent, MSG_NOSIGNAL);
          if (n > 0) {
            c.sent += static_cast<size_t>(n);
            continue;
          }
          if (n < 0 && errno == EINTR) continue;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          close_it = true;
          break;
        }
        if (!close_it && c.sent == c.out.size()) {
          // Half-close and wait a little for the peer's FIN, so that closing
          // with unread request bytes does not reset the response away.
          shutdown(c.fd, SHUT_WR);
          c.state = Conn::State::kDraining;
          c.deadline = Clock::now() + std::chrono::milliseconds(kDrainMs);
          c.out.clear();
          c.in.clear();
        }
      } else if (!close_it && c.state == Conn::State::kDraining) {
        for (;;) {
          ssize_t n = recv(c.fd, buf, sizeof(buf), 0);
          if (n > 0) continue;
          if (n < 0 && errno == EINTR) continue;
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          close_it = true;
          break;
        }
      }
      if (close_it) close_conn(it);
    }

    if (accepting && pfds[1].revents != 0) {
      for (;;) {
        int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          // EMFILE and the like: stop accepting for a moment rather than spin.
          const Clock::time_point t = Clock::now();
          if (t - last_accept_warning > std::chrono::seconds(10)) {
            PTS_WARN("metrics", "accept: " << std::strerror(errno));
            last_accept_warning = t;
          }
          accept_paused_until = t + std::chrono::milliseconds(100);
          break;
        }
        if (conns.size() >= options_.max_connections) {
          // Make room: drop the oldest connection still being read.
          auto oldest = conns.end();
          for (auto it = conns.begin(); it != conns.end(); ++it) {
            if (it->state == Conn::State::kReading && (oldest == conns.end() || it->deadline < oldest->deadline)) {
              oldest = it;
            }
          }
          if (oldest == conns.end()) {
            close(fd);  // all busy writing: the newcomer may retry
            continue;
          }
          close_conn(oldest);
        }
        Conn c;
        c.fd = fd;
        c.deadline = Clock::now() + std::chrono::milliseconds(options_.read_timeout_ms);
        conns.push_back(std::move(c));
      }
    }
  }
  for (auto it = conns.begin(); it != conns.end();) it = close_conn(it);
}

}  // namespace ptstore::storage

#include "core/http_server.h"

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
#include <optional>

#include "core/logging.h"

namespace ptstore::core {

namespace {

using Clock = std::chrono::steady_clock;

constexpr int kDrainMs = 500;  // after the response: how long to wait for the peer's FIN
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

bool IsTokenChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Header values the handler supplies may not break the framing.
std::string NoLineBreaks(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    if (c != '\r' && c != '\n') out.push_back(c);
  }
  return out;
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

struct ServerError {
  int status;
  std::string message;
};

// What the request line and headers in `head` (up to the blank line) ask.
struct Head {
  HttpRequest request;  // without the body
  size_t body_bytes = 0;
  bool head_only = false;
  bool expect_continue = false;
};

std::optional<ServerError> ParseHead(std::string_view head, size_t max_body_bytes, Head* out) {
  std::vector<std::string_view> lines;
  while (!head.empty()) {
    size_t nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    head.remove_prefix(nl == std::string_view::npos ? head.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    lines.push_back(line);
  }
  if (lines.empty()) return ServerError{400, "empty request"};
  // Request line: METHOD SP target SP HTTP/x.y
  std::string_view rl = lines[0];
  size_t sp1 = rl.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos) {
    return ServerError{400, "malformed request line"};
  }
  std::string_view method = rl.substr(0, sp1);
  std::string_view target = rl.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = rl.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), IsTokenChar)) {
    return ServerError{400, "malformed method"};
  }
  if (target.empty() || target[0] != '/') return ServerError{400, "the target must be an absolute path"};
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return ServerError{400, "malformed target"};
  }
  if (version.size() != 8 || !version.starts_with("HTTP/") || version[6] != '.' ||
      !std::isdigit(static_cast<unsigned char>(version[5])) || !std::isdigit(static_cast<unsigned char>(version[7]))) {
    return ServerError{400, "malformed HTTP version"};
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return ServerError{505, "only HTTP/1.0 and HTTP/1.1 are served"};
  }
  HttpRequest& req = out->request;
  std::optional<uint64_t> content_length;
  bool chunked = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::string_view h = lines[i];
    size_t colon = h.find(':');
    // A header is "name: value"; folded continuation lines are obsolete.
    if (colon == 0 || colon == std::string_view::npos) return ServerError{400, "malformed header line"};
    if (!std::all_of(h.begin(), h.begin() + colon, IsTokenChar)) return ServerError{400, "malformed header name"};
    std::string name = Lower(h.substr(0, colon));
    std::string_view value = Trim(h.substr(colon + 1));
    if (name == "content-length") {
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return ServerError{400, "malformed Content-Length"};
      }
      uint64_t n = std::stoull(std::string(value));
      if (content_length && *content_length != n) return ServerError{400, "conflicting Content-Length headers"};
      content_length = n;
    } else if (name == "transfer-encoding") {
      chunked = true;
    } else if (name == "expect" && Lower(value) == "100-continue") {
      out->expect_continue = version == "HTTP/1.1";
    }
    req.headers.emplace_back(std::move(name), std::string(value));
  }
  if (chunked) return ServerError{501, "Transfer-Encoding is not supported; send a Content-Length"};
  if (content_length && *content_length > max_body_bytes) {
    return ServerError{413, "the body is over " + std::to_string(max_body_bytes) + " bytes"};
  }
  out->body_bytes = content_length.value_or(0);
  out->head_only = method == "HEAD";
  req.method = out->head_only ? "GET" : std::string(method);
  size_t q = target.find('?');
  req.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) req.query = std::string(target.substr(q + 1));
  return std::nullopt;
}

std::string Serialize(const HttpResponse& r, bool head_only) {
  std::string out = "HTTP/1.1 " + std::to_string(r.status) + " " + HttpReasonPhrase(r.status) + "\r\n";
  out += "Content-Type: " + NoLineBreaks(r.content_type) + "\r\n";
  out += "Content-Length: " + std::to_string(r.body.size()) + "\r\n";
  for (const auto& [name, value] : r.headers) {
    std::string n = Lower(name);
    if (n == "content-length" || n == "connection" || n == "content-type" || n.empty() ||
        !std::all_of(n.begin(), n.end(), IsTokenChar)) {
      continue;
    }
    out += name + ": " + NoLineBreaks(value) + "\r\n";
  }
  out += "Connection: close\r\n\r\n";
  if (!head_only) out += r.body;
  return out;
}

struct Conn {
  enum class State { kReading, kHandling, kWriting, kDraining };
  uint64_t id = 0;
  int fd = -1;
  State state = State::kReading;
  std::string in;
  std::string out;
  size_t sent = 0;
  Clock::time_point deadline;
  Clock::time_point accepted_at;
  // Once the headers are in: where they end and what they ask.
  size_t header_end = 0;
  std::optional<Head> head;
};

// A connection still being read is dropped to make room for a newcomer at
// the cap only once it had this long to send its request: a slow network
// or a loaded machine can delay a fresh client's first bytes; a silent one
// past it is taking a slot from others.
constexpr std::chrono::milliseconds kEvictGrace{500};

bool Evictable(const Conn& c, Clock::time_point now) {
  return c.state == Conn::State::kReading && now - c.accepted_at >= kEvictGrace;
}

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

const std::string* HttpRequest::Header(std::string_view name) const {
  for (const auto& [n, v] : headers) {
    if (n == name) return &v;
  }
  return nullptr;
}

HttpResponse HttpResponse::Text(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse HttpResponse::Json(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.content_type = "application/json";
  r.body = std::move(body);
  return r;
}

const char* HttpReasonPhrase(int status) {
  switch (status) {
    case 100: return "Continue";
    case 200: return "OK";
    case 201: return "Created";
    case 202: return "Accepted";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 409: return "Conflict";
    case 411: return "Length Required";
    case 413: return "Content Too Large";
    case 415: return "Unsupported Media Type";
    case 422: return "Unprocessable Content";
    case 429: return "Too Many Requests";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 502: return "Bad Gateway";
    case 503: return "Service Unavailable";
    case 504: return "Gateway Timeout";
    case 505: return "HTTP Version Not Supported";
    default: return "Unknown";
  }
}

HttpServer::HttpServer(HttpServerOptions options) : options_(std::move(options)) {}

HttpServer::~HttpServer() { Stop(); }

Status HttpServer::Start(const std::string& bind, uint16_t port, Handler handler) {
  const std::string& name = options_.name;
  if (thread_.joinable() || listen_fd_ >= 0) return InvalidArgument("the " + name + " server is already started");
  if (!handler) return InvalidArgument("the " + name + " server needs a handler");
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* res = nullptr;
  const std::string service = std::to_string(port);
  if (int rc = getaddrinfo(bind.empty() ? nullptr : bind.c_str(), service.c_str(), &hints, &res); rc != 0) {
    return InvalidArgument(name + " address '" + bind + "': " + gai_strerror(rc));
  }
  Status last = IOError(name + " address '" + bind + "' has no usable address");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = ErrnoError("socket", errno);
      continue;
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 64) != 0) {
      last = ErrnoError(name + ": binding " + bind + " port " + service, errno);
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
  done_fd_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0 || done_fd_ < 0) {
    Status st = ErrnoError("eventfd", errno);
    for (int* fd : {&listen_fd_, &wake_fd_, &done_fd_}) {
      if (*fd >= 0) close(*fd);
      *fd = -1;
    }
    port_ = 0;
    address_.clear();
    return st;
  }
  handler_ = std::move(handler);
  {
    MutexLock lock(mu_);  // no thread yet: for the analysis
    stopping_ = false;
  }
  for (int i = 0; i < options_.handler_threads; ++i) workers_.emplace_back([this] { Work(); });
  thread_ = std::thread([this] { Loop(); });
  return Status::OK();
}

void HttpServer::Stop() {
  if (thread_.joinable()) {
    uint64_t one = 1;
    ssize_t n = write(wake_fd_, &one, sizeof(one));
    (void)n;
    thread_.join();
  }
  {
    MutexLock lock(mu_);
    stopping_ = true;
    work_.clear();
  }
  work_cv_.NotifyAll();
  for (auto& w : workers_) w.join();
  workers_.clear();
  {
    MutexLock lock(mu_);  // every thread is joined: for the analysis
    done_.clear();
  }
  for (int* fd : {&listen_fd_, &wake_fd_, &done_fd_}) {
    if (*fd >= 0) close(*fd);
    *fd = -1;
  }
}

HttpResponse HttpServer::Call(const HttpRequest& request) const {
  try {
    return handler_(request);
  } catch (const std::exception& e) {
    PTS_WARN(options_.name, request.method << " " << request.path << ": the handler failed: " << e.what());
  } catch (...) {
    PTS_WARN(options_.name, request.method << " " << request.path << ": the handler failed");
  }
  if (options_.error_body) return options_.error_body(500, "the handler failed");
  return HttpResponse::Text(500, "500 Internal Server Error\n");
}

void HttpServer::Work() {
  for (;;) {
    Job job;
    {
      UniqueLock lock(mu_);
      work_cv_.Wait(lock, [this]() REQUIRES(mu_) { return stopping_ || !work_.empty(); });
      if (stopping_) return;
      job = std::move(work_.front());
      work_.pop_front();
    }
    job.response = Call(job.request);
    {
      MutexLock lock(mu_);
      if (stopping_) return;
      done_.push_back(std::move(job));
    }
    uint64_t one = 1;
    ssize_t n = write(done_fd_, &one, sizeof(one));
    (void)n;
  }
}

void HttpServer::Loop() {
  std::list<Conn> conns;
  uint64_t next_id = 1;
  auto error = [&](int status, std::string_view message) {
    if (options_.error_body) return options_.error_body(status, message);
    return HttpResponse::Text(status, std::to_string(status) + " " + HttpReasonPhrase(status) + "\n");
  };
  auto close_conn = [&](std::list<Conn>::iterator it) {
    close(it->fd);
    return conns.erase(it);
  };
  auto start_response = [&](Conn& c, const HttpResponse& r) {
    c.out = Serialize(r, c.head && c.head->head_only);
    c.sent = 0;
    c.state = Conn::State::kWriting;
    c.deadline = Clock::now() + std::chrono::milliseconds(options_.write_timeout_ms);
    requests_.fetch_add(1, std::memory_order_relaxed);
  };
  // The whole request is in: answer it here or hand it to a worker.
  auto dispatch = [&](Conn& c) {
    HttpRequest req = std::move(c.head->request);
    req.body = c.in.substr(c.header_end, c.head->body_bytes);
    c.in.clear();
    if (options_.handler_threads <= 0) {
      start_response(c, Call(req));
      return;
    }
    c.state = Conn::State::kHandling;
    c.deadline = Clock::time_point::max();
    {
      MutexLock lock(mu_);
      work_.push_back(Job{c.id, std::move(req), {}});
    }
    work_cv_.NotifyOne();
  };
  Clock::time_point accept_paused_until{};
  Clock::time_point last_accept_warning{};
  std::vector<pollfd> pfds;
  std::vector<std::list<Conn>::iterator> polled;
  char buf[16384];
  constexpr size_t kFirstConn = 3;  // wake_fd_, done_fd_, listen_fd_ (its events cleared while paused)
  for (;;) {
    const Clock::time_point now = Clock::now();
    // Connections past their deadline are dropped.
    for (auto it = conns.begin(); it != conns.end();) {
      if (now >= it->deadline) {
        if (it->state == Conn::State::kReading) {
          PTS_DEBUG(options_.name, "dropping a client that sent no whole request in time");
        }
        if (it->state == Conn::State::kWriting) {
          // A client that does not read: reset, so the kernel drops the
          // unsent rest instead of keeping it for an orphaned socket.
          linger l{1, 0};
          setsockopt(it->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
          PTS_DEBUG(options_.name, "dropping a client that did not take its response in time");
        }
        it = close_conn(it);
      } else {
        ++it;
      }
    }
    pfds.clear();
    polled.clear();
    pfds.push_back({wake_fd_, POLLIN, 0});
    pfds.push_back({done_fd_, POLLIN, 0});
    // At the cap with no connection that could make room (none has been
    // read for kEvictGrace without sending a whole request: all are
    // handled, written, or just accepted), newcomers wait in the listen
    // backlog instead of being accepted and closed.
    const bool at_cap = conns.size() >= options_.max_connections;
    const bool full = at_cap && std::none_of(conns.begin(), conns.end(),
                                             [&](const Conn& c) { return Evictable(c, now); });
    const bool accepting = now >= accept_paused_until && !full;
    pfds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    Clock::time_point next = now + std::chrono::seconds(1);
    if (!accepting) next = std::min(next, accept_paused_until);
    if (full) {
      // Wake when the first connection being read may be made room of.
      for (const Conn& c : conns) {
        if (c.state == Conn::State::kReading) next = std::min(next, c.accepted_at + kEvictGrace);
      }
    }
    for (auto it = conns.begin(); it != conns.end(); ++it) {
      if (it->state == Conn::State::kHandling) continue;
      pfds.push_back({it->fd, static_cast<short>(it->state == Conn::State::kWriting ? POLLOUT : POLLIN), 0});
      polled.push_back(it);
      next = std::min(next, it->deadline);
    }
    int timeout = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(next - now).count());
    int pr = poll(pfds.data(), pfds.size(), std::max(timeout, 0));
    if (pr < 0) {
      if (errno == EINTR) continue;
      PTS_ERROR(options_.name, "poll: " << std::strerror(errno) << "; the " << options_.name << " server stops");
      break;
    }
    if (pfds[0].revents != 0) break;  // Stop

    // Responses the workers finished.
    if (pfds[1].revents != 0) {
      uint64_t count = 0;
      ssize_t n = read(done_fd_, &count, sizeof(count));
      (void)n;
      std::deque<Job> done;
      {
        MutexLock lock(mu_);
        done.swap(done_);
      }
      for (Job& job : done) {
        auto it = std::find_if(conns.begin(), conns.end(), [&](const Conn& c) { return c.id == job.conn; });
        if (it != conns.end() && it->state == Conn::State::kHandling) start_response(*it, job.response);
      }
    }

    // Serve the open connections (the iterators stay valid: erasing from a
    // list invalidates only the erased element).
    for (size_t i = kFirstConn; i < pfds.size(); ++i) {
      if (pfds[i].revents == 0) continue;
      auto it = polled[i - kFirstConn];
      Conn& c = *it;
      bool close_it = false;
      if (c.state == Conn::State::kReading) {
        for (;;) {
          // Read what the request needs (the headers' cap, then the body),
          // plus a little to decide; pipelined extras are ignored.
          const size_t want = c.head ? c.header_end + c.head->body_bytes : options_.max_request_bytes + 4096;
          if (c.in.size() >= want) break;
          ssize_t n = recv(c.fd, buf, std::min(sizeof(buf), want - c.in.size()), 0);
          if (n > 0) {
            c.in.append(buf, static_cast<size_t>(n));
            if (!c.head) {
              size_t end = HeaderEnd(c.in);
              if (end != std::string::npos && end <= options_.max_request_bytes) {
                Head head;
                if (auto err = ParseHead(std::string_view(c.in).substr(0, end), options_.max_body_bytes, &head)) {
                  start_response(c, error(err->status, err->message));
                  break;
                }
                c.header_end = end;
                c.head = std::move(head);
                if (c.head->expect_continue && c.in.size() < c.header_end + c.head->body_bytes) {
                  // A tiny interim reply on a fresh socket: it fits in the
                  // send buffer; if not, the client sends the body anyway.
                  ssize_t s = send(c.fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
                  (void)s;
                }
              } else if (c.in.size() > options_.max_request_bytes) {
                start_response(c, error(431, "the request line and headers are over " +
                                                 std::to_string(options_.max_request_bytes) + " bytes"));
                break;
              }
            }
            continue;
          }
          if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
          if (n < 0 && errno == EINTR) continue;
          close_it = true;  // EOF or an error before a whole request
          break;
        }
        if (c.state == Conn::State::kReading && c.head && c.in.size() >= c.header_end + c.head->body_bytes) {
          close_it = false;  // the request is whole even if the peer half-closed
          dispatch(c);
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

    if (accepting && pfds[2].revents != 0) {
      const uint64_t first_new = next_id;  // connections accepted from here on are this burst's
      for (;;) {
        if (conns.size() >= options_.max_connections) {
          // Make room: drop the oldest connection still being read that had
          // its grace to send a request, but never one of this burst (not
          // read yet): those wait their turn in the backlog instead.
          const Clock::time_point t = Clock::now();
          auto oldest = conns.end();
          for (auto it = conns.begin(); it != conns.end(); ++it) {
            if (Evictable(*it, t) && it->id < first_new &&
                (oldest == conns.end() || it->deadline < oldest->deadline)) {
              oldest = it;
            }
          }
          if (oldest == conns.end()) break;
          close_conn(oldest);
        }
        int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          // EMFILE and the like: stop accepting for a moment rather than spin.
          const Clock::time_point t = Clock::now();
          if (t - last_accept_warning > std::chrono::seconds(10)) {
            PTS_WARN(options_.name, "accept: " << std::strerror(errno));
            last_accept_warning = t;
          }
          accept_paused_until = t + std::chrono::milliseconds(100);
          break;
        }
        Conn c;
        c.id = next_id++;
        c.fd = fd;
        c.accepted_at = Clock::now();
        c.deadline = c.accepted_at + std::chrono::milliseconds(options_.read_timeout_ms);
        conns.push_back(std::move(c));
      }
    }
  }
  for (auto it = conns.begin(); it != conns.end();) it = close_conn(it);
}

}  // namespace ptstore::core

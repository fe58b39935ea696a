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
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>

#include "core/http_connection.h"
#include "core/logging.h"

namespace ptstore::core {

namespace {

using Clock = std::chrono::steady_clock;

// A connection still being read is dropped to make room for a newcomer at
// the cap only once it had this long to send its request: a slow network
// or a loaded machine can delay a fresh client's first bytes; a silent one
// past it is taking a slot from others.
constexpr std::chrono::milliseconds kEvictGrace{500};

bool Evictable(const HttpConnection& c, Clock::time_point now) {
  return c.state == HttpConnection::State::kReading && now - c.accepted_at >= kEvictGrace;
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

// What the poll thread keeps from round to round.
struct HttpServer::LoopState {
  std::list<HttpConnection> conns;
  uint64_t next_id = 1;
  Clock::time_point accept_paused_until{};
  Clock::time_point last_accept_warning{};
  std::vector<pollfd> pfds;
  std::vector<std::list<HttpConnection>::iterator> polled;  // the connection of pfds[kFirstConn + i]
  char buf[16384];

  static constexpr size_t kFirstConn = 3;  // wake_fd_, done_fd_, listen_fd_ (its events cleared while paused)

  std::list<HttpConnection>::iterator Close(std::list<HttpConnection>::iterator it) {
    close(it->fd);
    return conns.erase(it);
  }
};

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

HttpResponse HttpServer::ErrorResponse(int status, std::string_view message) const {
  if (options_.error_body) return options_.error_body(status, message);
  return HttpResponse::Text(status, std::to_string(status) + " " + HttpReasonPhrase(status) + "\n");
}

void HttpServer::Respond(HttpConnection& c, const HttpResponse& r) {
  c.Respond(r, options_.write_timeout_ms);
  requests_.fetch_add(1, std::memory_order_relaxed);
}

void HttpServer::Dispatch(HttpConnection& c) {
  HttpRequest req = c.TakeRequest();
  if (options_.handler_threads <= 0) {
    Respond(c, Call(req));
    return;
  }
  c.state = HttpConnection::State::kHandling;
  c.deadline = Clock::time_point::max();
  {
    MutexLock lock(mu_);
    work_.push_back(Job{c.id, std::move(req), {}});
  }
  work_cv_.NotifyOne();
}

void HttpServer::DropExpired(LoopState& s, Clock::time_point now) const {
  for (auto it = s.conns.begin(); it != s.conns.end();) {
    if (now < it->deadline) {
      ++it;
      continue;
    }
    if (it->state == HttpConnection::State::kReading) {
      PTS_DEBUG(options_.name, "dropping a client that sent no whole request in time");
    }
    if (it->state == HttpConnection::State::kWriting) {
      // A client that does not read: reset, so the kernel drops the unsent
      // rest instead of keeping it for an orphaned socket.
      linger l{1, 0};
      setsockopt(it->fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
      PTS_DEBUG(options_.name, "dropping a client that did not take its response in time");
    }
    it = s.Close(it);
  }
}

void HttpServer::FinishJobs(LoopState& s) {
  uint64_t count = 0;
  ssize_t n = read(done_fd_, &count, sizeof(count));
  (void)n;
  std::deque<Job> done;
  {
    MutexLock lock(mu_);
    done.swap(done_);
  }
  for (Job& job : done) {
    auto it = std::find_if(s.conns.begin(), s.conns.end(), [&](const HttpConnection& c) { return c.id == job.conn; });
    if (it != s.conns.end() && it->state == HttpConnection::State::kHandling) Respond(*it, job.response);
  }
}

bool HttpServer::Serve(HttpConnection& c, LoopState& s) {
  if (c.state == HttpConnection::State::kReading) {
    HttpError error;
    switch (c.Read(options_.max_request_bytes, options_.max_body_bytes, s.buf, sizeof(s.buf), &error)) {
      case HttpConnection::ReadStep::kWaiting:
        break;
      case HttpConnection::ReadStep::kWhole:
        Dispatch(c);
        break;
      case HttpConnection::ReadStep::kRejected:
        Respond(c, ErrorResponse(error.status, error.message));
        break;
      case HttpConnection::ReadStep::kClosed:
        return false;
    }
  }
  // Written at once when the response is ready; a response sent whole is
  // drained from the next round on.
  if (c.state == HttpConnection::State::kWriting) return c.Write();
  if (c.state == HttpConnection::State::kDraining) return c.Drain(s.buf, sizeof(s.buf));
  return true;
}

void HttpServer::AcceptBurst(LoopState& s) {
  const uint64_t first_new = s.next_id;  // connections accepted from here on are this burst's
  for (;;) {
    if (s.conns.size() >= options_.max_connections) {
      // Make room: drop the oldest connection still being read that had its
      // grace to send a request, but never one of this burst (not read
      // yet): those wait their turn in the backlog instead.
      const Clock::time_point t = Clock::now();
      auto oldest = s.conns.end();
      for (auto it = s.conns.begin(); it != s.conns.end(); ++it) {
        if (Evictable(*it, t) && it->id < first_new &&
            (oldest == s.conns.end() || it->deadline < oldest->deadline)) {
          oldest = it;
        }
      }
      if (oldest == s.conns.end()) break;
      s.Close(oldest);
    }
    int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      // EMFILE and the like: stop accepting for a moment rather than spin.
      const Clock::time_point t = Clock::now();
      if (t - s.last_accept_warning > std::chrono::seconds(10)) {
        PTS_WARN(options_.name, "accept: " << std::strerror(errno));
        s.last_accept_warning = t;
      }
      s.accept_paused_until = t + std::chrono::milliseconds(100);
      break;
    }
    HttpConnection c;
    c.id = s.next_id++;
    c.fd = fd;
    c.accepted_at = Clock::now();
    c.deadline = c.accepted_at + std::chrono::milliseconds(options_.read_timeout_ms);
    s.conns.push_back(std::move(c));
  }
}

void HttpServer::Loop() {
  LoopState s;
  std::list<HttpConnection>& conns = s.conns;
  for (;;) {
    const Clock::time_point now = Clock::now();
    DropExpired(s, now);  // connections past their deadline
    s.pfds.clear();
    s.polled.clear();
    s.pfds.push_back({wake_fd_, POLLIN, 0});
    s.pfds.push_back({done_fd_, POLLIN, 0});
    // At the cap with no connection that could make room (none has been
    // read for kEvictGrace without sending a whole request: all are
    // handled, written, or just accepted), newcomers wait in the listen
    // backlog instead of being accepted and closed.
    const bool at_cap = conns.size() >= options_.max_connections;
    const bool full = at_cap && std::none_of(conns.begin(), conns.end(),
                                             [&](const HttpConnection& c) { return Evictable(c, now); });
    const bool accepting = now >= s.accept_paused_until && !full;
    s.pfds.push_back({accepting ? listen_fd_ : -1, POLLIN, 0});
    Clock::time_point next = now + std::chrono::seconds(1);
    if (!accepting) next = std::min(next, s.accept_paused_until);
    if (full) {
      // Wake when the first connection being read may be made room of.
      for (const HttpConnection& c : conns) {
        if (c.state == HttpConnection::State::kReading) next = std::min(next, c.accepted_at + kEvictGrace);
      }
    }
    for (auto it = conns.begin(); it != conns.end(); ++it) {
      if (it->state == HttpConnection::State::kHandling) continue;
      const bool out = it->state == HttpConnection::State::kWriting;
      s.pfds.push_back({it->fd, static_cast<short>(out ? POLLOUT : POLLIN), 0});
      s.polled.push_back(it);
      next = std::min(next, it->deadline);
    }
    int timeout = static_cast<int>(std::chrono::ceil<std::chrono::milliseconds>(next - now).count());
    int pr = poll(s.pfds.data(), s.pfds.size(), std::max(timeout, 0));
    if (pr < 0) {
      if (errno == EINTR) continue;
      PTS_ERROR(options_.name, "poll: " << std::strerror(errno) << "; the " << options_.name << " server stops");
      break;
    }
    if (s.pfds[0].revents != 0) break;          // Stop
    if (s.pfds[1].revents != 0) FinishJobs(s);  // responses the workers finished
    // Serve the open connections (the iterators stay valid: erasing from a
    // list invalidates only the erased element).
    for (size_t i = LoopState::kFirstConn; i < s.pfds.size(); ++i) {
      if (s.pfds[i].revents == 0) continue;
      auto it = s.polled[i - LoopState::kFirstConn];
      if (!Serve(*it, s)) s.Close(it);
    }
    if (accepting && s.pfds[2].revents != 0) AcceptBurst(s);
  }
  for (auto it = conns.begin(); it != conns.end();) it = s.Close(it);
}

}  // namespace ptstore::core

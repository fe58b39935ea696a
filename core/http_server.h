// A small HTTP/1.1 server for JSON APIs and Prometheus scrapes: the one HTTP
// server of PTStore (ptstored's /metrics through storage/server/metrics_http.h,
// ptstore-sched's API through sched/service.h).
//
// One request per connection: every response has a Content-Length and
// "Connection: close", then the server closes the connection. A request may
// carry a body of Content-Length bytes (any method); "Transfer-Encoding" is
// not supported (501). The handler sees the method, the path and the query
// (split at the first '?', neither decoded), the headers (names lower-cased)
// and the body; what it returns is sent (the types, and their parsing and
// serialization, are core/http_message.h; one connection's steps are
// core/http_connection.h).
//
// Answered by the server itself, without calling the handler:
//   400  a malformed request line, header line or Content-Length
//   413  a Content-Length over max_body_bytes (answered at once, the body
//        unread)
//   431  request line and headers over max_request_bytes
//   501  a Transfer-Encoding header
//   505  an HTTP version other than 1.0 and 1.1
//   500  the handler throwing
// Their bodies come from options.error_body (plain "404 Not Found\n" text
// when unset). HEAD is passed to the handler as GET and answered without the
// body (its Content-Length kept). "Expect: 100-continue" is answered with an
// interim "100 Continue" (curl waits a second for it before a large body).
//
// One thread serves every socket with non-blocking I/O and poll(2), so a slow
// or hostile client can never block another: a connection must deliver its
// whole request (headers and body) within read_timeout_ms of its accept and
// take the response within write_timeout_ms, or it is dropped; at most
// max_connections are open at once: at the cap a newcomer displaces the
// oldest connection still being read (one accepted in an earlier round),
// and when none can go (all are handled or written, or just accepted) it
// waits in the listen backlog until a slot frees. The handler runs on that
// thread, one call at a time, unless handler_threads > 0: then that many
// worker threads run it, so a slow handler holds up only its own client.
//
// Thread safety: Start and Stop from one thread; port() and address() are
// fixed once Start has returned OK. The handler must be safe to call from
// handler_threads threads at once when that is > 1.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "core/http_message.h"
#include "core/mutex.h"
#include "ptstore/status.h"

namespace ptstore::core {

struct HttpConnection;

struct HttpServerOptions {
  int read_timeout_ms = 2000;          // from accept to the end of the request (headers and body)
  int write_timeout_ms = 5000;         // to send the whole response
  size_t max_request_bytes = 8192;     // request line and headers
  size_t max_body_bytes = 4u << 20;    // Content-Length above this: 413
  size_t max_connections = 16;         // open at once
  int handler_threads = 0;             // 0: the handler runs on the poll thread
  // Names the server in its log lines and Start's errors ("metrics", "sched").
  std::string name = "http";
  // The response the server sends for its own errors (400, 413, 431, 500,
  // 501, 505); `message` says what was wrong. Unset: "<code> <reason>\n".
  std::function<HttpResponse(int status, std::string_view message)> error_body;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;

  explicit HttpServer(HttpServerOptions options = {});
  ~HttpServer();  // Stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Listens on `bind` (a numeric IPv4 or IPv6 address, or a host name) and
  // `port` (0: an ephemeral port; see port()) and starts serving. IOError
  // when the address cannot be bound (in use, not local), PermissionDenied
  // for a privileged port without the privilege, InvalidArgument for an
  // address that does not resolve (or whose lookup failed), a null handler
  // or a second Start.
  Status Start(const std::string& bind, uint16_t port, Handler handler) EXCLUDES(mu_);
  // Stops serving and closes every connection; waits for handlers running
  // and joins the threads. Idempotent.
  void Stop() EXCLUDES(mu_);

  // The port it listens on (the ephemeral one when 0 was asked); 0 before Start.
  uint16_t port() const { return port_; }
  // "127.0.0.1:9464" or "[::1]:9464".
  const std::string& address() const { return address_; }
  // Requests answered (any status), for tests and logs.
  uint64_t requests() const { return requests_.load(std::memory_order_relaxed); }

 private:
  struct Job {
    uint64_t conn = 0;
    HttpRequest request;
    HttpResponse response;
  };
  struct LoopState;  // the poll thread's connections and accept state (http_server.cc)

  void Loop() EXCLUDES(mu_);
  void Work() EXCLUDES(mu_);
  HttpResponse Call(const HttpRequest& request) const;  // the handler; exceptions become 500
  // The steps of one round of Loop.
  void DropExpired(LoopState& s, std::chrono::steady_clock::time_point now) const;
  void FinishJobs(LoopState& s) EXCLUDES(mu_);
  // Moves one polled connection along; false: close it.
  bool Serve(HttpConnection& c, LoopState& s) EXCLUDES(mu_);
  void AcceptBurst(LoopState& s);
  // The whole request is in: answer it here or hand it to a worker.
  void Dispatch(HttpConnection& c) EXCLUDES(mu_);
  void Respond(HttpConnection& c, const HttpResponse& r);
  HttpResponse ErrorResponse(int status, std::string_view message) const;  // the server's own answers

  const HttpServerOptions options_;
  Handler handler_;
  int listen_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: Stop wakes the loop
  int done_fd_ = -1;  // eventfd: a worker finished a job
  uint16_t port_ = 0;
  std::string address_;
  std::atomic<uint64_t> requests_{0};
  std::thread thread_;
  std::vector<std::thread> workers_;
  Mutex mu_;
  CondVar work_cv_;
  std::deque<Job> work_ GUARDED_BY(mu_);
  std::deque<Job> done_ GUARDED_BY(mu_);
  bool stopping_ GUARDED_BY(mu_) = false;
};

}  // namespace ptstore::core

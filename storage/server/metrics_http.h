// The HTTP endpoint of ptstored's Prometheus scrapes: core/http_server.h
// serving these paths.
//
//   GET /metrics  200, the text that `render` returns, as
//                 "text/plain; version=0.0.4; charset=utf-8"
//   GET /         200, a short HTML page linking /metrics
//   /query, /query_by_hash
//                 with a query handler: what it answers (storage/server/kv_query.h)
//   other paths   404;  other methods 405 (HEAD is served like GET, without
//   a body);  a malformed request 400;  headers over the size cap 431;
//   another HTTP version 505;  `render` throwing 500.
//
// Every response has a Content-Length and "Connection: close": one request
// per connection, then the server closes it. A query string is ignored.
//
// One thread serves everything with non-blocking sockets and poll(2), so a
// slow or hostile client can never block the daemon nor another scraper: a
// connection must deliver its request headers (at most max_request_bytes)
// within read_timeout_ms of its accept and take the response within
// write_timeout_ms, or it is dropped; at most max_connections are open at
// once: at the cap a newcomer displaces the oldest one still being read, or
// waits in the listen backlog while none can go (core/http_server.h).
// `render` runs on that thread, one call at a time.
//
// Thread safety: Start and Stop from one thread; port() and address() are
// fixed once Start has returned OK.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/http_server.h"
#include "ptstore/status.h"

namespace ptstore::storage {

struct MetricsHttpOptions {
  int read_timeout_ms = 2000;       // from accept to the end of the request headers
  int write_timeout_ms = 5000;      // to send the whole response
  size_t max_request_bytes = 8192;  // request line and headers
  size_t max_connections = 16;      // open at once
};

class MetricsHttpServer {
 public:
  using Render = std::function<std::string()>;

  explicit MetricsHttpServer(MetricsHttpOptions options = {});
  ~MetricsHttpServer() = default;  // stops
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  // Listens on `bind` (a numeric IPv4 or IPv6 address, or a host name) and
  // `port` (0: an ephemeral port; see port()) and starts serving. IOError
  // when the address cannot be bound (in use, not local), InvalidArgument
  // for an address that does not resolve or a second Start.
  // `query` (optional) answers /query and /query_by_hash, any method.
  using Query = std::function<core::HttpResponse(const core::HttpRequest&)>;
  Status Start(const std::string& bind, uint16_t port, Render render, Query query = nullptr);
  // Stops serving and closes every connection; joins the thread. Idempotent.
  void Stop() { http_.Stop(); }

  // The port it listens on (the ephemeral one when 0 was asked); 0 before Start.
  uint16_t port() const { return http_.port(); }
  // "127.0.0.1:9464" or "[::1]:9464".
  const std::string& address() const { return http_.address(); }
  // Requests answered (any status), for tests and logs.
  uint64_t requests() const { return http_.requests(); }

 private:
  core::HttpServer http_;
};

}  // namespace ptstore::storage

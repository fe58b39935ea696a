// ptstore-sched's API: a Scheduler (sched/scheduler.h) over HTTP + JSON
// (core/http_server.h). man/ptstore-sched.8 documents it with examples.
//
//   POST   /v1/instances                   {"id","node","endpoint"}    -> {"id"}
//   DELETE /v1/instances/<id>                                          -> {"id"}
//   GET    /v1/instances                   -> {"instances":[{"id","node","endpoint","running","queued_s","routed"}]}
//   POST   /v1/route                       {"ns","tokens":[...],"session"}
//          -> {"ticket","instance","node","local_tokens","cluster_tokens","load_tokens","load_s","compute_s","reason"}
//   POST   /v1/requests/<ticket>/prefilled                             -> {"ticket"}
//   POST   /v1/requests/<ticket>/finished                              -> {"ticket"}
//   GET    /v1/policy  -> {"policy","load_bound_s","remote_path","model","gpu"}
//   GET    /metrics    Prometheus text (routes by instance and reason, instances, route latency)
//
// <id> in a path is percent-decoded. "endpoint" and "session" may be left
// out (empty); other fields are required, and fields the API does not know
// are ignored. Node ids and tokens are unsigned 32-bit integers, tickets
// unsigned 64-bit ones.
//
// Every error is a JSON object {"error": message, "code": CodeName} (the
// code's lower_snake name, include/ptstore/status.h) with the HTTP status of
// its code (HttpStatusOf, include/ptstore/status_codes.h): malformed JSON and wrong or missing fields are
// 400 invalid_argument naming the field, an unknown instance or ticket 404
// not_found, a conflicting registration 409 already_exists, a route with no
// instance registered 503 unavailable, an unknown path 404, a known path
// with another method 405 (with Allow), a body over max_body_bytes 413.
//
// Thread safety: the service's methods from one thread (Start, Stop);
// Handle may be called from any thread (the HTTP server's workers do).
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>

#include "core/http_server.h"
#include "core/mutex.h"
#include "core/prometheus.h"
#include "ptstore/status.h"
#include "sched/scheduler.h"

namespace ptstore::sched {

// The code of an HTTP status (the client's reading of a reply without a
// JSON "code"); the other way is ptstore::HttpStatusOf, from the registry.
using ptstore::HttpStatusOf;
Code CodeOfHttpStatus(int status);
// The code whose CodeName is `name` ("not_found"); false when there is none.
bool CodeFromName(std::string_view name, Code* code);
// Percent-encoding of a path segment (unreserved characters kept) and its
// decoding (false on a malformed escape).
std::string PercentEncode(std::string_view s);
bool PercentDecode(std::string_view s, std::string* out);

struct SchedServiceOptions {
  std::string bind = "127.0.0.1";
  uint16_t port = 7600;  // 0: an ephemeral port (see port())
  size_t max_body_bytes = 4u << 20;
  // Threads answering requests (a route asks the store's index).
  int handler_threads = 4;
  size_t max_connections = 128;  // each may hold up to max_body_bytes
  int read_timeout_ms = 10000;
  int write_timeout_ms = 10000;
};

class SchedService {
 public:
  // `scheduler` must outlive the service.
  SchedService(Scheduler* scheduler, SchedServiceOptions options = {});
  ~SchedService();  // Stop()
  SchedService(const SchedService&) = delete;
  SchedService& operator=(const SchedService&) = delete;

  // Starts serving on options.bind:options.port. IOError when the address
  // cannot be bound, InvalidArgument when it does not resolve.
  Status Start();
  void Stop();  // idempotent
  uint16_t port() const { return http_.port(); }
  const std::string& address() const { return http_.address(); }

  // The answer to one request (what the HTTP server calls; exposed for tests).
  core::HttpResponse Handle(const core::HttpRequest& request) EXCLUDES(mu_);
  // The /metrics text.
  std::string RenderMetrics() const EXCLUDES(mu_);

 private:
  core::HttpResponse PostInstance(const core::HttpRequest& request);
  core::HttpResponse DeleteInstance(const std::string& id) EXCLUDES(mu_);
  core::HttpResponse GetInstances();
  core::HttpResponse PostRoute(const core::HttpRequest& request) EXCLUDES(mu_);
  core::HttpResponse PostTicket(std::string_view ticket, std::string_view what);
  core::HttpResponse GetPolicy();

  Scheduler* const scheduler_;
  const SchedServiceOptions options_;
  core::HttpServer http_;
  mutable core::Mutex mu_;
  std::map<std::pair<std::string, std::string>, uint64_t> routed_ GUARDED_BY(mu_);  // (instance, reason) -> routes
  std::map<std::string, uint64_t> route_errors_ GUARDED_BY(mu_);  // code name -> routes that failed
  core::LatencyHistogram route_latency_;                          // atomic counters: no lock
};

}  // namespace ptstore::sched

// SchedClient: the C++ client of ptstore-sched's HTTP + JSON API
// (sched/service.h, man/ptstore-sched.8), for serving instances and tools.
//
// Each call is one HTTP/1.1 request on a fresh blocking TCP connection (the
// service closes it after the response), bounded by timeout_ms from connect
// to the end of the response. Errors are ptstore::Status codes:
//   Unavailable       the service cannot be reached (no address, refused,
//                     connect timed out) or answered 502/503 (no instance
//                     registered, for Route)
//   DeadlineExceeded  connected, but no whole response within timeout_ms
//   Protocol          the response is not HTTP or its JSON is not the API's
//   others            the service's error: the "code" of its JSON body
//                     (not_found, already_exists, invalid_argument, ...), or
//                     the HTTP status's code when the body has none
//                     (CodeOfHttpStatus); the message is the service's.
//
// Thread safety: a SchedClient holds no connection; its methods may be
// called from any number of threads at once.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ptstore/status.h"
#include "sched/scheduler.h"

namespace ptstore::sched {

struct SchedClientOptions {
  // "host:port", "[v6]:port" or "host" (port 7600).
  std::string address = "127.0.0.1:7600";
  int timeout_ms = 5000;
};

// The service's reply to one request.
struct SchedHttpReply {
  int status = 0;
  std::string content_type;
  std::string body;
};

// GET /v1/policy.
struct SchedPolicyInfo {
  std::string policy;
  double load_bound_s = 0;
  std::string remote_path;
  std::string model;
  std::string gpu;
};

class SchedClient {
 public:
  explicit SchedClient(SchedClientOptions options = {});

  Status Register(const InstanceSpec& spec);
  Status Unregister(const std::string& id);
  Result<std::vector<InstanceState>> Instances();
  Result<RouteDecision> Route(const RouteRequest& request);
  Status PrefillDone(uint64_t ticket);
  Status Finished(uint64_t ticket);
  Result<SchedPolicyInfo> Policy();

  // One raw exchange: `method` `path` with `body` (JSON when not empty). Any
  // HTTP status is a reply; only transport failures are errors.
  Result<SchedHttpReply> Call(const std::string& method, const std::string& path, const std::string& body = "");

  const SchedClientOptions& options() const { return options_; }

 private:
  // Call, then the reply's error as a Status (OK for 2xx) with its body.
  Result<std::string> CallOk(const std::string& method, const std::string& path, const std::string& body = "");

  SchedClientOptions options_;
};

}  // namespace ptstore::sched

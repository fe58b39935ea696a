#include "sched/service.h"

#include <chrono>
#include <exception>
#include <limits>
#include <optional>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/logging.h"

namespace ptstore::sched {

namespace {

using json = nlohmann::json;
using core::HttpRequest;
using core::HttpResponse;

constexpr int kMaxJsonDepth = 32;  // the API's objects are 3 deep; deeper bodies are refused unparsed
constexpr Code kAllCodes[] = {Code::kOk, Code::kNotFound, Code::kInvalidArgument, Code::kAlreadyExists,
                              Code::kPermissionDenied, Code::kResourceExhausted, Code::kUnavailable,
                              Code::kDeadlineExceeded, Code::kCorruption, Code::kProtocol, Code::kIOError,
                              Code::kAborted, Code::kInternal, Code::kUnimplemented};

// JSON text of `j`; invalid UTF-8 (an id from a percent-decoded path) is
// replaced rather than thrown on.
std::string Dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

HttpResponse JsonReply(int status, const json& j) { return HttpResponse::Json(status, Dump(j) + "\n"); }

HttpResponse ErrorReply(int http_status, Code code, std::string_view message) {
  return JsonReply(http_status, json{{"error", std::string(message)}, {"code", std::string(CodeName(code))}});
}

HttpResponse ErrorReply(const Status& st) { return ErrorReply(HttpStatusOf(st.code()), st.code(), st.message()); }

HttpResponse MethodNotAllowed(const HttpRequest& req, const char* allow) {
  HttpResponse r = ErrorReply(405, Code::kInvalidArgument,
                              req.method + " is not allowed on " + req.path + " (allowed: " + allow + ")");
  r.headers.emplace_back("Allow", allow);
  return r;
}

// How deeply `text` nests arrays and objects (strings skipped), stopping
// once past `limit`.
int NestingDepth(std::string_view text, int limit) {
  int depth = 0, max_depth = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      max_depth = std::max(max_depth, ++depth);
      if (max_depth > limit) return max_depth;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return max_depth;
}

Result<json> ParseObject(const HttpRequest& req) {
  if (req.body.empty()) return InvalidArgument("the request needs a JSON object body");
  if (NestingDepth(req.body, kMaxJsonDepth) > kMaxJsonDepth) {
    return InvalidArgument("the JSON body nests deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  }
  json j;
  try {
    j = json::parse(req.body);
  } catch (const json::exception& e) {
    return InvalidArgument(std::string("malformed JSON: ") + e.what());
  }
  if (!j.is_object()) return InvalidArgument("the JSON body must be an object, not " + std::string(j.type_name()));
  return j;
}

// The string field `name`; `fallback` when absent and not required.
Result<std::string> StringField(const json& j, const char* name, bool required) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) {
    if (required) return InvalidArgument(std::string("field '") + name + "' is missing (a string)");
    return std::string();
  }
  if (!it->is_string()) {
    return InvalidArgument(std::string("field '") + name + "' must be a string, not " + it->type_name());
  }
  return it->get<std::string>();
}

Result<uint64_t> UintField(const json& j, const char* name, uint64_t max) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) {
    return InvalidArgument(std::string("field '") + name + "' is missing (an unsigned integer)");
  }
  if (!it->is_number_unsigned() || it->get<uint64_t>() > max) {
    return InvalidArgument(std::string("field '") + name + "' must be an unsigned integer <= " + std::to_string(max));
  }
  return it->get<uint64_t>();
}

Result<std::vector<uint32_t>> TokensField(const json& j, const char* name) {
  auto it = j.find(name);
  if (it == j.end() || it->is_null()) {
    return InvalidArgument(std::string("field '") + name + "' is missing (an array of token ids)");
  }
  if (!it->is_array()) {
    return InvalidArgument(std::string("field '") + name + "' must be an array of unsigned 32-bit integers, not " +
                           it->type_name());
  }
  std::vector<uint32_t> tokens;
  tokens.reserve(it->size());
  for (size_t i = 0; i < it->size(); ++i) {
    const json& t = (*it)[i];
    if (!t.is_number_unsigned() || t.get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
      return InvalidArgument(std::string("field '") + name +
                             "' must be an array of unsigned 32-bit integers: element " + std::to_string(i) + " is " +
                             Dump(t).substr(0, 40));
    }
    tokens.push_back(static_cast<uint32_t>(t.get<uint64_t>()));
  }
  return tokens;
}

// A metric label for a decision's reason: its words up to the first ':' or
// '(' (what follows is detail, e.g. an index error), at most 64 bytes, so
// that the label's values stay few.
// The scheduler's reason without what varies per request (an index
// error's text), so the label set stays small: "longest prefix",
// "least-load (longest prefix over load bound)", "session", ...
std::string ReasonLabel(std::string_view reason) {
  size_t cut = reason.find(" (index unavailable");
  std::string_view r = reason.substr(0, cut);
  while (!r.empty() && r.back() == ' ') r.remove_suffix(1);
  if (r.size() > 64) r = r.substr(0, 64);
  return r.empty() ? std::string("none") : std::string(r);
}

json InstanceJson(const InstanceState& s) {
  return json{{"id", s.spec.id},      {"node", s.spec.node},    {"endpoint", s.spec.endpoint},
              {"running", s.running}, {"queued_s", s.queued_s}, {"routed", s.routed}};
}

}  // namespace

Code CodeOfHttpStatus(int status) {
  if (status >= 200 && status < 300) return Code::kOk;
  switch (status) {
    case 400:
    case 405:
    case 411:
    case 413:
    case 415:
    case 422:
    case 431: return Code::kInvalidArgument;
    case 401:
    case 403: return Code::kPermissionDenied;
    case 404: return Code::kNotFound;
    case 408:
    case 504: return Code::kDeadlineExceeded;
    case 409: return Code::kAlreadyExists;
    case 429: return Code::kResourceExhausted;
    case 501:
    case 505: return Code::kUnimplemented;
    case 502:
    case 503: return Code::kUnavailable;
    default: break;
  }
  return status >= 500 ? Code::kInternal : Code::kProtocol;
}

bool CodeFromName(std::string_view name, Code* code) {
  for (Code c : kAllCodes) {
    if (CodeName(c) == name) {
      *code = c;
      return true;
    }
  }
  return false;
}

std::string PercentEncode(std::string_view s) {
  static constexpr char kHex[] = "0123456789ABCDEF";
  std::string out;
  for (char ch : s) {
    auto c = static_cast<unsigned char>(ch);
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '.' ||
        c == '_' || c == '~') {
      out.push_back(ch);
    } else {
      out.push_back('%');
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

bool PercentDecode(std::string_view s, std::string* out) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '%') {
      out->push_back(s[i]);
      continue;
    }
    if (i + 2 >= s.size()) return false;  // "%" or "%X" at the end
    int hi = hex(s[i + 1]), lo = hex(s[i + 2]);
    if (hi < 0 || lo < 0) return false;
    out->push_back(static_cast<char>(hi * 16 + lo));
    i += 2;
  }
  return true;
}

SchedService::SchedService(Scheduler* scheduler, SchedServiceOptions options)
    : scheduler_(scheduler),
      options_(std::move(options)),
      http_([this] {
        core::HttpServerOptions h;
        h.read_timeout_ms = options_.read_timeout_ms;
        h.write_timeout_ms = options_.write_timeout_ms;
        h.max_body_bytes = options_.max_body_bytes;
        h.max_connections = options_.max_connections;
        h.handler_threads = options_.handler_threads;
        h.name = "sched";
        h.error_body = [](int status, std::string_view message) {
          // The server's own errors: malformed or oversized requests, a
          // chunked body or another HTTP version, a handler that threw.
          Code code = Code::kInvalidArgument;
          if (status == 501 || status == 505) {
            code = Code::kUnimplemented;
          } else if (status >= 500) {
            code = Code::kInternal;
          }
          return ErrorReply(status, code, message);
        };
        return h;
      }()) {}

SchedService::~SchedService() { Stop(); }

Status SchedService::Start() {
  return http_.Start(options_.bind, options_.port, [this](const HttpRequest& req) { return Handle(req); });
}

void SchedService::Stop() { http_.Stop(); }

HttpResponse SchedService::Handle(const HttpRequest& req) {
  const std::string_view path = req.path;
  if (path == "/v1/route") {
    if (req.method != "POST") return MethodNotAllowed(req, "POST");
    return PostRoute(req);
  }
  if (path == "/v1/instances") {
    if (req.method == "GET") return GetInstances();
    if (req.method == "POST") return PostInstance(req);
    return MethodNotAllowed(req, "GET, POST");
  }
  constexpr std::string_view kInstance = "/v1/instances/";
  if (path.starts_with(kInstance) && path.size() > kInstance.size() &&
      path.find('/', kInstance.size()) == std::string_view::npos) {
    if (req.method != "DELETE") return MethodNotAllowed(req, "DELETE");
    std::string id;
    if (!PercentDecode(path.substr(kInstance.size()), &id)) {
      return ErrorReply(InvalidArgument("malformed percent-escape in the instance id"));
    }
    return DeleteInstance(id);
  }
  constexpr std::string_view kRequests = "/v1/requests/";
  if (path.starts_with(kRequests)) {
    std::string_view rest = path.substr(kRequests.size());
    size_t slash = rest.find('/');
    if (slash != std::string_view::npos && slash > 0) {
      std::string_view what = rest.substr(slash + 1);
      if (what == "prefilled" || what == "finished") {
        if (req.method != "POST") return MethodNotAllowed(req, "POST");
        return PostTicket(rest.substr(0, slash), what);
      }
    }
  }
  if (path == "/v1/policy") {
    if (req.method != "GET") return MethodNotAllowed(req, "GET");
    return GetPolicy();
  }
  if (path == "/metrics") {
    if (req.method != "GET") return MethodNotAllowed(req, "GET");
    HttpResponse r = HttpResponse::Text(200, RenderMetrics());
    r.content_type = "text/plain; version=0.0.4; charset=utf-8";
    return r;
  }
  return ErrorReply(NotFound("no such endpoint: " + req.path + " (see ptstore-sched(8))"));
}

HttpResponse SchedService::PostInstance(const HttpRequest& req) {
  Result<json> j = ParseObject(req);
  if (!j.ok()) return ErrorReply(j.status());
  InstanceSpec spec;
  Result<std::string> id = StringField(*j, "id", true);
  if (!id.ok()) return ErrorReply(id.status());
  if (id->empty()) return ErrorReply(InvalidArgument("field 'id' must not be empty"));
  Result<uint64_t> node = UintField(*j, "node", std::numeric_limits<uint32_t>::max());
  if (!node.ok()) return ErrorReply(node.status());
  Result<std::string> endpoint = StringField(*j, "endpoint", false);
  if (!endpoint.ok()) return ErrorReply(endpoint.status());
  spec.id = std::move(*id);
  spec.node = static_cast<uint32_t>(*node);
  spec.endpoint = std::move(*endpoint);
  if (Status st = scheduler_->Register(spec); !st.ok()) return ErrorReply(st);
  PTS_INFO("sched", "instance " << spec.id << " registered on node " << spec.node
                                << (spec.endpoint.empty() ? "" : " at " + spec.endpoint));
  return JsonReply(200, json{{"id", spec.id}});
}

HttpResponse SchedService::DeleteInstance(const std::string& id) {
  if (Status st = scheduler_->Unregister(id); !st.ok()) return ErrorReply(st);
  {
    // Its series go with it (instances come and go under new names).
    core::MutexLock lock(mu_);
    std::erase_if(routed_, [&](const auto& kv) { return kv.first.first == id; });
  }
  PTS_INFO("sched", "instance " << id << " unregistered");
  return JsonReply(200, json{{"id", id}});
}

HttpResponse SchedService::GetInstances() {
  json list = json::array();
  for (const InstanceState& s : scheduler_->Instances()) list.push_back(InstanceJson(s));
  return JsonReply(200, json{{"instances", std::move(list)}});
}

HttpResponse SchedService::PostRoute(const HttpRequest& req) {
  Result<json> j = ParseObject(req);
  if (!j.ok()) return ErrorReply(j.status());
  RouteRequest rr;
  Result<std::string> ns = StringField(*j, "ns", true);
  if (!ns.ok()) return ErrorReply(ns.status());
  Result<std::vector<uint32_t>> tokens = TokensField(*j, "tokens");
  if (!tokens.ok()) return ErrorReply(tokens.status());
  Result<std::string> session = StringField(*j, "session", false);
  if (!session.ok()) return ErrorReply(session.status());
  rr.ns = std::move(*ns);
  rr.tokens = std::move(*tokens);
  rr.session = std::move(*session);

  const auto t0 = std::chrono::steady_clock::now();
  Result<RouteDecision> d = scheduler_->Route(rr);
  route_latency_.Observe(std::chrono::steady_clock::now() - t0);
  if (!d.ok()) {
    {
      core::MutexLock lock(mu_);
      ++route_errors_[std::string(CodeName(d.status().code()))];
    }
    PTS_DEBUG("route", rr.ns << " " << rr.tokens.size() << " tokens: " << d.status().ToString());
    return ErrorReply(d.status());
  }
  {
    core::MutexLock lock(mu_);
    ++routed_[{d->instance, ReasonLabel(d->reason)}];
  }
  PTS_DEBUG("route", "ticket " << d->ticket << ": " << rr.ns << " " << rr.tokens.size() << " tokens"
                               << (rr.session.empty() ? "" : " session " + rr.session) << " -> " << d->instance
                               << " (node " << d->node << ", local " << d->local_tokens << ", cluster "
                               << d->cluster_tokens << ", load " << d->plan.load_tokens << " in " << d->plan.load_s
                               << " s, compute " << d->plan.compute_s << " s): " << d->reason);
  return JsonReply(200, json{{"ticket", d->ticket},
                             {"instance", d->instance},
                             {"node", d->node},
                             {"local_tokens", d->local_tokens},
                             {"cluster_tokens", d->cluster_tokens},
                             {"load_tokens", d->plan.load_tokens},
                             {"load_s", d->plan.load_s},
                             {"compute_s", d->plan.compute_s},
                             {"reason", d->reason}});
}

HttpResponse SchedService::PostTicket(std::string_view ticket_text, std::string_view what) {
  uint64_t ticket = 0;
  bool ok = !ticket_text.empty() && ticket_text.size() <= 20;
  for (char c : ticket_text) {
    if (!ok) break;
    if (c < '0' || c > '9') {
      ok = false;
      break;
    }
    const uint64_t digit = static_cast<uint64_t>(c - '0');
    if (ticket > (std::numeric_limits<uint64_t>::max() - digit) / 10) {
      ok = false;
      break;
    }
    ticket = ticket * 10 + digit;
  }
  if (!ok) {
    return ErrorReply(InvalidArgument("ticket '" + std::string(ticket_text) + "' is not an unsigned 64-bit integer"));
  }
  Status st = what == "prefilled" ? scheduler_->PrefillDone(ticket) : scheduler_->Finished(ticket);
  if (!st.ok()) return ErrorReply(st);
  return JsonReply(200, json{{"ticket", ticket}});
}

HttpResponse SchedService::GetPolicy() {
  const SchedulerOptions& o = scheduler_->options();
  return JsonReply(200, json{{"policy", PolicyName(o.policy)},
                             {"load_bound_s", o.load_bound_s},
                             {"remote_path", LoadPathName(o.remote_path)},
                             {"model", o.cost.profile().model},
                             {"gpu", o.cost.profile().gpu}});
}

std::string SchedService::RenderMetrics() const {
  core::PromWriter w;
  const SchedulerOptions& o = scheduler_->options();
  w.Family("ptstore_sched_info", core::MetricType::kGauge, "The scheduler's policy and cost model.");
  w.Sample(1, {{"policy", PolicyName(o.policy)}, {"model", o.cost.profile().model}, {"gpu", o.cost.profile().gpu}});
  const std::vector<InstanceState> instances = scheduler_->Instances();
  w.Gauge("ptstore_sched_instances", "Instances registered.", instances.size());
  w.Family("ptstore_sched_instance_running", core::MetricType::kGauge, "Requests routed to an instance, not finished.");
  for (const InstanceState& s : instances) w.Sample(s.running, {{"instance", s.spec.id}});
  w.Family("ptstore_sched_instance_queued_seconds", core::MetricType::kGauge,
           "Estimated prefill seconds routed to an instance, not yet prefilled.");
  for (const InstanceState& s : instances) w.Sample(s.queued_s, {{"instance", s.spec.id}});
  {
    core::MutexLock lock(mu_);
    w.Family("ptstore_sched_routed_total", core::MetricType::kCounter, "Requests routed, by instance and reason.");
    for (const auto& [key, n] : routed_) w.Sample(n, {{"instance", key.first}, {"reason", key.second}});
    w.Family("ptstore_sched_route_errors_total", core::MetricType::kCounter, "Routes that failed, by error code.");
    for (const auto& [code, n] : route_errors_) w.Sample(n, {{"code", code}});
  }
  w.Family("ptstore_sched_route_seconds", core::MetricType::kHistogram, "Time to decide a route.");
  w.Histogram(route_latency_.Snapshot());
  if (!w.status().ok()) PTS_ERROR("metrics", w.status().ToString());
  return w.Take();
}

}  // namespace ptstore::sched

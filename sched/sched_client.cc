#include "sched/sched_client.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string_view>

#include <nlohmann/json.hpp>

#include "sched/service.h"

namespace ptstore::sched {

namespace {

using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

constexpr size_t kMaxReplyBytes = 64u << 20;

// Milliseconds left until `deadline` (0 when past).
int LeftMs(Clock::time_point deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return left > 0 ? static_cast<int>(left) : 0;
}

// Splits "host:port", "[v6]:port" or "host".
Status SplitAddress(const std::string& address, std::string* host, std::string* port) {
  if (address.empty()) return InvalidArgument("empty scheduler address");
  if (address[0] == '[') {
    size_t close = address.find(']');
    if (close == std::string::npos) return InvalidArgument("scheduler address '" + address + "': no ']'");
    *host = address.substr(1, close - 1);
    if (close + 1 == address.size()) {
      *port = "7600";
    } else if (address[close + 1] == ':' && close + 2 < address.size()) {
      *port = address.substr(close + 2);
    } else {
      return InvalidArgument("scheduler address '" + address + "': expected [host]:port");
    }
    return Status::OK();
  }
  size_t colon = address.rfind(':');
  if (colon == std::string::npos) {
    *host = address;
    *port = "7600";
  } else if (address.find(':') != colon) {
    return InvalidArgument("scheduler address '" + address + "': write an IPv6 address as [addr]:port");
  } else {
    *host = address.substr(0, colon);
    *port = address.substr(colon + 1);
  }
  if (host->empty() || port->empty()) return InvalidArgument("scheduler address '" + address + "': expected host:port");
  return Status::OK();
}

// A connected socket, or Unavailable.
Result<int> Connect(const std::string& address, Clock::time_point deadline) {
  std::string host, port;
  PTS_RETURN_IF_ERROR(SplitAddress(address, &host, &port));
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* res = nullptr;
  if (int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res); rc != 0) {
    return Unavailable("scheduler " + address + ": " + gai_strerror(rc));
  }
  Status last = Unavailable("scheduler " + address + ": no usable address");
  for (addrinfo* ai = res; ai != nullptr; ai = ai->ai_next) {
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      last = Unavailable("scheduler " + address + ": socket: " + std::strerror(errno));
      continue;
    }
    int err = 0;
    if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      err = errno;
      if (err == EINPROGRESS) {
        pollfd p{fd, POLLOUT, 0};
        int pr;
        do {
          pr = poll(&p, 1, LeftMs(deadline));
        } while (pr < 0 && errno == EINTR);
        if (pr == 0) {
          err = ETIMEDOUT;
        } else {
          socklen_t len = sizeof(err);
          if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
        }
      }
    }
    if (err == 0) {
      freeaddrinfo(res);
      return fd;
    }
    close(fd);
    last = Unavailable("scheduler " + address + ": connect: " + std::strerror(err));
  }
  freeaddrinfo(res);
  return last;
}

Result<SchedHttpReply> ParseReply(const std::string& raw) {
  size_t end = raw.find("\r\n\r\n");
  if (end == std::string::npos) return ProtocolError("scheduler reply without the end of its headers");
  std::string_view head(raw.data(), end);
  size_t eol = head.find("\r\n");
  std::string_view status_line = head.substr(0, eol);
  if (!status_line.starts_with("HTTP/1.") || status_line.size() < 12 || status_line[8] != ' ') {
    return ProtocolError("scheduler reply: bad status line '" + std::string(status_line.substr(0, 80)) + "'");
  }
  SchedHttpReply r;
  for (int i = 9; i < 12; ++i) {
    char c = status_line[i];
    if (c < '0' || c > '9') return ProtocolError("scheduler reply: bad status line");
    r.status = r.status * 10 + (c - '0');
  }
  std::optional<size_t> content_length;
  size_t pos = eol == std::string_view::npos ? head.size() : eol + 2;
  while (pos < head.size()) {
    size_t next = head.find("\r\n", pos);
    if (next == std::string_view::npos) next = head.size();
    std::string_view line = head.substr(pos, next - pos);
    pos = next + 2;
    size_t colon = line.find(':');
    if (colon == std::string_view::npos) continue;
    std::string name(line.substr(0, colon));
    for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string_view value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (name == "content-type") r.content_type = std::string(value);
    if (name == "content-length") {
      char* endp = nullptr;
      std::string v(value);
      unsigned long long n = std::strtoull(v.c_str(), &endp, 10);
      if (v.empty() || *endp != '\0') return ProtocolError("scheduler reply: bad Content-Length");
      content_length = n;
    }
  }
  r.body = raw.substr(end + 4);
  if (content_length) {
    if (r.body.size() < *content_length) return ProtocolError("scheduler reply: truncated body");
    r.body.resize(*content_length);
  }
  return r;
}

Result<json> ParseJson(const std::string& body) {
  try {
    return json::parse(body);
  } catch (const json::exception& e) {
    return ProtocolError(std::string("scheduler reply is not JSON: ") + e.what());
  }
}

// Field accessors for the service's replies: a missing or mistyped field is
// a Protocol error naming it.
template <typename T>
Status Get(const json& j, const char* name, T* out) {
  auto it = j.find(name);
  if (it == j.end()) return ProtocolError(std::string("scheduler reply: no field '") + name + "'");
  try {
    *out = it->get<T>();
  } catch (const json::exception& e) {
    return ProtocolError(std::string("scheduler reply: field '") + name + "': " + e.what());
  }
  return Status::OK();
}

}  // namespace

SchedClient::SchedClient(SchedClientOptions options) : options_(std::move(options)) {}

Result<SchedHttpReply> SchedClient::Call(const std::string& method, const std::string& path, const std::string& body) {
  const Clock::time_point deadline = Clock::now() + std::chrono::milliseconds(options_.timeout_ms);
  PTS_ASSIGN_OR_RETURN(int fd, Connect(options_.address, deadline));
  std::string req = method + " " + path + " HTTP/1.1\r\nHost: " + options_.address +
                    "\r\nUser-Agent: ptstore-sched-client\r\nAccept: application/json\r\n";
  if (!body.empty() || method == "POST" || method == "PUT") {
    req += "Content-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  }
  req += "Connection: close\r\n\r\n";
  req += body;
  const std::string what = "scheduler " + options_.address + ": " + method + " " + path;
  auto fail = [&](Status st) {
    close(fd);
    return st;
  };
  size_t sent = 0;
  while (sent < req.size()) {
    ssize_t n = send(fd, req.data() + sent, req.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      pollfd p{fd, POLLOUT, 0};
      int pr = poll(&p, 1, LeftMs(deadline));
      if (pr == 0) return fail(DeadlineExceeded(what + ": sending timed out"));
      if (pr < 0 && errno != EINTR) return fail(Unavailable(what + ": poll: " + std::strerror(errno)));
      continue;
    }
    // The service may answer early (413) and close: read what it said.
    if (errno == EPIPE || errno == ECONNRESET) break;
    return fail(Unavailable(what + ": send: " + std::strerror(errno)));
  }
  std::string raw;
  char buf[16384];
  for (;;) {
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n > 0) {
      raw.append(buf, static_cast<size_t>(n));
      if (raw.size() > kMaxReplyBytes) return fail(ProtocolError(what + ": the reply is over 64 MiB"));
      continue;
    }
    if (n == 0) break;
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      pollfd p{fd, POLLIN, 0};
      int pr = poll(&p, 1, LeftMs(deadline));
      if (pr == 0) {
        return fail(DeadlineExceeded(what + ": no whole reply within " + std::to_string(options_.timeout_ms) + " ms"));
      }
      if (pr < 0 && errno != EINTR) return fail(Unavailable(what + ": poll: " + std::strerror(errno)));
      continue;
    }
    if (errno == ECONNRESET && !raw.empty()) break;
    return fail(Unavailable(what + ": recv: " + std::strerror(errno)));
  }
  close(fd);
  if (raw.empty()) return Unavailable(what + ": the connection closed without a reply");
  Result<SchedHttpReply> r = ParseReply(raw);
  if (!r.ok()) return r.status().WithContext(what);
  return r;
}

Result<std::string> SchedClient::CallOk(const std::string& method, const std::string& path, const std::string& body) {
  PTS_ASSIGN_OR_RETURN(SchedHttpReply r, Call(method, path, body));
  if (r.status >= 200 && r.status < 300) return std::move(r.body);
  Code code = CodeOfHttpStatus(r.status);
  std::string message = "HTTP " + std::to_string(r.status);
  try {
    json j = json::parse(r.body);
    if (j.is_object()) {
      if (auto it = j.find("code"); it != j.end() && it->is_string()) {
        Code named;
        if (CodeFromName(it->get<std::string>(), &named) && named != Code::kOk) code = named;
      }
      if (auto it = j.find("error"); it != j.end() && it->is_string()) message = it->get<std::string>();
    }
  } catch (const json::exception&) {
    if (!r.body.empty()) message += ": " + r.body.substr(0, 200);
  }
  if (code == Code::kOk) code = Code::kProtocol;
  return Status(code, message);
}

Status SchedClient::Register(const InstanceSpec& spec) {
  json j{{"id", spec.id}, {"node", spec.node}, {"endpoint", spec.endpoint}};
  return CallOk("POST", "/v1/instances", j.dump(-1, ' ', false, json::error_handler_t::replace)).status();
}

Status SchedClient::Unregister(const std::string& id) {
  return CallOk("DELETE", "/v1/instances/" + PercentEncode(id)).status();
}

Result<std::vector<InstanceState>> SchedClient::Instances() {
  PTS_ASSIGN_OR_RETURN(std::string body, CallOk("GET", "/v1/instances"));
  PTS_ASSIGN_OR_RETURN(json j, ParseJson(body));
  auto it = j.is_object() ? j.find("instances") : j.end();
  if (it == j.end() || !it->is_array()) return ProtocolError("scheduler reply: no 'instances' array");
  std::vector<InstanceState> out;
  for (const json& e : *it) {
    InstanceState s;
    PTS_RETURN_IF_ERROR(Get(e, "id", &s.spec.id));
    PTS_RETURN_IF_ERROR(Get(e, "node", &s.spec.node));
    PTS_RETURN_IF_ERROR(Get(e, "endpoint", &s.spec.endpoint));
    PTS_RETURN_IF_ERROR(Get(e, "running", &s.running));
    PTS_RETURN_IF_ERROR(Get(e, "queued_s", &s.queued_s));
    PTS_RETURN_IF_ERROR(Get(e, "routed", &s.routed));
    out.push_back(std::move(s));
  }
  return out;
}

Result<RouteDecision> SchedClient::Route(const RouteRequest& request) {
  json j{{"ns", request.ns}, {"tokens", request.tokens}};
  if (!request.session.empty()) j["session"] = request.session;
  PTS_ASSIGN_OR_RETURN(std::string body,
                       CallOk("POST", "/v1/route", j.dump(-1, ' ', false, json::error_handler_t::replace)));
  PTS_ASSIGN_OR_RETURN(json r, ParseJson(body));
  if (!r.is_object()) return ProtocolError("scheduler reply: not an object");
  RouteDecision d;
  PTS_RETURN_IF_ERROR(Get(r, "ticket", &d.ticket));
  PTS_RETURN_IF_ERROR(Get(r, "instance", &d.instance));
  PTS_RETURN_IF_ERROR(Get(r, "node", &d.node));
  PTS_RETURN_IF_ERROR(Get(r, "local_tokens", &d.local_tokens));
  PTS_RETURN_IF_ERROR(Get(r, "cluster_tokens", &d.cluster_tokens));
  PTS_RETURN_IF_ERROR(Get(r, "load_tokens", &d.plan.load_tokens));
  PTS_RETURN_IF_ERROR(Get(r, "load_s", &d.plan.load_s));
  PTS_RETURN_IF_ERROR(Get(r, "compute_s", &d.plan.compute_s));
  PTS_RETURN_IF_ERROR(Get(r, "reason", &d.reason));
  return d;
}

Status SchedClient::PrefillDone(uint64_t ticket) {
  return CallOk("POST", "/v1/requests/" + std::to_string(ticket) + "/prefilled").status();
}

Status SchedClient::Finished(uint64_t ticket) {
  return CallOk("POST", "/v1/requests/" + std::to_string(ticket) + "/finished").status();
}

Result<SchedPolicyInfo> SchedClient::Policy() {
  PTS_ASSIGN_OR_RETURN(std::string body, CallOk("GET", "/v1/policy"));
  PTS_ASSIGN_OR_RETURN(json j, ParseJson(body));
  if (!j.is_object()) return ProtocolError("scheduler reply: not an object");
  SchedPolicyInfo p;
  PTS_RETURN_IF_ERROR(Get(j, "policy", &p.policy));
  PTS_RETURN_IF_ERROR(Get(j, "load_bound_s", &p.load_bound_s));
  PTS_RETURN_IF_ERROR(Get(j, "remote_path", &p.remote_path));
  PTS_RETURN_IF_ERROR(Get(j, "model", &p.model));
  PTS_RETURN_IF_ERROR(Get(j, "gpu", &p.gpu));
  return p;
}

}  // namespace ptstore::sched

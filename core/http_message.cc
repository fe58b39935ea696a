// HTTP/1.1 request parsing and response serialization (core/http_message.h).
#include "core/http_message.h"

#include <algorithm>
#include <cctype>

namespace ptstore::core {

namespace {

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

size_t HttpHeaderEnd(std::string_view in) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '\n') continue;
    if (i + 1 < in.size() && in[i + 1] == '\n') return i + 2;
    if (i + 2 < in.size() && in[i + 1] == '\r' && in[i + 2] == '\n') return i + 3;
  }
  return std::string_view::npos;
}

std::optional<HttpError> ParseHttpHead(std::string_view head, size_t max_body_bytes, HttpHead* out) {
  std::vector<std::string_view> lines;
  while (!head.empty()) {
    size_t nl = head.find('\n');
    std::string_view line = head.substr(0, nl);
    head.remove_prefix(nl == std::string_view::npos ? head.size() : nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) break;
    lines.push_back(line);
  }
  if (lines.empty()) return HttpError{400, "empty request"};
  // Request line: METHOD SP target SP HTTP/x.y
  std::string_view rl = lines[0];
  size_t sp1 = rl.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : rl.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || rl.find(' ', sp2 + 1) != std::string_view::npos) {
    return HttpError{400, "malformed request line"};
  }
  std::string_view method = rl.substr(0, sp1);
  std::string_view target = rl.substr(sp1 + 1, sp2 - sp1 - 1);
  std::string_view version = rl.substr(sp2 + 1);
  if (method.empty() || !std::all_of(method.begin(), method.end(), IsTokenChar)) {
    return HttpError{400, "malformed method"};
  }
  if (target.empty() || target[0] != '/') return HttpError{400, "the target must be an absolute path"};
  for (char c : target) {
    if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) return HttpError{400, "malformed target"};
  }
  if (version.size() != 8 || !version.starts_with("HTTP/") || version[6] != '.' ||
      !std::isdigit(static_cast<unsigned char>(version[5])) || !std::isdigit(static_cast<unsigned char>(version[7]))) {
    return HttpError{400, "malformed HTTP version"};
  }
  if (version != "HTTP/1.1" && version != "HTTP/1.0") {
    return HttpError{505, "only HTTP/1.0 and HTTP/1.1 are served"};
  }
  HttpRequest& req = out->request;
  std::optional<uint64_t> content_length;
  bool chunked = false;
  for (size_t i = 1; i < lines.size(); ++i) {
    std::string_view h = lines[i];
    size_t colon = h.find(':');
    // A header is "name: value"; folded continuation lines are obsolete.
    if (colon == 0 || colon == std::string_view::npos) return HttpError{400, "malformed header line"};
    if (!std::all_of(h.begin(), h.begin() + colon, IsTokenChar)) return HttpError{400, "malformed header name"};
    std::string name = Lower(h.substr(0, colon));
    std::string_view value = Trim(h.substr(colon + 1));
    if (name == "content-length") {
      if (value.empty() || value.size() > 18 ||
          !std::all_of(value.begin(), value.end(), [](char c) { return c >= '0' && c <= '9'; })) {
        return HttpError{400, "malformed Content-Length"};
      }
      uint64_t n = std::stoull(std::string(value));
      if (content_length && *content_length != n) return HttpError{400, "conflicting Content-Length headers"};
      content_length = n;
    } else if (name == "transfer-encoding") {
      chunked = true;
    } else if (name == "expect" && Lower(value) == "100-continue") {
      out->expect_continue = version == "HTTP/1.1";
    }
    req.headers.emplace_back(std::move(name), std::string(value));
  }
  if (chunked) return HttpError{501, "Transfer-Encoding is not supported; send a Content-Length"};
  if (content_length && *content_length > max_body_bytes) {
    return HttpError{413, "the body is over " + std::to_string(max_body_bytes) + " bytes"};
  }
  out->body_bytes = content_length.value_or(0);
  out->head_only = method == "HEAD";
  req.method = out->head_only ? "GET" : std::string(method);
  size_t q = target.find('?');
  req.path = std::string(target.substr(0, q));
  if (q != std::string_view::npos) req.query = std::string(target.substr(q + 1));
  return std::nullopt;
}

std::string SerializeHttpResponse(const HttpResponse& r, bool head_only) {
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

}  // namespace ptstore::core

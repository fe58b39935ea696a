// HTTP/1.1 messages as core/http_server.h serves them: the request a handler
// sees, the response it returns, and their wire form (parsing a request's
// line and headers, serializing a response). The framing rules (what is a
// 400, 413, 501 or 505) are those listed in core/http_server.h.
//
// Thread safety: plain values and pure functions; any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ptstore::core {

struct HttpRequest {
  std::string method;  // as sent ("GET", "POST"); HEAD arrives as "GET"
  std::string path;    // the target up to the first '?', not decoded: "/v1/instances/a%20b"
  std::string query;   // after the '?' (without it); empty when none
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased, values trimmed
  std::string body;    // Content-Length bytes; empty without one

  // The value of the first header `name` (lower case), or nullptr.
  const std::string* Header(std::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "text/plain; charset=utf-8";
  std::string body;
  // More headers ("Allow", "Retry-After"); never Content-Length or Connection.
  std::vector<std::pair<std::string, std::string>> headers;

  static HttpResponse Text(int status, std::string body);
  static HttpResponse Json(int status, std::string body);  // application/json
};

// "OK", "Not Found", ...; "Unknown" for a code it does not know.
const char* HttpReasonPhrase(int status);

// A request the server answers itself: the status and what was wrong.
struct HttpError {
  int status;
  std::string message;
};

// What a request's line and headers ask.
struct HttpHead {
  HttpRequest request;  // without the body
  size_t body_bytes = 0;
  bool head_only = false;        // HEAD: answer without the body
  bool expect_continue = false;  // "Expect: 100-continue" on HTTP/1.1
};

// Where the request's headers end in `in` (the index past the blank line),
// or npos when the blank line has not arrived.
size_t HttpHeaderEnd(std::string_view in);

// Parses `head` (the request line and headers, up to the blank line) into
// *out. nullopt on success; else the error to answer with (400, 413 for a
// Content-Length over max_body_bytes, 501, 505), *out then unspecified.
std::optional<HttpError> ParseHttpHead(std::string_view head, size_t max_body_bytes, HttpHead* out);

// The response on the wire: status line, Content-Type, Content-Length, the
// handler's other headers (those that would break the framing dropped),
// "Connection: close", and the body unless head_only.
std::string SerializeHttpResponse(const HttpResponse& r, bool head_only);

}  // namespace ptstore::core

// The steps of one HTTP connection (core/http_connection.h).
#include "core/http_connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <string_view>

namespace ptstore::core {

namespace {

constexpr int kDrainMs = 500;  // after the response: how long to wait for the peer's FIN
constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";

}  // namespace

HttpConnection::ReadStep HttpConnection::Read(size_t max_request_bytes, size_t max_body_bytes, char* buf,
                                              size_t buf_size, HttpError* error) {
  bool closed = false;
  for (;;) {
    // Read what the request needs (the headers' cap, then the body), plus
    // a little to decide; pipelined extras are ignored.
    const size_t want = head ? header_end + head->body_bytes : max_request_bytes + 4096;
    if (in.size() >= want) break;
    ssize_t n = recv(fd, buf, std::min(buf_size, want - in.size()), 0);
    if (n > 0) {
      in.append(buf, static_cast<size_t>(n));
      if (!head) {
        size_t end = HttpHeaderEnd(in);
        if (end != std::string::npos && end <= max_request_bytes) {
          HttpHead parsed;
          if (auto err = ParseHttpHead(std::string_view(in).substr(0, end), max_body_bytes, &parsed)) {
            *error = std::move(*err);
            return ReadStep::kRejected;
          }
          header_end = end;
          head = std::move(parsed);
          if (head->expect_continue && in.size() < header_end + head->body_bytes) {
            // A tiny interim reply on a fresh socket: it fits in the send
            // buffer; if not, the client sends the body anyway.
            ssize_t s = send(fd, kContinue.data(), kContinue.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            (void)s;
          }
        } else if (in.size() > max_request_bytes) {
          *error = HttpError{431, "the request line and headers are over " + std::to_string(max_request_bytes) +
                                      " bytes"};
          return ReadStep::kRejected;
        }
      }
      continue;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    if (n < 0 && errno == EINTR) continue;
    closed = true;  // EOF or an error before a whole request
    break;
  }
  // The request is whole even if the peer half-closed.
  if (head && in.size() >= header_end + head->body_bytes) return ReadStep::kWhole;
  return closed ? ReadStep::kClosed : ReadStep::kWaiting;
}

HttpRequest HttpConnection::TakeRequest() {
  HttpRequest req = std::move(head->request);
  req.body = in.substr(header_end, head->body_bytes);
  in.clear();
  return req;
}

void HttpConnection::Respond(const HttpResponse& r, int write_timeout_ms) {
  out = SerializeHttpResponse(r, head && head->head_only);
  sent = 0;
  state = State::kWriting;
  deadline = Clock::now() + std::chrono::milliseconds(write_timeout_ms);
}

bool HttpConnection::Write() {
  while (sent < out.size()) {
    ssize_t n = send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return false;
  }
  if (sent == out.size()) {
    // Half-close and wait a little for the peer's FIN, so that closing with
    // unread request bytes does not reset the response away.
    shutdown(fd, SHUT_WR);
    state = State::kDraining;
    deadline = Clock::now() + std::chrono::milliseconds(kDrainMs);
    out.clear();
    in.clear();
  }
  return true;
}

bool HttpConnection::Drain(char* buf, size_t buf_size) {
  for (;;) {
    ssize_t n = recv(fd, buf, buf_size, 0);
    if (n > 0) continue;
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    return false;
  }
  return true;
}

}  // namespace ptstore::core

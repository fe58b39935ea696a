// A plain-socket HTTP/1.x client for tests: sends raw request bytes to
// host:port over TCP and reads the response until the server closes, with a
// deadline. No library, so that a test sees exactly the bytes on the wire.
//
// Header-only, so that tests linking only a production library can use it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <chrono>
#include <map>
#include <regex>
#include <string>

#include "ptstore/status.h"
#include "tests/testing/daemon.h"

namespace ptstore::testing {

struct HttpReply {
  int code = 0;
  std::map<std::string, std::string> headers;  // names lower-cased
  std::string body;
  std::string raw;
};

// A connected TCP socket to 127.0.0.1:port (or `host`), or -1.
inline int ConnectTcp(uint16_t port, const std::string& host = "127.0.0.1") {
  sockaddr_storage ss{};
  socklen_t len = 0;
  if (host.find(':') != std::string::npos) {
    auto* a = reinterpret_cast<sockaddr_in6*>(&ss);
    a->sin6_family = AF_INET6;
    a->sin6_port = htons(port);
    if (inet_pton(AF_INET6, host.c_str(), &a->sin6_addr) != 1) return -1;
    len = sizeof(*a);
  } else {
    auto* a = reinterpret_cast<sockaddr_in*>(&ss);
    a->sin_family = AF_INET;
    a->sin_port = htons(port);
    if (inet_pton(AF_INET, host.c_str(), &a->sin_addr) != 1) return -1;
    len = sizeof(*a);
  }
  int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&ss), len) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Reads until EOF or the deadline; false on the deadline or an error.
inline bool ReadToEof(int fd, std::string* out, std::chrono::milliseconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  char buf[16384];
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return false;
    pollfd p{fd, POLLIN, 0};
    int pr = poll(&p, 1, static_cast<int>(left.count()));
    if (pr < 0 && errno == EINTR) continue;
    if (pr <= 0) return false;
    ssize_t n = recv(fd, buf, sizeof(buf), 0);
    if (n == 0) return true;
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    out->append(buf, static_cast<size_t>(n));
  }
}

// Splits a raw response into status code, headers and body.
inline Result<HttpReply> ParseHttpReply(std::string raw) {
  HttpReply r;
  r.raw = std::move(raw);
  size_t end = r.raw.find("\r\n\r\n");
  if (end == std::string::npos) return ProtocolError("no end of headers in: " + r.raw.substr(0, 200));
  std::string head = r.raw.substr(0, end);
  r.body = r.raw.substr(end + 4);
  size_t eol = head.find("\r\n");
  std::string status = head.substr(0, eol);
  if (status.rfind("HTTP/1.1 ", 0) != 0 || status.size() < 12) return ProtocolError("bad status line: " + status);
  r.code = std::stoi(status.substr(9, 3));
  size_t pos = eol == std::string::npos ? head.size() : eol + 2;
  while (pos < head.size()) {
    size_t next = head.find("\r\n", pos);
    if (next == std::string::npos) next = head.size();
    std::string line = head.substr(pos, next - pos);
    size_t colon = line.find(':');
    if (colon == std::string::npos) return ProtocolError("bad header: " + line);
    std::string name = line.substr(0, colon);
    for (auto& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    r.headers[name] = value;
    pos = next + 2;
  }
  return r;
}

// Sends `request` (raw bytes) and returns the parsed reply.
inline Result<HttpReply> HttpExchange(uint16_t port, const std::string& request,
                                      std::chrono::milliseconds timeout = std::chrono::seconds(10),
                                      const std::string& host = "127.0.0.1") {
  int fd = ConnectTcp(port, host);
  if (fd < 0) return ErrnoError("connect to port " + std::to_string(port), errno);
  size_t sent = 0;
  while (sent < request.size()) {
    ssize_t n = send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      Status st = ErrnoError("send", errno);
      close(fd);
      return st;
    }
    sent += static_cast<size_t>(n);
  }
  std::string raw;
  bool eof = ReadToEof(fd, &raw, timeout);
  close(fd);
  if (!eof) return DeadlineExceeded("no complete reply within the deadline; got: " + raw.substr(0, 200));
  return ParseHttpReply(std::move(raw));
}

inline Result<HttpReply> HttpGet(uint16_t port, const std::string& path,
                                 std::chrono::milliseconds timeout = std::chrono::seconds(10)) {
  return HttpExchange(port, "GET " + path + " HTTP/1.1\r\nHost: localhost\r\nUser-Agent: pts-test\r\n\r\n", timeout);
}

// The port of "metrics on http://HOST:PORT/metrics" in the daemon's log
// (written before its socket accepts clients); 0 if it is not there.
inline uint16_t MetricsPortFromLog(const Daemon& d) {
  static const std::regex kLine(R"(metrics on http://(?:[0-9.]+|\[[0-9a-fA-F:]+\]):([0-9]+)/metrics)");
  std::smatch m;
  const std::string log = d.ReadLog();
  if (!std::regex_search(log, m, kLine)) return 0;
  return static_cast<uint16_t>(std::stoul(m[1]));
}

}  // namespace ptstore::testing

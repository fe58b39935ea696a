// core/http_server over real TCP sockets on 127.0.0.1: request bodies
// (Content-Length, in pieces, 100-continue), the server's own errors (413,
// 400 on a bad Content-Length, 501 on Transfer-Encoding), HEAD, the handler's
// view of a request, worker threads, and a slow body being dropped. The
// GET-only limits (431, timeouts, the connection cap) are covered through
// storage/metrics_http in tests/storage/metrics_http_test.cc.
#include "core/http_server.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/testing/http_get.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::core {
namespace {

using namespace std::chrono_literals;
using testing::HttpExchange;

// Echoes what the handler saw, one field a line.
HttpResponse Echo(const HttpRequest& req) {
  std::string out = "method=" + req.method + "\npath=" + req.path + "\nquery=" + req.query + "\n";
  if (const std::string* ct = req.Header("content-type")) out += "content-type=" + *ct + "\n";
  out += "body=" + req.body;
  return HttpResponse::Text(200, out);
}

class HttpServerTest : public ::testing::Test {
 protected:
  void Start(HttpServerOptions o = {}, HttpServer::Handler h = nullptr) {
    server_ = std::make_unique<HttpServer>(std::move(o));
    if (!h) {
      h = [this](const HttpRequest& req) {
        calls_.fetch_add(1);
        return Echo(req);
      };
    }
    Status st = server_->Start("127.0.0.1", 0, std::move(h));
    ASSERT_OK(st);
    port_ = server_->port();
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }
  std::unique_ptr<HttpServer> server_;
  uint16_t port_ = 0;
  std::atomic<int> calls_{0};
};

TEST_F(HttpServerTest, PostBodyReachesTheHandler) {
  Start();
  const std::string body = R"({"id":"a","node":1})";
  auto r = HttpExchange(port_, "POST /v1/instances?x=1&y HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                               "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  ASSERT_OK(r);
  EXPECT_EQ(r->code, 200);
  EXPECT_EQ(r->body, "method=POST\npath=/v1/instances\nquery=x=1&y\ncontent-type=application/json\nbody=" + body);
  EXPECT_EQ(r->headers["content-length"], std::to_string(r->body.size()));
  EXPECT_EQ(r->headers["connection"], "close");

  // PUT and DELETE carry bodies too; a body of 0 bytes and none are the same.
  for (const char* method : {"PUT", "DELETE", "PATCH"}) {
    auto m = HttpExchange(port_, std::string(method) + " /x HTTP/1.1\r\ncontent-length: 3\r\n\r\nabc");
    ASSERT_OK(m);
    EXPECT_EQ(m->body, std::string("method=") + method + "\npath=/x\nquery=\nbody=abc");
  }
  auto empty = HttpExchange(port_, "POST /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
  ASSERT_OK(empty);
  EXPECT_EQ(empty->body, "method=POST\npath=/x\nquery=\nbody=");
  auto none = HttpExchange(port_, "POST /x HTTP/1.0\r\n\r\n");
  ASSERT_OK(none);
  EXPECT_EQ(none->body, "method=POST\npath=/x\nquery=\nbody=");
  // Binary bytes, CR and LF in the body are the body's.
  std::string bin("\0\r\n\r\n\xff", 6);
  auto b = HttpExchange(port_, "POST /b HTTP/1.1\r\nContent-Length: 6\r\n\r\n" + bin);
  ASSERT_OK(b);
  EXPECT_EQ(b->body, "method=POST\npath=/b\nquery=\nbody=" + bin);
  EXPECT_EQ(server_->requests(), 7u);
}

TEST_F(HttpServerTest, LargeBodyInPiecesAndBytesPastTheBodyIgnored) {
  Start();
  const std::string body(3 << 20, 'q');  // under the 4 MiB default cap
  int fd = testing::ConnectTcp(port_);
  ASSERT_GE(fd, 0);
  std::string req = "POST /big HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  ASSERT_EQ(send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  std::this_thread::sleep_for(20ms);
  // The body in 64 KiB pieces, then pipelined junk that is not read as a request.
  for (size_t off = 0; off < body.size(); off += 65536) {
    size_t n = std::min<size_t>(65536, body.size() - off);
    size_t sent = 0;
    while (sent < n) {
      ssize_t k = send(fd, body.data() + off + sent, n - sent, MSG_NOSIGNAL);
      ASSERT_GT(k, 0);
      sent += static_cast<size_t>(k);
    }
  }
  send(fd, "GET /junk HTTP/1.1\r\n\r\n", 22, MSG_NOSIGNAL);
  std::string raw;
  EXPECT_TRUE(testing::ReadToEof(fd, &raw, 10s));
  close(fd);
  auto r = testing::ParseHttpReply(raw);
  ASSERT_OK(r);
  EXPECT_EQ(r->code, 200);
  EXPECT_EQ(r->body, "method=POST\npath=/big\nquery=\nbody=" + body);
  EXPECT_EQ(calls_.load(), 1);
}

TEST_F(HttpServerTest, ExpectContinueGetsAnInterimReply) {
  Start();
  int fd = testing::ConnectTcp(port_);
  ASSERT_GE(fd, 0);
  std::string req = "POST /c HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 5\r\n\r\n";
  ASSERT_GT(send(fd, req.data(), req.size(), MSG_NOSIGNAL), 0);
  char buf[64] = {};
  pollfd p{fd, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 2000), 1) << "no 100 Continue";
  ssize_t n = recv(fd, buf, sizeof(buf), 0);
  ASSERT_GT(n, 0);
  EXPECT_EQ(std::string(buf, static_cast<size_t>(n)), "HTTP/1.1 100 Continue\r\n\r\n");
  ASSERT_EQ(send(fd, "hello", 5, MSG_NOSIGNAL), 5);
  std::string raw;
  EXPECT_TRUE(testing::ReadToEof(fd, &raw, 5s));
  close(fd);
  auto r = testing::ParseHttpReply(raw);
  ASSERT_OK(r);
  EXPECT_EQ(r->body, "method=POST\npath=/c\nquery=\nbody=hello");
}

TEST_F(HttpServerTest, ServerErrorsNeverReachTheHandler) {
  HttpServerOptions o;
  o.max_body_bytes = 1000;
  o.error_body = [](int status, std::string_view message) {
    return HttpResponse::Json(status, "{\"error\":\"" + std::string(message) + "\"}");
  };
  Start(o);
  struct Case {
    std::string request;
    int code;
  };
  const std::vector<Case> cases = {
      {"POST /x HTTP/1.1\r\nContent-Length: 1001\r\n\r\n", 413},
      {"POST /x HTTP/1.1\r\nContent-Length: 99999999999999999\r\n\r\n", 413},
      {"POST /x HTTP/1.1\r\nContent-Length: 999999999999999999999\r\n\r\n", 400},
      {"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n", 400},
      {"POST /x HTTP/1.1\r\nContent-Length: 1x\r\n\r\n", 400},
      {"POST /x HTTP/1.1\r\nContent-Length:\r\n\r\n", 400},
      {"POST /x HTTP/1.1\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400},
      {"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", 501},
      {"POST /x HTTP/3.0\r\nContent-Length: 1\r\n\r\na", 505},
      {"POST x HTTP/1.1\r\nContent-Length: 1\r\n\r\na", 400},
  };
  for (const Case& c : cases) {
    auto r = HttpExchange(port_, c.request);
    ASSERT_OK(r) << c.request << ": " << r.status().ToString();
    EXPECT_EQ(r->code, c.code) << c.request;
    EXPECT_EQ(r->headers["content-type"], "application/json") << c.request;
    EXPECT_EQ(r->body.rfind("{\"error\":\"", 0), 0u) << r->body;
  }
  EXPECT_EQ(calls_.load(), 0);
  // Repeated equal Content-Lengths are one; just at the cap is fine.
  auto ok = HttpExchange(port_, "POST /x HTTP/1.1\r\nContent-Length: 1000\r\nContent-Length: 1000\r\n\r\n" +
                                    std::string(1000, 'z'));
  ASSERT_OK(ok);
  EXPECT_EQ(ok->code, 200);

  // A 413 comes before the body is sent: the client sending it anyway gets
  // the reply, not a reset.
  int fd = testing::ConnectTcp(port_);
  ASSERT_GE(fd, 0);
  std::string big = "POST /x HTTP/1.1\r\nContent-Length: 200000\r\n\r\n" + std::string(200000, 'b');
  size_t sent = 0;
  while (sent < big.size()) {
    ssize_t k = send(fd, big.data() + sent, big.size() - sent, MSG_NOSIGNAL);
    if (k <= 0) break;
    sent += static_cast<size_t>(k);
  }
  std::string raw;
  testing::ReadToEof(fd, &raw, 5s);
  close(fd);
  EXPECT_EQ(raw.rfind("HTTP/1.1 413 ", 0), 0u) << raw.substr(0, 100);
}

TEST_F(HttpServerTest, HeadIsGetWithoutTheBody) {
  Start();
  auto h = HttpExchange(port_, "HEAD /h HTTP/1.1\r\n\r\n");
  ASSERT_OK(h);
  EXPECT_EQ(h->code, 200);
  EXPECT_TRUE(h->body.empty());
  const std::string get_body = "method=GET\npath=/h\nquery=\nbody=";
  EXPECT_EQ(h->headers["content-length"], std::to_string(get_body.size()));
}

TEST_F(HttpServerTest, HandlerStatusHeadersAndExceptions) {
  Start({}, [](const HttpRequest& req) -> HttpResponse {
    if (req.path == "/throw") throw std::runtime_error("boom");
    HttpResponse r = HttpResponse::Json(409, "{}");
    r.headers.emplace_back("Allow", "GET");
    r.headers.emplace_back("X-Evil", "a\r\nSet-Cookie: b");  // no header injection
    r.headers.emplace_back("Content-Length", "5");            // the server's own
    return r;
  });
  auto r = HttpExchange(port_, "GET /x HTTP/1.1\r\n\r\n");
  ASSERT_OK(r);
  EXPECT_EQ(r->code, 409);
  EXPECT_EQ(r->raw.rfind("HTTP/1.1 409 Conflict\r\n", 0), 0u);
  EXPECT_EQ(r->headers["allow"], "GET");
  EXPECT_EQ(r->headers["x-evil"], "aSet-Cookie: b");
  EXPECT_EQ(r->headers.count("set-cookie"), 0u);
  EXPECT_EQ(r->headers["content-length"], "2");
  EXPECT_EQ(r->body, "{}");
  auto t = HttpExchange(port_, "GET /throw HTTP/1.1\r\n\r\n");
  ASSERT_OK(t);
  EXPECT_EQ(t->code, 500);
}

TEST_F(HttpServerTest, SlowBodyIsDropped) {
  HttpServerOptions o;
  o.read_timeout_ms = 500;
  Start(o);
  int fd = testing::ConnectTcp(port_);
  ASSERT_GE(fd, 0);
  std::string req = "POST /x HTTP/1.1\r\nContent-Length: 10\r\n\r\nabc";
  ASSERT_GT(send(fd, req.data(), req.size(), MSG_NOSIGNAL), 0);
  auto t0 = std::chrono::steady_clock::now();
  std::string got;
  EXPECT_TRUE(testing::ReadToEof(fd, &got, 5s));
  EXPECT_TRUE(got.empty()) << got;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  close(fd);
  // A body cut short by the client's close is not answered either.
  fd = testing::ConnectTcp(port_);
  ASSERT_GE(fd, 0);
  ASSERT_GT(send(fd, req.data(), req.size(), MSG_NOSIGNAL), 0);
  shutdown(fd, SHUT_WR);
  got.clear();
  EXPECT_TRUE(testing::ReadToEof(fd, &got, 5s));
  EXPECT_TRUE(got.empty()) << got;
  close(fd);
  EXPECT_EQ(calls_.load(), 0);
}

TEST_F(HttpServerTest, WorkerThreadsKeepASlowHandlerFromBlockingOthers) {
  HttpServerOptions o;
  o.handler_threads = 2;
  std::atomic<int> in_slow{0};
  Start(o, [&](const HttpRequest& req) {
    if (req.path == "/slow") {
      in_slow.fetch_add(1);
      std::this_thread::sleep_for(1500ms);
    }
    return Echo(req);
  });
  std::thread slow([&] {
    auto r = HttpExchange(port_, "POST /slow HTTP/1.1\r\nContent-Length: 1\r\n\r\ns");
    ASSERT_OK(r);
    EXPECT_EQ(r->body, "method=POST\npath=/slow\nquery=\nbody=s");
  });
  while (in_slow.load() == 0) std::this_thread::sleep_for(5ms);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < 20; ++i) {
    auto r = HttpExchange(port_, "POST /fast HTTP/1.1\r\nContent-Length: 2\r\n\r\n" + std::to_string(i % 10) + "!");
    ASSERT_OK(r);
    EXPECT_EQ(r->body, "method=POST\npath=/fast\nquery=\nbody=" + std::to_string(i % 10) + "!");
  }
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s) << "fast requests waited for the slow handler";
  slow.join();

  // Many clients at once through the workers.
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      for (int i = 0; i < 20; ++i) {
        std::string body = std::to_string(t) + "-" + std::to_string(i);
        auto r = HttpExchange(port_, "PUT /p HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) +
                                         "\r\n\r\n" + body);
        if (r.ok() && r->body == "method=PUT\npath=/p\nquery=\nbody=" + body) ok.fetch_add(1);
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(ok.load(), 160);
}

TEST_F(HttpServerTest, BurstOverTheCapWaitsInsteadOfBeingClosed) {
  // 4 connections at most, all busy in slow handlers: the clients beyond
  // them wait in the listen backlog until a slot frees, and every one of
  // them gets its answer (before, they were accepted and closed at once).
  HttpServerOptions o;
  o.max_connections = 4;
  o.handler_threads = 4;
  Start(o, [&](const HttpRequest& req) {
    std::this_thread::sleep_for(100ms);
    return Echo(req);
  });
  std::atomic<int> ok{0};
  std::vector<std::thread> clients;
  for (int t = 0; t < 16; ++t) {
    clients.emplace_back([&, t] {
      const std::string body = std::to_string(t);
      auto r = HttpExchange(port_, "POST /b HTTP/1.1\r\nContent-Length: " + std::to_string(body.size()) +
                                       "\r\n\r\n" + body);
      if (r.ok() && r->body == "method=POST\npath=/b\nquery=\nbody=" + body) {
        ok.fetch_add(1);
      } else {
        ADD_FAILURE() << "client " << t << ": " << (r.ok() ? r->body : r.status().ToString());
      }
    });
  }
  for (auto& c : clients) c.join();
  EXPECT_EQ(ok.load(), 16);
}

TEST_F(HttpServerTest, StopWhileAHandlerRuns) {
  HttpServerOptions o;
  o.handler_threads = 1;
  std::atomic<bool> entered{false};
  Start(o, [&](const HttpRequest& req) {
    entered = true;
    std::this_thread::sleep_for(300ms);
    return Echo(req);
  });
  int fd = testing::ConnectTcp(port_);
  ASSERT_GE(fd, 0);
  std::string req = "GET / HTTP/1.1\r\n\r\n";
  ASSERT_GT(send(fd, req.data(), req.size(), MSG_NOSIGNAL), 0);
  while (!entered) std::this_thread::sleep_for(5ms);
  server_->Stop();  // waits for the handler, closes the connection
  std::string got;
  EXPECT_TRUE(testing::ReadToEof(fd, &got, 2s));
  close(fd);
  EXPECT_LT(testing::ConnectTcp(port_), 0);
  // Null handler, second start.
  HttpServer none;
  EXPECT_ERROR(none.Start("127.0.0.1", 0, nullptr), Code::kInvalidArgument);
  HttpServer twice;
  ASSERT_OK(twice.Start("127.0.0.1", 0, Echo));
  EXPECT_ERROR(twice.Start("127.0.0.1", 0, Echo), Code::kInvalidArgument);
}

}  // namespace
}  // namespace ptstore::core

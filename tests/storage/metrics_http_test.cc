// storage/metrics_http over real TCP sockets on 127.0.0.1: the endpoints and
// their error statuses, request size and time limits, and that neither silent
// nor non-reading clients nor many scrapers at once can hold up a scrape.
#include "storage/server/metrics_http.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "storage/server/metrics.h"
#include "tests/testing/http_get.h"
#include "tests/testing/prometheus_text.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

using namespace std::chrono_literals;
using testing::HttpExchange;
using testing::HttpGet;

StoreStats SomeStats() {
  StoreStats s;
  s.arena_bytes = 64 << 20;
  s.owned_bytes = 4096;
  s.hits = 7;
  s.misses = 3;
  return s;
}

class MetricsHttpTest : public ::testing::Test {
 protected:
  void Start(MetricsHttpOptions o = {}, MetricsHttpServer::Render render = nullptr) {
    if (!render) {
      render = [this] {
        renders_.fetch_add(1);
        NodeMetrics node;
        node.node_id = 5;
        node.version = "test";
        return RenderStoreMetrics(SomeStats(), node);
      };
    }
    server_ = std::make_unique<MetricsHttpServer>(o);
    Status st = server_->Start("127.0.0.1", 0, std::move(render));
    ASSERT_OK(st);
    ASSERT_NE(server_->port(), 0);
    port_ = server_->port();
  }
  void TearDown() override {
    if (server_) server_->Stop();
  }

  std::unique_ptr<MetricsHttpServer> server_;
  uint16_t port_ = 0;
  std::atomic<int> renders_{0};
};

void ExpectScrapeOk(uint16_t port) {
  auto r = HttpGet(port, "/metrics");
  ASSERT_OK(r);
  EXPECT_EQ(r->code, 200) << r->raw;
  auto parsed = testing::ParsePromText(r->body);
  ASSERT_OK(parsed);
  EXPECT_EQ(parsed->Value("ptstore_hits_total"), 7);
}

TEST_F(MetricsHttpTest, MetricsIsPrometheusText) {
  Start();
  EXPECT_EQ(server_->address(), "127.0.0.1:" + std::to_string(port_));
  auto r = HttpGet(port_, "/metrics");
  ASSERT_OK(r);
  EXPECT_EQ(r->code, 200);
  EXPECT_EQ(r->headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  EXPECT_EQ(r->headers["content-length"], std::to_string(r->body.size()));
  EXPECT_EQ(r->headers["connection"], "close");
  auto parsed = testing::ParsePromText(r->body);
  ASSERT_OK(parsed);
  EXPECT_EQ(parsed->Value("ptstore_hits_total"), 7);
  EXPECT_EQ(parsed->Value("ptstore_misses_total"), 3);
  EXPECT_EQ(parsed->Value("ptstore_cache_bytes", {{"class", "owned"}}), 4096);
  EXPECT_EQ(parsed->Value("ptstore_node_info", {{"node", "5"}, {"version", "test"}}), 1);
  EXPECT_EQ(renders_.load(), 1);

  // A query string is ignored; HTTP/1.0 and bare-LF line ends are accepted.
  auto q = HttpGet(port_, "/metrics?format=text");
  ASSERT_OK(q);
  EXPECT_EQ(q->code, 200);
  auto old = HttpExchange(port_, "GET /metrics HTTP/1.0\n\n");
  ASSERT_OK(old);
  EXPECT_EQ(old->code, 200);
  EXPECT_EQ(server_->requests(), 3u);
}

TEST_F(MetricsHttpTest, IndexPageAndHead) {
  Start();
  auto r = HttpGet(port_, "/");
  ASSERT_OK(r);
  EXPECT_EQ(r->code, 200);
  EXPECT_NE(r->body.find("href=\"/metrics\""), std::string::npos) << r->body;
  EXPECT_EQ(r->headers["content-length"], std::to_string(r->body.size()));

  auto h = HttpExchange(port_, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n");
  ASSERT_OK(h);
  EXPECT_EQ(h->code, 200);
  EXPECT_TRUE(h->body.empty());
  EXPECT_GT(std::stoul(h->headers["content-length"]), 100u);
}

TEST_F(MetricsHttpTest, ErrorStatuses) {
  Start();
  struct Case {
    std::string request;
    int code;
  };
  const std::vector<Case> cases = {
      {"GET /nope HTTP/1.1\r\n\r\n", 404},
      {"GET /metrics/ HTTP/1.1\r\n\r\n", 404},
      {"GET /metricsx HTTP/1.1\r\n\r\n", 404},
      {"POST /metrics HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc", 405},
      {"DELETE / HTTP/1.1\r\n\r\n", 405},
      {"GARBAGE\r\n\r\n", 400},
      {"GET\r\n\r\n", 400},
      {"GET /metrics\r\n\r\n", 400},
      {"GET metrics HTTP/1.1\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1 extra\r\n\r\n", 400},
      {"GET /metrics FTP/1.1\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\nno colon here\r\n\r\n", 400},
      {"GET /metrics HTTP/1.1\r\n folded: header\r\n\r\n", 400},
      {"G(T /metrics HTTP/1.1\r\n\r\n", 400},
      {"\r\n\r\n", 400},
      {"GET /metrics HTTP/2.0\r\n\r\n", 505},
  };
  for (const Case& c : cases) {
    auto r = HttpExchange(port_, c.request);
    ASSERT_OK(r) << c.request << ": " << r.status().ToString();
    EXPECT_EQ(r->code, c.code) << c.request;
    EXPECT_EQ(r->headers["content-length"], std::to_string(r->body.size())) << c.request;
    EXPECT_EQ(r->headers["connection"], "close");
    if (c.code == 405) {
      EXPECT_EQ(r->headers["allow"], "GET, HEAD");
    }
  }
  EXPECT_EQ(renders_.load(), 0);
  ExpectScrapeOk(port_);  // still serving
}

TEST_F(MetricsHttpTest, OversizedHeadersAre431) {
  Start();
  std::string big = "GET /metrics HTTP/1.1\r\nX-Filler: " + std::string(9000, 'a') + "\r\n\r\n";
  auto r = HttpExchange(port_, big);
  ASSERT_OK(r);
  EXPECT_EQ(r->code, 431);
  // Just under the cap is fine.
  std::string ok = "GET /metrics HTTP/1.1\r\nX-Filler: " + std::string(7000, 'a') + "\r\n\r\n";
  auto r2 = HttpExchange(port_, ok);
  ASSERT_OK(r2);
  EXPECT_EQ(r2->code, 200);
  // An endless header stream without a blank line is cut off too.
  int fd = testing::ConnectTcp(port_);
  ASSERT_GE(fd, 0);
  std::string junk(1024, 'x');
  for (int i = 0; i < 64; ++i) {
    if (send(fd, junk.data(), junk.size(), MSG_NOSIGNAL) <= 0) break;
  }
  std::string raw;
  testing::ReadToEof(fd, &raw, 5s);
  close(fd);
  EXPECT_EQ(raw.rfind("HTTP/1.1 431 ", 0), 0u) << raw.substr(0, 100);
}

TEST_F(MetricsHttpTest, RequestInManyPieces) {
  Start();
  int fd = testing::ConnectTcp(port_);
  ASSERT_GE(fd, 0);
  const std::string req = "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n";
  for (char c : req) {
    ASSERT_EQ(send(fd, &c, 1, MSG_NOSIGNAL), 1);
    std::this_thread::sleep_for(2ms);
  }
  std::string raw;
  EXPECT_TRUE(testing::ReadToEof(fd, &raw, 5s));
  close(fd);
  auto r = testing::ParseHttpReply(raw);
  ASSERT_OK(r);
  EXPECT_EQ(r->code, 200);
}

TEST_F(MetricsHttpTest, SilentClientsDoNotBlockScrapesAndAreDropped) {
  Start();  // default limits: 2 s to send the request
  int silent = testing::ConnectTcp(port_);
  ASSERT_GE(silent, 0);
  int partial = testing::ConnectTcp(port_);
  ASSERT_GE(partial, 0);
  ASSERT_GT(send(partial, "GET /metr", 9, MSG_NOSIGNAL), 0);
  auto t0 = std::chrono::steady_clock::now();
  ExpectScrapeOk(port_);
  ExpectScrapeOk(port_);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s) << "a scrape waited for a silent client";

  // Both are dropped (EOF, no response) about 2 s after they connected.
  std::string got;
  EXPECT_TRUE(testing::ReadToEof(silent, &got, 5s));
  EXPECT_TRUE(got.empty()) << got;
  EXPECT_TRUE(testing::ReadToEof(partial, &got, 5s));
  EXPECT_TRUE(got.empty()) << got;
  auto waited = std::chrono::steady_clock::now() - t0;
  EXPECT_GT(waited, 1500ms);
  EXPECT_LT(waited, 4s);
  close(silent);
  close(partial);
}

TEST_F(MetricsHttpTest, ConnectionCapDropsTheOldestSilentClient) {
  MetricsHttpOptions o;
  o.max_connections = 4;
  o.read_timeout_ms = 30000;  // the silent ones would otherwise stay
  Start(o);
  std::vector<int> silent;
  for (int i = 0; i < 8; ++i) {
    int fd = testing::ConnectTcp(port_);
    ASSERT_GE(fd, 0);
    silent.push_back(fd);
  }
  auto t0 = std::chrono::steady_clock::now();
  ExpectScrapeOk(port_);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);
  // The first ones were dropped to make room.
  std::string got;
  EXPECT_TRUE(testing::ReadToEof(silent[0], &got, 2s));
  for (int fd : silent) close(fd);
}

TEST_F(MetricsHttpTest, ClientThatDoesNotReadCannotBlock) {
  MetricsHttpOptions o;
  o.write_timeout_ms = 1000;
  const std::string big(32 << 20, '#');  // one comment line: more than the socket buffers hold
  Start(o, [&] {
    return renders_.fetch_add(1) == 0 ? big
                                      : std::string("# HELP ptstore_hits_total x\n# TYPE ptstore_hits_total counter\n"
                                                    "ptstore_hits_total 7\n");
  });
  int lazy = testing::ConnectTcp(port_);
  ASSERT_GE(lazy, 0);
  const std::string req = "GET /metrics HTTP/1.1\r\n\r\n";
  ASSERT_GT(send(lazy, req.data(), req.size(), MSG_NOSIGNAL), 0);
  std::this_thread::sleep_for(200ms);  // its response is stuck in the socket buffers
  ASSERT_GE(renders_.load(), 1);
  auto t0 = std::chrono::steady_clock::now();
  ExpectScrapeOk(port_);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  // The lazy one is reset after write_timeout_ms: it never gets all of it.
  std::this_thread::sleep_for(1500ms);
  std::string got;
  testing::ReadToEof(lazy, &got, 10s);
  EXPECT_GT(got.size(), 0u);
  EXPECT_LT(got.size(), big.size());
  close(lazy);
}

TEST_F(MetricsHttpTest, ConcurrentScrapes) {
  Start();
  constexpr int kThreads = 8, kEach = 25;
  std::atomic<int> ok{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kEach; ++i) {
        auto r = HttpGet(port_, "/metrics");
        if (r.ok() && r->code == 200 && testing::ParsePromText(r->body).ok()) ok.fetch_add(1);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads * kEach);
  EXPECT_EQ(renders_.load(), kThreads * kEach);
}

TEST_F(MetricsHttpTest, RenderThatThrowsIs500) {
  Start({}, []() -> std::string { throw std::runtime_error("boom"); });
  auto r = HttpGet(port_, "/metrics");
  ASSERT_OK(r);
  EXPECT_EQ(r->code, 500);
  auto idx = HttpGet(port_, "/");
  ASSERT_OK(idx);
  EXPECT_EQ(idx->code, 200);
}

TEST_F(MetricsHttpTest, StartErrorsAndStop) {
  Start();
  // The port is taken.
  MetricsHttpServer other;
  Status st = other.Start("127.0.0.1", port_, [] { return std::string(); });
  EXPECT_ERROR(st, Code::kIOError);
  // Not an address.
  MetricsHttpServer bad;
  st = bad.Start("no such host.invalid", 0, [] { return std::string(); });
  EXPECT_ERROR(st, Code::kInvalidArgument);
  // Not a local address.
  st = bad.Start("192.0.2.1", 0, [] { return std::string(); });
  EXPECT_ERROR(st, Code::kIOError);
  // Twice.
  st = server_->Start("127.0.0.1", 0, [] { return std::string(); });
  EXPECT_ERROR(st, Code::kInvalidArgument);
  // No render function.
  MetricsHttpServer none;
  EXPECT_ERROR(none.Start("127.0.0.1", 0, nullptr), Code::kInvalidArgument);

  // A connection open at Stop is closed; then the port refuses.
  int fd = testing::ConnectTcp(port_);
  ASSERT_GE(fd, 0);
  std::this_thread::sleep_for(50ms);
  server_->Stop();
  server_->Stop();  // idempotent
  std::string got;
  EXPECT_TRUE(testing::ReadToEof(fd, &got, 2s));
  close(fd);
  EXPECT_LT(testing::ConnectTcp(port_), 0);
}

TEST_F(MetricsHttpTest, Ipv6Loopback) {
  MetricsHttpServer v6;
  Status st = v6.Start("::1", 0, [] { return std::string("# HELP a_total x\n# TYPE a_total counter\na_total 1\n"); });
  if (!st.ok()) GTEST_SKIP() << "no IPv6 loopback here: " << st.ToString();
  EXPECT_EQ(v6.address(), "[::1]:" + std::to_string(v6.port()));
  auto r = HttpExchange(v6.port(), "GET /metrics HTTP/1.1\r\n\r\n", 5s, "::1");
  ASSERT_OK(r);
  EXPECT_EQ(r->code, 200);
  EXPECT_EQ(r->body, "# HELP a_total x\n# TYPE a_total counter\na_total 1\n");
}

}  // namespace
}  // namespace ptstore::storage

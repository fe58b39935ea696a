// The metrics endpoint of a real ptstored: started with --metrics-port (an
// ephemeral port found in its log, an explicit port, a config file), scraped
// with a plain socket while a client saves, looks up and loads, and gone
// after SIGTERM; bad ports and a port in use stop the daemon at start.
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "ptstore/client.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/client.h"
#include "tests/testing/daemon.h"
#include "tests/testing/http_get.h"
#include "tests/testing/prometheus_text.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using namespace std::chrono_literals;
using storage::testkv::RandomTokens;
using storage::testkv::Kv;
using storage::testkv::SmallLayout;
using testing::Daemon;
using testing::MetricsPortFromLog;
using testing::PromExposition;


PromExposition Scrape(uint16_t port) {
  auto r = testing::HttpGet(port, "/metrics");
  EXPECT_OK(r);
  if (!r.ok()) return {};
  EXPECT_EQ(r->code, 200);
  EXPECT_EQ(r->headers["content-type"], "text/plain; version=0.0.4; charset=utf-8");
  auto p = testing::ParsePromText(r->body);
  EXPECT_OK(p) << "\n" << r->body;
  return p.ok() ? *p : PromExposition{};
}

using testing::FreePort;  // a small race, retried by callers

TEST(MetricsDaemonTest, CountersMoveWithClientTraffic) {
  Daemon d;
  Daemon::Options o;
  o.extra_args = {"--metrics-port", "auto", "--node-id", "7"};
  ASSERT_OK(d.Start(o)) << d.ReadLog();
  const uint16_t port = MetricsPortFromLog(d);
  ASSERT_NE(port, 0) << d.ReadLog();

  PromExposition before = Scrape(port);
  EXPECT_EQ(before.Value("ptstore_node_info", {{"node", "7"}}), 1);
  EXPECT_EQ(before.Value("ptstore_arena_capacity_bytes"), 64 << 20);
  EXPECT_EQ(before.Value("ptstore_saves_total"), 0);
  EXPECT_EQ(before.Value("ptstore_hits_total"), 0);
  EXPECT_EQ(before.Value("ptstore_misses_total"), 0);
  EXPECT_EQ(before.Value("ptstore_cache_bytes", {{"class", "owned"}}), 0);
  EXPECT_GT(before.Value("ptstore_start_time_seconds"), 1.6e9);

  auto client = testing::ConnectTo(d.socket_path());
  ASSERT_OK(client);
  Client& c = **client;
  ASSERT_OK(c.CreateNamespace("m", SmallLayout()));
  const auto tokens = RandomTokens(1, 64);
  const auto kv = Kv(tokens, 0, tokens.size());
  auto saved = c.Save("m", tokens, kv.data(), kv.size());
  ASSERT_OK(saved);
  ASSERT_EQ(saved->new_bytes, kv.size());
  auto hit = c.Lookup("m", tokens);
  ASSERT_OK(hit);
  EXPECT_EQ(hit->matched_tokens, tokens.size());
  auto miss = c.Lookup("m", RandomTokens(2, 64));
  ASSERT_OK(miss);
  EXPECT_EQ(miss->matched_tokens, 0u);
  std::vector<uint8_t> out(kv.size());
  auto loaded = c.Load("m", tokens, out.data(), out.size());
  ASSERT_OK(loaded);
  EXPECT_EQ(*loaded, tokens.size());

  PromExposition after = Scrape(port);
  EXPECT_EQ(after.Value("ptstore_saves_total"), 1);
  EXPECT_EQ(after.Value("ptstore_saved_bytes_total"), kv.size());
  EXPECT_GE(after.Value("ptstore_cache_bytes", {{"class", "owned"}}), kv.size());
  EXPECT_EQ(after.Value("ptstore_cache_bytes", {{"class", "replica"}}), 0);
  EXPECT_GE(after.Value("ptstore_arena_used_bytes"), kv.size());
  EXPECT_EQ(after.Value("ptstore_lookups_total"), 2);
  EXPECT_GE(after.Value("ptstore_hits_total"), 2);  // the lookup and the load
  EXPECT_EQ(after.Value("ptstore_misses_total"), 1);
  EXPECT_GE(after.Value("ptstore_hit_tokens_total"), 2 * tokens.size());
  EXPECT_EQ(after.Value("ptstore_tensors"), 1);
  EXPECT_EQ(after.Value("ptstore_namespaces"), 1);
  EXPECT_EQ(after.Value("ptstore_namespace_bytes", {{"namespace", "m"}}), kv.size());
  EXPECT_EQ(after.Value("ptstore_sessions"), 1);
  EXPECT_GE(after.Value("ptstore_sessions_total"), 1);
  EXPECT_EQ(after.Value("ptstore_start_time_seconds"), before.Value("ptstore_start_time_seconds"));

  // The other pages of the endpoint.
  auto index = testing::HttpGet(port, "/");
  ASSERT_OK(index);
  EXPECT_EQ(index->code, 200);
  auto nope = testing::HttpGet(port, "/nope");
  ASSERT_OK(nope);
  EXPECT_EQ(nope->code, 404);

  // A silent client does not hold up a scrape of the daemon.
  int silent = testing::ConnectTcp(port);
  ASSERT_GE(silent, 0);
  auto t0 = std::chrono::steady_clock::now();
  Scrape(port);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 1s);
  close(silent);

  client->reset();
  EXPECT_EQ(d.Stop(), 0);
  EXPECT_LT(testing::ConnectTcp(port), 0) << "the metrics port is still open after SIGTERM";
}

TEST(MetricsDaemonTest, ExplicitPortAndConfigFile) {
  // An explicit port picked here (retried: someone may take it meanwhile).
  bool started = false;
  for (int attempt = 0; attempt < 5 && !started; ++attempt) {
    const uint16_t port = FreePort();
    Daemon d;
    Daemon::Options o;
    o.extra_args = {"--metrics-port", std::to_string(port), "--metrics-bind", "127.0.0.1"};
    if (!d.Start(o).ok()) continue;
    started = true;
    EXPECT_EQ(MetricsPortFromLog(d), port) << d.ReadLog();
    EXPECT_EQ(Scrape(port).Value("ptstore_saves_total"), 0);
  }
  EXPECT_TRUE(started);

  // [metrics] in the config file.
  const std::string dir = testing::MakeTempDir("ptstore-metrics-cfg");
  ASSERT_FALSE(dir.empty());
  {
    std::ofstream f(dir + "/ptstored.toml");
    f << "[metrics]\nbind = \"127.0.0.1\"\nport = \"auto\"\n";
  }
  Daemon d;
  Daemon::Options o;
  o.extra_args = {"-c", dir + "/ptstored.toml"};
  ASSERT_OK(d.Start(o)) << d.ReadLog();
  const uint16_t port = MetricsPortFromLog(d);
  ASSERT_NE(port, 0) << d.ReadLog();
  EXPECT_EQ(Scrape(port).Value("ptstore_namespaces"), 0);
  d.Stop();

  // --metrics-port 0 turns the config's endpoint off.
  Daemon off;
  o.extra_args = {"-c", dir + "/ptstored.toml", "--metrics-port", "0"};
  ASSERT_OK(off.Start(o)) << off.ReadLog();
  EXPECT_EQ(MetricsPortFromLog(off), 0) << off.ReadLog();
  off.Stop();
  std::filesystem::remove_all(dir);
}

TEST(MetricsDaemonTest, NoEndpointByDefault) {
  Daemon d;
  ASSERT_OK(d.Start()) << d.ReadLog();
  EXPECT_EQ(MetricsPortFromLog(d), 0) << d.ReadLog();
}

TEST(MetricsDaemonTest, BadPortsStopTheStart) {
  for (const char* bad : {"70000", "http", "12x"}) {
    Daemon d;
    Daemon::Options o;
    o.extra_args = {"--metrics-port", bad};
    Status st = d.Start(o);
    EXPECT_FALSE(st.ok()) << bad;
    EXPECT_NE(st.message().find("--metrics-port: metrics port '" + std::string(bad) + "'"), std::string::npos) << st.ToString();
  }
  // A port in use.
  Daemon first;
  Daemon::Options o;
  o.extra_args = {"--metrics-port", "auto"};
  ASSERT_OK(first.Start(o)) << first.ReadLog();
  const uint16_t port = MetricsPortFromLog(first);
  ASSERT_NE(port, 0);
  Daemon second;
  o.extra_args = {"--metrics-port", std::to_string(port)};
  Status st = second.Start(o);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("metrics endpoint"), std::string::npos) << st.ToString();
  // An address that is not local.
  Daemon third;
  o.extra_args = {"--metrics-port", "auto", "--metrics-bind", "192.0.2.1"};
  EXPECT_FALSE(third.Start(o).ok());
}

}  // namespace
}  // namespace ptstore

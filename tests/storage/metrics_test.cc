// storage/metrics: every StoreStats field reaches the exposition under a
// ptstore_ name, the exposition reads back as valid Prometheus text, and
// other writers can append their families to it.
#include "storage/server/metrics.h"

#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <type_traits>

#include <gtest/gtest.h>

#include "storage/server/config.h"
#include "tests/testing/prometheus_text.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::storage {
namespace {

// StoreStats is a flat list of uint64_t counters and gauges; give each a
// distinct value that appears nowhere else.
constexpr size_t kFields = sizeof(StoreStats) / sizeof(uint64_t);
static_assert(sizeof(StoreStats) % sizeof(uint64_t) == 0 && std::is_trivially_copyable_v<StoreStats>,
              "StoreStats is expected to be all uint64_t fields; update this test");

StoreStats Distinct() {
  uint64_t v[kFields];
  for (size_t i = 0; i < kFields; ++i) v[i] = 1000003 * (i + 1);
  StoreStats s;
  std::memcpy(&s, v, sizeof(s));
  return s;
}

TEST(StoreMetricsTest, EveryStoreStatsFieldIsExported) {
  const StoreStats s = Distinct();
  core::PromWriter w;
  AppendStoreMetrics(w, s);
  ASSERT_OK(w.status());
  auto parsed = testing::ParsePromText(w.text());
  ASSERT_OK(parsed) << "\n" << w.text();
  std::multiset<double> values;
  for (const auto& f : parsed->families) {
    EXPECT_EQ(f.name.rfind("ptstore_", 0), 0u) << f.name;
    EXPECT_FALSE(f.help.empty()) << f.name;
    EXPECT_FALSE(f.samples.empty()) << f.name;
    for (const auto& smp : f.samples) values.insert(smp.value);
  }
  for (size_t i = 0; i < kFields; ++i) {
    EXPECT_EQ(values.count(1000003.0 * (i + 1)), 1u) << "StoreStats field #" << i << " is not exported exactly once";
  }
  EXPECT_EQ(values.size(), kFields) << "a sample that is not a StoreStats field";
}

TEST(StoreMetricsTest, NamedFamilies) {
  StoreStats s;
  s.arena_bytes = 1 << 30;
  s.owned_bytes = 100;
  s.replica_bytes = 50;
  s.hits = 3;
  s.misses = 4;
  s.ssd_spills = 2;
  s.ssd_fills = 1;
  s.active_leases = 6;
  NodeMetrics node;
  node.node_id = 42;
  node.version = "0.1.0";
  node.start_time = 1700000000.5;
  node.sessions_open = 2;
  node.sessions_total = 9;
  NamespaceInfo ns;
  ns.name = "m\"odel\\x";
  ns.bytes = 77;
  ns.prefixes = 5;
  const std::string text = RenderStoreMetrics(s, node, {ns});
  auto p = testing::ParsePromText(text);
  ASSERT_OK(p) << "\n" << text;
  EXPECT_EQ(p->Value("ptstore_node_info", {{"node", "42"}, {"version", "0.1.0"}}), 1);
  EXPECT_EQ(p->Value("ptstore_start_time_seconds"), 1700000000.5);
  EXPECT_EQ(p->Value("ptstore_sessions"), 2);
  EXPECT_EQ(p->Value("ptstore_sessions_total"), 9);
  EXPECT_EQ(p->Value("ptstore_arena_capacity_bytes"), 1 << 30);
  EXPECT_EQ(p->Value("ptstore_cache_bytes", {{"class", "owned"}}), 100);
  EXPECT_EQ(p->Value("ptstore_cache_bytes", {{"class", "replica"}}), 50);
  EXPECT_EQ(p->Value("ptstore_hits_total"), 3);
  EXPECT_EQ(p->Value("ptstore_misses_total"), 4);
  EXPECT_EQ(p->Value("ptstore_ssd_spills_total"), 2);
  EXPECT_EQ(p->Value("ptstore_ssd_fills_total"), 1);
  EXPECT_EQ(p->Value("ptstore_active_leases"), 6);
  EXPECT_EQ(p->Value("ptstore_namespace_bytes", {{"namespace", "m\"odel\\x"}}), 77);
  EXPECT_EQ(p->Value("ptstore_namespace_prefix_nodes", {{"namespace", "m\"odel\\x"}}), 5);
  EXPECT_EQ(p->Find("ptstore_hits_total")->type, "counter");
  EXPECT_EQ(p->Find("ptstore_arena_used_bytes")->type, "gauge");
  // No namespaces: the families are there, without samples.
  auto empty = testing::ParsePromText(RenderStoreMetrics(s, node));
  ASSERT_OK(empty);
  ASSERT_NE(empty->Find("ptstore_namespace_bytes"), nullptr);
  EXPECT_TRUE(empty->Find("ptstore_namespace_bytes")->samples.empty());
}

TEST(StoreMetricsTest, OtherWritersAppend) {
  core::PromWriter w;
  AppendNodeMetrics(w, NodeMetrics{});
  AppendStoreMetrics(w, StoreStats{});
  // What a cluster writer would add.
  core::LatencyHistogram lat;
  lat.Observe(std::chrono::microseconds(300));
  w.Family("ptstore_rpc_duration_seconds", core::MetricType::kHistogram, "RPC latency by RPC type.");
  w.Histogram(lat.Snapshot(), {{"rpc", "lookup"}});
  w.Family("ptstore_moved_bytes_total", core::MetricType::kCounter, "Bytes moved by path.");
  w.Sample(uint64_t{10}, {{"path", "rma"}});
  w.Sample(uint64_t{20}, {{"path", "tcp"}});
  ASSERT_OK(w.status());
  auto p = testing::ParsePromText(w.text());
  ASSERT_OK(p);
  EXPECT_EQ(p->Value("ptstore_rpc_duration_seconds_count", {{"rpc", "lookup"}}), 1);
  EXPECT_EQ(p->Value("ptstore_rpc_duration_seconds_bucket", {{"rpc", "lookup"}, {"le", "0.0005"}}), 1);
  EXPECT_EQ(p->Value("ptstore_moved_bytes_total", {{"path", "tcp"}}), 20);
  // A family name the store already uses is refused, not duplicated.
  w.Family("ptstore_hits_total", core::MetricType::kCounter, "again");
  EXPECT_FALSE(w.status().ok());
  EXPECT_OK(testing::ParsePromText(w.text()));
}

TEST(MetricsConfigTest, Ports) {
  MetricsConfig m;
  EXPECT_FALSE(m.enabled);
  EXPECT_EQ(m.bind, "127.0.0.1");
  ASSERT_OK(ParseMetricsPort("9464", &m));
  EXPECT_TRUE(m.enabled);
  EXPECT_EQ(m.port, 9464);
  ASSERT_OK(ParseMetricsPort("auto", &m));
  EXPECT_TRUE(m.enabled);
  EXPECT_EQ(m.port, 0);
  ASSERT_OK(ParseMetricsPort("0", &m));
  EXPECT_FALSE(m.enabled);
  ASSERT_OK(ParseMetricsPort("65535", &m));
  for (const char* bad : {"65536", "-1", "", "80x", " 80", "Auto", "99999999999"}) {
    Status st = ParseMetricsPort(bad, &m);
    EXPECT_ERROR(st, Code::kInvalidArgument) << bad;
  }
}

TEST(MetricsConfigTest, ConfigFileSection) {
  testing::TempDir dir("ptstore-metrics-config");
  auto load = [&](const std::string& text, DaemonConfig* cfg) {
    std::ofstream(dir.Join("c.toml")) << text;
    return LoadConfigFile(dir.Join("c.toml"), cfg);
  };
  DaemonConfig cfg;
  ASSERT_OK(load("[metrics]\nport = 9100\nbind = \"0.0.0.0\"\n", &cfg));
  EXPECT_TRUE(cfg.metrics.enabled);
  EXPECT_EQ(cfg.metrics.port, 9100);
  EXPECT_EQ(cfg.metrics.bind, "0.0.0.0");
  DaemonConfig a;
  ASSERT_OK(load("[metrics]\nport = \"auto\"\n", &a));
  EXPECT_TRUE(a.metrics.enabled);
  EXPECT_EQ(a.metrics.port, 0);
  EXPECT_EQ(a.metrics.bind, "127.0.0.1");
  DaemonConfig off;
  ASSERT_OK(load("[metrics]\nport = 0\n", &off));
  EXPECT_FALSE(off.metrics.enabled);
  DaemonConfig bad;
  EXPECT_FALSE(load("[metrics]\nport = 70000\n", &bad).ok());
  EXPECT_FALSE(load("[metrics]\nport = -5\n", &bad).ok());
  EXPECT_FALSE(load("[metrics]\nport = 1.5\n", &bad).ok());
  EXPECT_FALSE(load("[metrics]\nbind = \"\"\n", &bad).ok());
  Status st = load("[metrics]\nprot = 1\n", &bad);
  EXPECT_NE(st.message().find("unknown key 'prot' in [metrics]"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace ptstore::storage

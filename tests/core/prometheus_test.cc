// core/prometheus: the text exposition writer (names, escaping, histogram
// lines) read back by a strict regex-based reader, and LatencyHistogram
// (bucket edges, cumulativity, concurrent observations).
#include "core/prometheus.h"

#include <cmath>
#include <limits>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "tests/testing/prometheus_text.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::core {
namespace {

using testing::ParsePromText;

TEST(PromWriterTest, CounterAndGaugeLines) {
  PromWriter w;
  w.Counter("ptstore_saves_total", "Prompts saved.", uint64_t{12});
  w.Family("ptstore_cache_bytes", MetricType::kGauge, "Bytes by class.");
  w.Sample(uint64_t{1048576}, {{"class", "owned"}});
  w.Sample(0, {{"class", "replica"}});
  w.Gauge("ptstore_ratio", "A double.", 0.25);
  w.Gauge("ptstore_negative", "A signed value.", int64_t{-3});
  ASSERT_OK(w.status());
  EXPECT_EQ(w.text(),
            "# HELP ptstore_saves_total Prompts saved.\n"
            "# TYPE ptstore_saves_total counter\n"
            "ptstore_saves_total 12\n"
            "# HELP ptstore_cache_bytes Bytes by class.\n"
            "# TYPE ptstore_cache_bytes gauge\n"
            "ptstore_cache_bytes{class=\"owned\"} 1048576\n"
            "ptstore_cache_bytes{class=\"replica\"} 0\n"
            "# HELP ptstore_ratio A double.\n"
            "# TYPE ptstore_ratio gauge\n"
            "ptstore_ratio 0.25\n"
            "# HELP ptstore_negative A signed value.\n"
            "# TYPE ptstore_negative gauge\n"
            "ptstore_negative -3\n");
  auto parsed = ParsePromText(w.text());
  ASSERT_OK(parsed);
  EXPECT_EQ(parsed->families.size(), 4u);
  EXPECT_EQ(parsed->Value("ptstore_cache_bytes", {{"class", "owned"}}), 1048576);
  EXPECT_EQ(parsed->Find("ptstore_saves_total")->type, "counter");
}

TEST(PromWriterTest, LargeIntegersAreExact) {
  PromWriter w;
  w.Counter("big_total", "x", std::numeric_limits<uint64_t>::max());
  EXPECT_NE(w.text().find("big_total 18446744073709551615\n"), std::string::npos) << w.text();
}

TEST(PromWriterTest, EscapesLabelValuesAndHelp) {
  PromWriter w;
  w.Family("m", MetricType::kGauge, "back\\slash \"quoted\"\nsecond line");
  w.Sample(1, {{"path", "C:\\dir\\\"x\"\nnext"}, {"empty", ""}, {"utf8", "caf\xc3\xa9 {}=,"}});
  ASSERT_OK(w.status());
  EXPECT_EQ(w.text(),
            "# HELP m back\\\\slash \"quoted\"\\nsecond line\n"
            "# TYPE m gauge\n"
            "m{path=\"C:\\\\dir\\\\\\\"x\\\"\\nnext\",empty=\"\",utf8=\"caf\xc3\xa9 {}=,\"} 1\n");
  auto parsed = ParsePromText(w.text());
  ASSERT_OK(parsed);
  const auto& f = parsed->families.at(0);
  EXPECT_EQ(f.help, "back\\slash \"quoted\"\nsecond line");
  ASSERT_EQ(f.samples.size(), 1u);
  EXPECT_EQ(f.samples[0].labels.at("path"), "C:\\dir\\\"x\"\nnext");
  EXPECT_EQ(f.samples[0].labels.at("empty"), "");
  EXPECT_EQ(f.samples[0].labels.at("utf8"), "caf\xc3\xa9 {}=,");
}

TEST(PromWriterTest, SpecialDoubles) {
  EXPECT_EQ(PromWriter::FormatDouble(INFINITY), "+Inf");
  EXPECT_EQ(PromWriter::FormatDouble(-INFINITY), "-Inf");
  EXPECT_EQ(PromWriter::FormatDouble(NAN), "NaN");
  EXPECT_EQ(PromWriter::FormatDouble(1e-05), "1e-05");
  EXPECT_EQ(PromWriter::FormatDouble(2.5), "2.5");
  EXPECT_EQ(PromWriter::FormatDouble(0.1), "0.1");
  EXPECT_EQ(PromWriter::FormatDouble(1e21), "1e+21");
  EXPECT_EQ(PromWriter::FormatDouble(0.0005), "0.0005");
  EXPECT_EQ(PromWriter::FormatDouble(0.0001), "0.0001");
  EXPECT_EQ(PromWriter::FormatDouble(2.5e-05), "2.5e-05");
  EXPECT_EQ(PromWriter::FormatDouble(1700000000.5), "1700000000.5");
  EXPECT_EQ(PromWriter::FormatDouble(1e20), "100000000000000000000");
  EXPECT_EQ(PromWriter::FormatDouble(-0.25), "-0.25");
  EXPECT_EQ(PromWriter::FormatDouble(0), "0");
  EXPECT_EQ(PromWriter::FormatDouble(10), "10");
  for (double v : {0.1, 1.0 / 3, 1e-300, 123456.789, 9007199254740993.0, 5e-324}) {
    EXPECT_EQ(std::strtod(PromWriter::FormatDouble(v).c_str(), nullptr), v) << v;
  }
  PromWriter w;
  w.Gauge("g", "h", NAN);
  auto parsed = ParsePromText(w.text());
  ASSERT_OK(parsed);
  EXPECT_TRUE(std::isnan(parsed->families[0].samples[0].value));
}

TEST(PromWriterTest, Names) {
  EXPECT_TRUE(PromWriter::ValidMetricName("ptstore_hits_total"));
  EXPECT_TRUE(PromWriter::ValidMetricName("job:rate5m"));
  EXPECT_TRUE(PromWriter::ValidMetricName("_x9"));
  EXPECT_FALSE(PromWriter::ValidMetricName(""));
  EXPECT_FALSE(PromWriter::ValidMetricName("9x"));
  EXPECT_FALSE(PromWriter::ValidMetricName("a-b"));
  EXPECT_FALSE(PromWriter::ValidMetricName("a b"));
  EXPECT_TRUE(PromWriter::ValidLabelName("tier"));
  EXPECT_FALSE(PromWriter::ValidLabelName("__name__"));
  EXPECT_FALSE(PromWriter::ValidLabelName("a:b"));
  EXPECT_FALSE(PromWriter::ValidLabelName("1a"));
}

TEST(PromWriterTest, MisuseLeavesOutputValid) {
  PromWriter w;
  w.Sample(1);                                             // no family yet
  w.Family("saves", MetricType::kCounter, "no _total");    // rejected ...
  w.Sample(1);                                             // ... and so is its sample
  w.Family("bad-name", MetricType::kGauge, "x");
  w.Family("ok", MetricType::kGauge, "x");
  w.Sample(1, {{"__reserved", "v"}});
  w.Sample(2, {{"a", "1"}, {"a", "2"}});
  w.Sample(3, {{"a", "1"}});
  w.Family("ok", MetricType::kGauge, "again");             // duplicate family
  w.Sample(4);
  w.Family("h", MetricType::kHistogram, "x");
  w.Sample(5);                                             // a plain sample in a histogram
  HistogramSnapshot bad;
  bad.bounds = {1, 2};
  bad.counts = {1};
  w.Histogram(bad);
  w.Histogram(HistogramSnapshot{{1}, {0, 0}, 0, 0}, {{"le", "1"}});
  EXPECT_FALSE(w.status().ok());
  EXPECT_ERROR(w.status(), Code::kInvalidArgument);
  EXPECT_NE(w.status().message().find("outside a metric family"), std::string::npos) << w.status().ToString();
  auto parsed = ParsePromText(w.text());
  ASSERT_OK(parsed) << "\n" << w.text();
  ASSERT_NE(parsed->Find("ok"), nullptr);
  ASSERT_EQ(parsed->Find("ok")->samples.size(), 1u);
  EXPECT_EQ(parsed->Value("ok", {{"a", "1"}}), 3);
  EXPECT_EQ(parsed->Find("saves"), nullptr);
}

TEST(PromWriterTest, HistogramLinesAreCumulative) {
  HistogramSnapshot h;
  h.bounds = {0.001, 0.01, 0.1};
  h.counts = {2, 0, 5, 1};
  h.count = 8;
  h.sum = 0.4;
  PromWriter w;
  w.Family("ptstore_rpc_seconds", MetricType::kHistogram, "RPC latency.");
  w.Histogram(h, {{"rpc", "lookup"}});
  w.Histogram(HistogramSnapshot{{0.001, 0.01, 0.1}, {0, 0, 0, 0}, 0, 0}, {{"rpc", "load"}});
  ASSERT_OK(w.status());
  EXPECT_EQ(w.text(),
            "# HELP ptstore_rpc_seconds RPC latency.\n"
            "# TYPE ptstore_rpc_seconds histogram\n"
            "ptstore_rpc_seconds_bucket{rpc=\"lookup\",le=\"0.001\"} 2\n"
            "ptstore_rpc_seconds_bucket{rpc=\"lookup\",le=\"0.01\"} 2\n"
            "ptstore_rpc_seconds_bucket{rpc=\"lookup\",le=\"0.1\"} 7\n"
            "ptstore_rpc_seconds_bucket{rpc=\"lookup\",le=\"+Inf\"} 8\n"
            "ptstore_rpc_seconds_sum{rpc=\"lookup\"} 0.4\n"
            "ptstore_rpc_seconds_count{rpc=\"lookup\"} 8\n"
            "ptstore_rpc_seconds_bucket{rpc=\"load\",le=\"0.001\"} 0\n"
            "ptstore_rpc_seconds_bucket{rpc=\"load\",le=\"0.01\"} 0\n"
            "ptstore_rpc_seconds_bucket{rpc=\"load\",le=\"0.1\"} 0\n"
            "ptstore_rpc_seconds_bucket{rpc=\"load\",le=\"+Inf\"} 0\n"
            "ptstore_rpc_seconds_sum{rpc=\"load\"} 0\n"
            "ptstore_rpc_seconds_count{rpc=\"load\"} 0\n");
  auto parsed = ParsePromText(w.text());
  ASSERT_OK(parsed);
}

TEST(PromTextReaderTest, RejectsBrokenExpositions) {
  // The reader itself must catch what it is there to catch.
  EXPECT_FALSE(ParsePromText("m 1\n").ok());                                          // no TYPE
  EXPECT_FALSE(ParsePromText("# HELP m x\n# TYPE m gauge\nm 1").ok());                // no final newline
  EXPECT_FALSE(ParsePromText("# HELP m x\n# TYPE m gauge\nm{a=\"1} 1\n").ok());      // unterminated
  EXPECT_FALSE(ParsePromText("# HELP m x\n# TYPE m gauge\nm{a=\"\n\"} 1\n").ok());   // raw newline
  EXPECT_FALSE(ParsePromText("# HELP m x\n# TYPE m gauge\nm one\n").ok());            // bad value
  EXPECT_FALSE(ParsePromText("# HELP m x\n# TYPE m gauge\nn 1\n").ok());              // other family
  EXPECT_FALSE(ParsePromText("# HELP m x\n# TYPE m counter\nm 1\n").ok());            // not _total
  EXPECT_FALSE(ParsePromText("# HELP m x\n# TYPE m gauge\n# HELP m x\n# TYPE m gauge\n").ok());
  EXPECT_FALSE(ParsePromText("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"1\"} 3\nh_bucket{le=\"+Inf\"} 2\n"
                             "h_sum 1\nh_count 2\n").ok());                           // not cumulative
  EXPECT_FALSE(ParsePromText("# HELP h x\n# TYPE h histogram\nh_bucket{le=\"+Inf\"} 2\nh_sum 1\nh_count 3\n").ok());
  EXPECT_OK(ParsePromText("# HELP m x\n# TYPE m gauge\nm{a=\"\\\"\"} -1.5e3 1700000000000\n"));
}

TEST(LatencyHistogramTest, BucketEdgesAreInclusive) {
  const auto& b = LatencyHistogram::BoundsNs();
  EXPECT_EQ(b.front(), 10'000);
  EXPECT_EQ(b.back(), 10'000'000'000);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i - 1], b[i]);

  LatencyHistogram h;
  h.Observe(std::chrono::nanoseconds(0));             // bucket 0
  h.Observe(std::chrono::microseconds(10));           // exactly 10us: bucket 0 (le is <=)
  h.Observe(std::chrono::nanoseconds(10'001));        // bucket 1
  h.Observe(0.001);                                   // exactly 1 ms
  h.Observe(std::chrono::seconds(10));                // the last finite bucket
  h.Observe(11.0);                                    // +Inf
  h.Observe(-1.0);                                    // counts as 0
  h.Observe(std::nan(""));                            // ignored
  HistogramSnapshot s = h.Snapshot();
  ASSERT_EQ(s.bounds.size(), LatencyHistogram::kBuckets);
  ASSERT_EQ(s.counts.size(), LatencyHistogram::kBuckets + 1);
  EXPECT_DOUBLE_EQ(s.bounds.front(), 1e-05);
  EXPECT_DOUBLE_EQ(s.bounds.back(), 10.0);
  EXPECT_EQ(s.count, 7u);
  EXPECT_EQ(s.counts[0], 3u);
  EXPECT_EQ(s.counts[1], 1u);
  EXPECT_EQ(s.counts[6], 1u);  // le=0.001
  EXPECT_EQ(s.counts[LatencyHistogram::kBuckets - 1], 1u);
  EXPECT_EQ(s.counts[LatencyHistogram::kBuckets], 1u);
  EXPECT_NEAR(s.sum, 0 + 10e-6 + 10.001e-6 + 0.001 + 10 + 11, 1e-9);

  PromWriter w;
  w.Family("lat_seconds", MetricType::kHistogram, "x");
  w.Histogram(s);
  auto parsed = ParsePromText(w.text());
  ASSERT_OK(parsed);
  EXPECT_EQ(parsed->Value("lat_seconds_bucket", {{"le", "1e-05"}}), 3);
  EXPECT_EQ(parsed->Value("lat_seconds_bucket", {{"le", "2.5e-05"}}), 4);
  EXPECT_EQ(parsed->Value("lat_seconds_bucket", {{"le", "0.001"}}), 5);
  EXPECT_EQ(parsed->Value("lat_seconds_bucket", {{"le", "10"}}), 6);
  EXPECT_EQ(parsed->Value("lat_seconds_bucket", {{"le", "+Inf"}}), 7);
  EXPECT_EQ(parsed->Value("lat_seconds_count"), 7);
  EXPECT_EQ(parsed->Find("lat_seconds")->samples.size(), LatencyHistogram::kBuckets + 3);
}

TEST(LatencyHistogramTest, ConcurrentObservationsAllCount) {
  LatencyHistogram h;
  constexpr int kThreads = 8, kEach = 20000;
  std::atomic<bool> go{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      while (!go.load()) {}
      for (int i = 0; i < kEach; ++i) h.Observe(std::chrono::microseconds((i * 37 + t) % 200000));
    });
  }
  go = true;
  // Snapshots taken meanwhile are always valid histograms.
  for (int i = 0; i < 50; ++i) {
    HistogramSnapshot s = h.Snapshot();
    PromWriter w;
    w.Family("x_seconds", MetricType::kHistogram, "x");
    w.Histogram(s);
    auto parsed = ParsePromText(w.text());
    ASSERT_OK(parsed);
  }
  for (auto& t : threads) t.join();
  HistogramSnapshot s = h.Snapshot();
  EXPECT_EQ(s.count, uint64_t{kThreads} * kEach);
  uint64_t sum_us = 0;
  for (int t = 0; t < kThreads; ++t) {
    for (int i = 0; i < kEach; ++i) sum_us += (i * 37 + t) % 200000;
  }
  EXPECT_NEAR(s.sum, sum_us / 1e6, 1e-6);
}

}  // namespace
}  // namespace ptstore::core

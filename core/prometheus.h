// Metrics in the Prometheus text exposition format, version 0.0.4
// (https://prometheus.io/docs/instrumenting/exposition_formats/), and a
// latency histogram to feed it.
//
// PromWriter builds one exposition: a sequence of metric families, each a
// "# HELP" and a "# TYPE" line followed by its samples, all lines of a family
// together as the format requires:
//
//   # HELP ptstore_saves_total Prompts saved.
//   # TYPE ptstore_saves_total counter
//   ptstore_saves_total 12
//   # HELP ptstore_cache_bytes Bytes in the arena by cache class.
//   # TYPE ptstore_cache_bytes gauge
//   ptstore_cache_bytes{class="owned"} 1048576
//
// Rules it enforces: metric names match [a-zA-Z_:][a-zA-Z0-9_:]*, label names
// [a-zA-Z_][a-zA-Z0-9_]* and do not start with "__"; counter names end in
// "_total"; a family is declared once; a histogram's own labels do not use
// "le". Label values are escaped (\ -> \\, " -> \", newline -> \n), HELP text
// likewise except for quotes. Histograms are written as cumulative
// `_bucket{le="..."}` lines ending with le="+Inf", then `_sum` and `_count`
// (equal to the +Inf bucket). Values are printed exactly for integers and in
// the shortest round-trip form for doubles ("+Inf", "-Inf", "NaN").
//
// Misuse (a bad name, a sample outside a family of its type, a duplicate
// family) never makes the output invalid: the offending family or sample is
// left out and status() keeps the first such error (InvalidArgument).
//
// Several writers may append to one exposition in turn (the store's families,
// then the cluster's): pass the same PromWriter along; family names must not
// repeat.
//
// LatencyHistogram counts durations in fixed buckets from 10 us to 10 s
// (1, 2.5, 5 per decade: 10us 25us 50us 100us ... 2.5s 5s 10s, then +Inf).
//
// Thread safety: a PromWriter is a value for one thread. LatencyHistogram is
// safe to Observe and Snapshot from any number of threads at once (relaxed
// atomics): a snapshot taken during observations is consistent in its
// buckets and count (count is the sum of its buckets), while its sum may
// lag or lead them by the observations in flight.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::core {

enum class MetricType { kCounter, kGauge, kHistogram };

// "counter", "gauge", "histogram".
const char* MetricTypeName(MetricType type);

struct Label {
  std::string name;
  std::string value;
};
using Labels = std::vector<Label>;

// A histogram's state: `counts[i]` observations fell in (bounds[i-1],
// bounds[i]] (not cumulative), and counts.back() those above the last bound.
// REQUIRES: counts.size() == bounds.size() + 1, bounds strictly increasing.
struct HistogramSnapshot {
  std::vector<double> bounds;  // upper bounds, in the metric's unit
  std::vector<uint64_t> counts;
  double sum = 0;
  uint64_t count = 0;          // the sum of counts
};

class PromWriter {
 public:
  PromWriter() = default;

  // Starts a family: writes its # HELP and # TYPE lines. Samples that follow
  // belong to it until the next Family.
  void Family(std::string_view name, MetricType type, std::string_view help);

  // One sample of the current counter or gauge family.
  template <typename T>
    requires std::is_arithmetic_v<T>
  void Sample(T value, const Labels& labels = {}) {
    if constexpr (std::is_floating_point_v<T>) {
      SampleText(FormatDouble(static_cast<double>(value)), labels);
    } else if constexpr (std::is_signed_v<T>) {
      SampleText(std::to_string(static_cast<int64_t>(value)), labels);
    } else {
      SampleText(std::to_string(static_cast<uint64_t>(value)), labels);
    }
  }
  // One histogram of the current histogram family (`labels` identify it;
  // "le" is added per bucket).
  void Histogram(const HistogramSnapshot& h, const Labels& labels = {});

  // A family with one unlabelled sample.
  template <typename T>
  void Counter(std::string_view name, std::string_view help, T value) {
    Family(name, MetricType::kCounter, help);
    Sample(value);
  }
  template <typename T>
  void Gauge(std::string_view name, std::string_view help, T value) {
    Family(name, MetricType::kGauge, help);
    Sample(value);
  }

  // The exposition so far.
  const std::string& text() const { return out_; }
  std::string Take() { return std::move(out_); }
  // OK, or the first misuse (see the header comment).
  const Status& status() const { return status_; }

  // Helpers, exposed for tests and other writers.
  static bool ValidMetricName(std::string_view name);
  static bool ValidLabelName(std::string_view name);
  // `"` + value with \ " and newline escaped + `"` is the caller's job:
  // this returns the escaped body only.
  static std::string EscapeLabelValue(std::string_view value);
  static std::string EscapeHelp(std::string_view help);
  // "+Inf", "-Inf", "NaN", or the shortest text that reads back as `v`.
  static std::string FormatDouble(double v);

 private:
  void SampleText(const std::string& value, const Labels& labels);
  bool CheckLabels(const Labels& labels);
  void AppendLabels(const Labels& labels, const Label* extra);
  void Fail(std::string message);

  std::string out_;
  Status status_;
  std::unordered_set<std::string> families_;  // names declared so far
  std::string family_;                 // current family; empty: none (or rejected)
  MetricType type_ = MetricType::kGauge;
};

class LatencyHistogram {
 public:
  static constexpr size_t kBuckets = 19;  // finite bounds; one more for +Inf
  // The finite upper bounds in nanoseconds: 10us, 25us, 50us, ... 5s, 10s.
  static const std::array<int64_t, kBuckets>& BoundsNs();

  LatencyHistogram() = default;
  LatencyHistogram(const LatencyHistogram&) = delete;
  LatencyHistogram& operator=(const LatencyHistogram&) = delete;

  // Negative durations count as 0; NaN is ignored.
  void Observe(double seconds);
  void Observe(std::chrono::nanoseconds d);

  // Bounds and sum in seconds.
  HistogramSnapshot Snapshot() const;

 private:
  std::array<std::atomic<uint64_t>, kBuckets + 1> counts_{};
  std::atomic<uint64_t> sum_ns_{0};
};

}  // namespace ptstore::core

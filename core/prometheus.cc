#include "core/prometheus.h"

#include <algorithm>
#include <charconv>
#include <cmath>

namespace ptstore::core {

const char* MetricTypeName(MetricType type) {
  switch (type) {
    case MetricType::kCounter: return "counter";
    case MetricType::kGauge: return "gauge";
    case MetricType::kHistogram: return "histogram";
  }
  return "untyped";
}

bool PromWriter::ValidMetricName(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool PromWriter::ValidLabelName(std::string_view name) {
  if (name.empty() || name.starts_with("__")) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    char c = name[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

std::string PromWriter::EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string PromWriter::EscapeHelp(std::string_view help) {
  std::string out;
  out.reserve(help.size());
  for (char c : help) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

std::string PromWriter::FormatDouble(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  // The shortest digits that read back as v: plain decimal for exponents
  // from -4 to 20 ("0.0005", "2.5", "1700000000.5"), scientific outside
  // ("1e-05", "1e+21"), which for small numbers is how Prometheus' own Go
  // clients print bucket bounds.
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
  if (ec != std::errc()) return "NaN";  // cannot happen with 64 bytes
  const std::string sci(buf, p);
  const size_t e = sci.find('e');
  int exp = 0;
  std::from_chars(sci.data() + e + 1 + (sci[e + 1] == '+' ? 1 : 0), sci.data() + sci.size(), exp);
  if (exp < -4 || exp >= 21) return sci;
  auto [q, ec2] = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
  if (ec2 != std::errc()) return sci;
  return std::string(buf, q);
}

void PromWriter::Fail(std::string message) {
  if (status_.ok()) status_ = InvalidArgument("prometheus: " + std::move(message));
}

void PromWriter::Family(std::string_view name, MetricType type, std::string_view help) {
  family_.clear();
  if (!ValidMetricName(name)) return Fail("invalid metric name '" + std::string(name) + "'");
  if (type == MetricType::kCounter && !name.ends_with("_total")) {
    return Fail("counter '" + std::string(name) + "' does not end in _total");
  }
  if (!families_.insert(std::string(name)).second) {
    return Fail("metric family '" + std::string(name) + "' declared twice");
  }
  family_ = std::string(name);
  type_ = type;
  out_ += "# HELP ";
  out_ += family_;
  out_ += ' ';
  out_ += EscapeHelp(help);
  out_ += "\n# TYPE ";
  out_ += family_;
  out_ += ' ';
  out_ += MetricTypeName(type);
  out_ += '\n';
}

bool PromWriter::CheckLabels(const Labels& labels) {
  for (size_t i = 0; i < labels.size(); ++i) {
    if (!ValidLabelName(labels[i].name)) {
      Fail("invalid label name '" + labels[i].name + "' in " + family_);
      return false;
    }
    for (size_t j = 0; j < i; ++j) {
      if (labels[j].name == labels[i].name) {
        Fail("label '" + labels[i].name + "' given twice in " + family_);
        return false;
      }
    }
  }
  return true;
}

void PromWriter::AppendLabels(const Labels& labels, const Label* extra) {
  if (labels.empty() && extra == nullptr) return;
  out_ += '{';
  bool first = true;
  auto one = [&](const Label& l) {
    if (!first) out_ += ',';
    first = false;
    out_ += l.name;
    out_ += "=\"";
    out_ += EscapeLabelValue(l.value);
    out_ += '"';
  };
  for (const Label& l : labels) one(l);
  if (extra) one(*extra);
  out_ += '}';
}

void PromWriter::SampleText(const std::string& value, const Labels& labels) {
  if (family_.empty()) return Fail("a sample outside a metric family");
  if (type_ == MetricType::kHistogram) return Fail("a plain sample in histogram " + family_);
  if (!CheckLabels(labels)) return;
  out_ += family_;
  AppendLabels(labels, nullptr);
  out_ += ' ';
  out_ += value;
  out_ += '\n';
}

void PromWriter::Histogram(const HistogramSnapshot& h, const Labels& labels) {
  if (family_.empty()) return Fail("a histogram outside a metric family");
  if (type_ != MetricType::kHistogram) return Fail("a histogram in " + std::string(MetricTypeName(type_)) + " " + family_);
  if (!CheckLabels(labels)) return;
  for (const Label& l : labels) {
    if (l.name == "le") return Fail("histogram " + family_ + " uses the label 'le'");
  }
  if (h.counts.size() != h.bounds.size() + 1) return Fail("histogram " + family_ + ": counts do not match bounds");
  for (size_t i = 0; i < h.bounds.size(); ++i) {
    if (!std::isfinite(h.bounds[i]) || (i > 0 && !(h.bounds[i - 1] < h.bounds[i]))) {
      return Fail("histogram " + family_ + ": bounds are not finite and increasing");
    }
  }
  uint64_t cumulative = 0;
  Label le{"le", ""};
  for (size_t i = 0; i < h.counts.size(); ++i) {
    cumulative += h.counts[i];
    le.value = i < h.bounds.size() ? FormatDouble(h.bounds[i]) : "+Inf";
    out_ += family_;
    out_ += "_bucket";
    AppendLabels(labels, &le);
    out_ += ' ';
    out_ += std::to_string(cumulative);
    out_ += '\n';
  }
  out_ += family_;
  out_ += "_sum";
  AppendLabels(labels, nullptr);
  out_ += ' ';
  out_ += FormatDouble(h.sum);
  out_ += '\n';
  out_ += family_;
  out_ += "_count";
  AppendLabels(labels, nullptr);
  out_ += ' ';
  out_ += std::to_string(cumulative);  // always equal to the +Inf bucket
  out_ += '\n';
}

const std::array<int64_t, LatencyHistogram::kBuckets>& LatencyHistogram::BoundsNs() {
  static constexpr std::array<int64_t, kBuckets> kBounds = {
      10'000,        25'000,        50'000,                                       // 10us 25us 50us
      100'000,       250'000,       500'000,                                      // 100us ..
      1'000'000,     2'500'000,     5'000'000,                                    // 1ms ..
      10'000'000,    25'000'000,    50'000'000,                                   // 10ms ..
      100'000'000,   250'000'000,   500'000'000,                                  // 100ms ..
      1'000'000'000, 2'500'000'000, 5'000'000'000, 10'000'000'000};               // 1s .. 10s
  return kBounds;
}

void LatencyHistogram::Observe(std::chrono::nanoseconds d) {
  int64_t ns = std::max<int64_t>(d.count(), 0);
  const auto& b = BoundsNs();
  size_t i = std::lower_bound(b.begin(), b.end(), ns) - b.begin();  // first bound >= ns: le is inclusive
  counts_[i].fetch_add(1, std::memory_order_relaxed);
  sum_ns_.fetch_add(static_cast<uint64_t>(ns), std::memory_order_relaxed);
}

void LatencyHistogram::Observe(double seconds) {
  if (std::isnan(seconds)) return;
  double ns = seconds * 1e9;
  // Clamp to what an int64 of nanoseconds holds (292 years).
  if (ns >= 9.2e18) ns = 9.2e18;
  Observe(std::chrono::nanoseconds(ns <= 0 ? 0 : static_cast<int64_t>(std::llround(ns))));
}

HistogramSnapshot LatencyHistogram::Snapshot() const {
  HistogramSnapshot h;
  h.bounds.reserve(kBuckets);
  for (int64_t b : BoundsNs()) h.bounds.push_back(static_cast<double>(b) / 1e9);
  h.counts.resize(kBuckets + 1);
  for (size_t i = 0; i < counts_.size(); ++i) {
    h.counts[i] = counts_[i].load(std::memory_order_relaxed);
    h.count += h.counts[i];
  }
  h.sum = static_cast<double>(sum_ns_.load(std::memory_order_relaxed)) / 1e9;
  return h;
}

}  // namespace ptstore::core

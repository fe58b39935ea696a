// A strict reader of the Prometheus text exposition format 0.0.4, for tests:
// checks every line against the grammar with regular expressions, and the
// rules between lines (# HELP and # TYPE before a family's samples, a
// family's lines together and never repeated, sample names that belong to
// their family, counters named *_total and never negative, histogram buckets
// cumulative and ending with le="+Inf" equal to _count). Label values are
// unescaped.
//
// Header-only, so that tests linking only a production library can use it.
#pragma once

#include <cmath>
#include <cstdlib>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::testing {

struct PromSample {
  std::string name;  // with its _bucket/_sum/_count suffix
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PromFamily {
  std::string name;
  std::string type;
  std::string help;  // unescaped
  std::vector<PromSample> samples;
};

struct PromExposition {
  std::vector<PromFamily> families;

  const PromFamily* Find(const std::string& name) const {
    for (const auto& f : families) {
      if (f.name == name) return &f;
    }
    return nullptr;
  }
  // The value of the sample `name` whose labels include `labels`; NaN when none.
  double Value(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    for (const auto& f : families) {
      for (const auto& s : f.samples) {
        if (s.name != name) continue;
        bool match = true;
        for (const auto& [k, v] : labels) {
          auto it = s.labels.find(k);
          if (it == s.labels.end() || it->second != v) match = false;
        }
        if (match) return s.value;
      }
    }
    return std::nan("");
  }
};

namespace prom_detail {

inline std::string Unescape(const std::string& s, bool quotes) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      char n = s[++i];
      if (n == 'n') out += '\n';
      else if (n == '\\') out += '\\';
      else if (n == '"' && quotes) out += '"';
      else { out += '\\'; out += n; }
    } else {
      out += s[i];
    }
  }
  return out;
}

inline Status LineError(size_t line, const std::string& text, const std::string& why) {
  return InvalidArgument("exposition line " + std::to_string(line) + " (" + text + "): " + why);
}

inline Status CheckHistogram(const PromFamily& f) {
  // Group by the labels other than le, in order of appearance.
  std::map<std::map<std::string, std::string>, std::vector<const PromSample*>> groups;
  for (const auto& s : f.samples) {
    auto key = s.labels;
    key.erase("le");
    groups[key].push_back(&s);
  }
  for (const auto& [key, samples] : groups) {
    double last_le = -INFINITY, last_count = 0, count = -1, inf = -1;
    bool sum = false;
    for (const PromSample* s : samples) {
      if (s->name == f.name + "_bucket") {
        auto it = s->labels.find("le");
        if (it == s->labels.end()) return InvalidArgument(f.name + ": a bucket without le");
        double le = it->second == "+Inf" ? INFINITY : std::strtod(it->second.c_str(), nullptr);
        if (!(le > last_le)) return InvalidArgument(f.name + ": buckets not in increasing le order");
        if (s->value < last_count) return InvalidArgument(f.name + ": buckets not cumulative at le=" + it->second);
        last_le = le;
        last_count = s->value;
        if (it->second == "+Inf") inf = s->value;
      } else if (s->name == f.name + "_sum") {
        sum = true;
      } else if (s->name == f.name + "_count") {
        count = s->value;
      }
    }
    if (inf < 0) return InvalidArgument(f.name + ": no le=\"+Inf\" bucket");
    if (!sum || count < 0) return InvalidArgument(f.name + ": no _sum or _count");
    if (count != inf) return InvalidArgument(f.name + ": _count differs from the +Inf bucket");
  }
  return Status::OK();
}

}  // namespace prom_detail

inline Result<PromExposition> ParsePromText(const std::string& text) {
  static const std::regex kHelp(R"(^# HELP ([a-zA-Z_:][a-zA-Z0-9_:]*) (.*)$)");
  static const std::regex kType(R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  static const std::regex kSample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)(?: -?[0-9]+)?$)");
  static const std::regex kLabel(R"(^([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)\"(,|$))");
  static const std::regex kValue(R"(^(?:[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|[+-]Inf|NaN)$)");

  PromExposition out;
  std::set<std::string> seen;
  PromFamily* cur = nullptr;
  std::string pending_help_name, pending_help;
  if (!text.empty() && text.back() != '\n') return InvalidArgument("exposition does not end with a newline");
  std::istringstream in(text);
  std::string line;
  size_t n = 0;
  std::smatch m;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty()) continue;
    if (std::regex_match(line, m, kHelp)) {
      pending_help_name = m[1];
      pending_help = prom_detail::Unescape(m[2], false);
      continue;
    }
    if (std::regex_match(line, m, kType)) {
      std::string name = m[1];
      if (!seen.insert(name).second) return prom_detail::LineError(n, line, "family declared twice");
      if (pending_help_name != name) return prom_detail::LineError(n, line, "no # HELP right before # TYPE");
      if (m[2] == "counter" && !name.ends_with("_total")) return prom_detail::LineError(n, line, "counter not *_total");
      out.families.push_back(PromFamily{name, m[2], pending_help, {}});
      cur = &out.families.back();
      pending_help_name.clear();
      continue;
    }
    if (line[0] == '#') return prom_detail::LineError(n, line, "unknown comment form");
    if (!std::regex_match(line, m, kSample)) return prom_detail::LineError(n, line, "not a sample line");
    PromSample s;
    s.name = m[1];
    std::string labels = m[2];
    std::string value = m[3];
    if (!std::regex_match(value, kValue)) return prom_detail::LineError(n, line, "bad value '" + value + "'");
    s.value = std::strtod(value.c_str(), nullptr);
    while (!labels.empty()) {
      std::smatch lm;
      if (!std::regex_search(labels, lm, kLabel)) return prom_detail::LineError(n, line, "bad labels");
      std::string name = lm[1];
      if (!s.labels.emplace(name, prom_detail::Unescape(lm[2], true)).second) {
        return prom_detail::LineError(n, line, "label " + name + " twice");
      }
      labels = lm.suffix();
    }
    if (cur == nullptr) return prom_detail::LineError(n, line, "sample before any # TYPE");
    bool belongs = s.name == cur->name;
    if (cur->type == "histogram") {
      belongs = s.name == cur->name + "_bucket" || s.name == cur->name + "_sum" || s.name == cur->name + "_count";
    }
    if (!belongs) return prom_detail::LineError(n, line, "sample outside its family " + cur->name);
    if (cur->type == "counter" && !(s.value >= 0)) return prom_detail::LineError(n, line, "negative counter");
    cur->samples.push_back(std::move(s));
  }
  for (const auto& f : out.families) {
    if (f.type == "histogram") PTS_RETURN_IF_ERROR(prom_detail::CheckHistogram(f));
  }
  return out;
}

}  // namespace ptstore::testing

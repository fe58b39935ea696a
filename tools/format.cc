// tools/format.h: values (sizes, modes, ratios, times) and tables. The
// other sections of format.h are in format_tree.cc (the increment tree and
// listings), format_report.cc (ptstore-stat's reports), format_json.cc (the
// JSON of the value types) and format_cluster.cc (cluster members).
#include "tools/format.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

namespace ptstore::tools {

// ------------------------------------------------------------------ values

std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  size_t unit = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024.0 && unit + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++unit;
  }
  // 1048575 bytes is 1023.999 KiB: printed with one decimal that would be
  // "1024.0 KiB"; show "1.0 MiB" instead.
  if (v >= 1023.95 && unit + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  return buf;
}

std::string OctalMode(uint32_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04o", mode & 07777);
  return buf;
}

std::string SymbolicMode(uint32_t mode) {
  std::string s = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) {
    if (!(mode & (0400u >> i))) s[i] = '-';
  }
  return s;
}

std::optional<double> Ratio(uint64_t part, uint64_t whole) {
  if (whole == 0) return std::nullopt;
  return static_cast<double>(part) / static_cast<double>(whole);
}

std::string Percent(std::optional<double> ratio) {
  if (!ratio) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", *ratio * 100.0);
  return buf;
}

std::optional<double> CompressionRatio(uint64_t logical_bytes, uint64_t stored_bytes) {
  return Ratio(logical_bytes, stored_bytes);
}

std::string CompressionRatioText(uint64_t logical_bytes, uint64_t stored_bytes) {
  std::optional<double> r = CompressionRatio(logical_bytes, stored_bytes);
  if (!r) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fx", *r);
  return buf;
}

const char* TimeFieldName(TimeField f) {
  switch (f) {
    case TimeField::kAtime: return "atime";
    case TimeField::kCtime: return "ctime";
    case TimeField::kMtime: break;
  }
  return "mtime";
}

uint64_t TimeOf(const Times& t, TimeField f) {
  switch (f) {
    case TimeField::kAtime: return t.atime_ns;
    case TimeField::kCtime: return t.ctime_ns;
    case TimeField::kMtime: break;
  }
  return t.mtime_ns;
}

std::string LocalTime(uint64_t ns) {
  if (ns == 0) return "-";
  const time_t secs = static_cast<time_t>(ns / 1000000000);
  struct tm tm {};
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

double EpochSeconds(uint64_t ns) {
  return static_cast<double>(ns / 1000) / 1e6;  // whole microseconds: exact in a double until year 2255
}

size_t DisplayWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) != 0x80) ++n;  // count every byte that starts a code point
  }
  return n;
}

// ------------------------------------------------------------------ tables

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render(bool with_header) const {
  const size_t n = columns_.size();
  std::vector<size_t> width(n, 0);
  if (with_header) {
    for (size_t c = 0; c < n; ++c) width[c] = DisplayWidth(columns_[c].header);
  }
  for (const auto& row : rows_) {
    for (size_t c = 0; c < n; ++c) width[c] = std::max(width[c], DisplayWidth(row[c]));
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < n; ++c) {
      if (c > 0) l += "  ";
      const size_t pad = width[c] - DisplayWidth(cells[c]);
      if (columns_[c].align == Align::kRight) {
        l.append(pad, ' ');
        l += cells[c];
      } else {
        l += cells[c];
        if (c + 1 < n) l.append(pad, ' ');
      }
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l;
    out += '\n';
  };
  if (with_header) {
    std::vector<std::string> header;
    for (const auto& col : columns_) header.push_back(col.header);
    line(header);
  }
  for (const auto& row : rows_) line(row);
  return out;
}

}  // namespace ptstore::tools

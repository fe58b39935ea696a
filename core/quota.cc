#include "ptstore/quota.h"

#include <cctype>
#include <cmath>

namespace ptstore {

namespace {

std::string Lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view Trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

// Multiplier of a unit (already lower-cased); 0 if unknown.
uint64_t UnitBytes(const std::string& u) {
  if (u.empty() || u == "b") return 1;
  if (u == "k" || u == "kib") return 1ull << 10;
  if (u == "m" || u == "mib") return 1ull << 20;
  if (u == "g" || u == "gib") return 1ull << 30;
  if (u == "t" || u == "tib") return 1ull << 40;
  if (u == "p" || u == "pib") return 1ull << 50;
  if (u == "e" || u == "eib") return 1ull << 60;
  if (u == "kb") return 1000ull;
  if (u == "mb") return 1000ull * 1000;
  if (u == "gb") return 1000ull * 1000 * 1000;
  if (u == "tb") return 1000ull * 1000 * 1000 * 1000;
  if (u == "pb") return 1000ull * 1000 * 1000 * 1000 * 1000;
  if (u == "eb") return 1000ull * 1000 * 1000 * 1000 * 1000 * 1000;
  return 0;
}

}  // namespace

const char* QuotaTierName(QuotaTier tier) { return tier == QuotaTier::kSsd ? "ssd" : "dram"; }

Result<QuotaTier> ParseQuotaTier(std::string_view text) {
  if (text == "dram") return QuotaTier::kDram;
  if (text == "ssd") return QuotaTier::kSsd;
  return InvalidArgument("quota tier '" + std::string(text) + "' is not 'dram' or 'ssd'");
}

Result<uint64_t> ParseQuotaBytes(std::string_view text) {
  const std::string quoted = "quota '" + std::string(text) + "'";
  std::string_view t = Trim(text);
  if (t.empty()) return InvalidArgument("quota is empty: give a size such as 4GiB, or 0 for no limit");
  const std::string lower = Lower(t);
  if (lower == "none" || lower == "unlimited") return uint64_t{0};
  if (t.front() == '-') return InvalidArgument(quoted + " is negative: give a size such as 4GiB, or 0 for no limit");
  if (t.front() == '+') t.remove_prefix(1);
  // The number: digits, optionally a point and more digits.
  size_t i = 0;
  uint64_t whole = 0;
  bool digits = false, overflow = false;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) {
    const uint64_t d = static_cast<uint64_t>(t[i] - '0');
    if (whole > (UINT64_MAX - d) / 10) overflow = true;
    else whole = whole * 10 + d;
    digits = true;
    ++i;
  }
  std::string fraction;
  if (i < t.size() && t[i] == '.') {
    ++i;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) {
      fraction.push_back(t[i]);
      digits = true;
      ++i;
    }
  }
  if (!digits) return InvalidArgument(quoted + " does not start with a number (such as 4GiB, 512MiB, 0)");
  const std::string unit = Lower(Trim(t.substr(i)));
  const uint64_t mult = UnitBytes(unit);
  if (mult == 0) {
    return InvalidArgument(quoted + " has unknown unit '" + std::string(Trim(t.substr(i))) +
                           "' (use B, KiB/K, MiB/M, GiB/G, TiB/T, PiB/P, EiB/E, or kB, MB, GB, TB, PB, EB)");
  }
  const std::string too_large = quoted + " is too large (at most " + FormatQuotaBytes(kMaxQuotaBytes) + ")";
  if (overflow || whole > kMaxQuotaBytes / mult) return InvalidArgument(too_large);
  uint64_t bytes = whole * mult;
  if (!fraction.empty()) {
    // Exact: fraction digits f of length n give f * mult / 10^n bytes.
    if (fraction.size() > 18) fraction.resize(18);  // beyond a byte of 1 EiB
    uint64_t f = 0, scale = 1;
    for (char c : fraction) {
      f = f * 10 + static_cast<uint64_t>(c - '0');
      scale *= 10;
    }
    // f * mult may overflow 64 bits: long double holds 64-bit mantissas.
    const long double part = static_cast<long double>(f) * static_cast<long double>(mult) /
                             static_cast<long double>(scale);
    const long double rounded = std::floor(part + 0.5L);
    if (std::fabs(part - rounded) > 1e-6L) {
      return InvalidArgument(quoted + " is not a whole number of bytes");
    }
    bytes += static_cast<uint64_t>(rounded);
  }
  if (bytes > kMaxQuotaBytes) return InvalidArgument(too_large);
  return bytes;
}

std::string FormatQuotaBytes(uint64_t bytes) {
  if (bytes == 0) return "unlimited";
  static const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int unit = -1;
  uint64_t v = bytes;
  while (unit < 5 && v % 1024 == 0) {
    v /= 1024;
    ++unit;
  }
  if (unit < 0) return std::to_string(bytes);
  return std::to_string(v) + kUnits[unit];
}

}  // namespace ptstore

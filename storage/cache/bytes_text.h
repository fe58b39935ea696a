// A byte count as text for the store's messages and logs: "12 B",
// "3.50 MiB", "1.25 GiB" (two decimals from a MiB on). Thread safety: a pure
// function.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

namespace ptstore::storage {

inline std::string BytesText(uint64_t b) {
  char buf[64];
  if (b >= (1ull << 30)) std::snprintf(buf, sizeof(buf), "%.2f GiB", b / double(1ull << 30));
  else if (b >= (1ull << 20)) std::snprintf(buf, sizeof(buf), "%.2f MiB", b / double(1ull << 20));
  else std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(b));
  return buf;
}

}  // namespace ptstore::storage

#include "ptstore/types.h"

#include <algorithm>
#include <chrono>

namespace ptstore {

void Times::Merge(const Times& o) {
  mtime_ns = std::max(mtime_ns, o.mtime_ns);
  atime_ns = std::max(atime_ns, o.atime_ns);
  ctime_ns = std::max(ctime_ns, o.ctime_ns);
}

uint64_t WallClockNs() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

const char* CacheClassName(CacheClass c) { return c == CacheClass::kReplica ? "replica" : "owned"; }

const char* TierName(uint8_t tier) {
  if ((tier & (kTierDram | kTierSsd)) == 0 && (tier & kTierRemote)) return "remote";
  switch (tier & (kTierDram | kTierSsd)) {
    case kTierDram: return "dram";
    case kTierSsd: return "ssd";
    case kTierDram | kTierSsd: return "dram+ssd";
    default: return "-";
  }
}

bool PrefixLocation::Holds(size_t i, uint32_t node) const {
  return std::find(spans[i].nodes.begin(), spans[i].nodes.end(), node) != spans[i].nodes.end();
}

uint64_t PrefixLocation::HeldBy(uint32_t node) const {
  uint64_t held = 0;
  for (size_t i = 0; i < spans.size() && Holds(i, node); ++i) held = spans[i].end_token;
  return held;
}

uint64_t PrefixLocation::TokensHeldBy(uint32_t node) const {
  uint64_t held = 0, start = 0;
  for (size_t i = 0; i < spans.size(); ++i) {
    if (Holds(i, node)) held += spans[i].end_token - start;
    start = spans[i].end_token;
  }
  return held;
}

}  // namespace ptstore

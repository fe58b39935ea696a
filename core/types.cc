#include "ptstore/types.h"

#include <algorithm>

namespace ptstore {

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

uint64_t PrefixLocation::HeldBy(uint32_t node) const {
  uint64_t held = 0;
  for (const PrefixSpan& s : spans) {
    if (std::find(s.nodes.begin(), s.nodes.end(), node) == s.nodes.end()) break;
    held = s.end_token;
  }
  return held;
}

}  // namespace ptstore

#include "ptstore/types.h"

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

}  // namespace ptstore

// What the SsdTier sources (ssd_tier.cc, ssd_tier_read.cc,
// ssd_tier_recovery.cc) share beyond storage/ssd/ssd_tier.h: how their
// messages name a place on disk. Internal to storage/ssd/.
//
// Thread safety: pure functions.
#pragma once

#include <cstdint>
#include <string>

#include "storage/ssd_format/record.h"

namespace ptstore::storage::ssd_detail {

// "seg-<16 hex digits>.pts offset N".
inline std::string Where(uint64_t segment, uint64_t offset) {
  return SegmentFileName(segment) + " offset " + std::to_string(offset);
}

}  // namespace ptstore::storage::ssd_detail

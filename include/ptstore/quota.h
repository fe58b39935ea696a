// Byte quotas per namespace, in DRAM and on SSD (ptstore(7) "QUOTAS").
//
// A namespace's quota on a node limits the bytes its increments take in that
// node's DRAM arena and in its SSD tier, each separately; 0 is no limit.
// Over its DRAM quota a namespace's saves (and reads back from SSD) make
// room by evicting that namespace's own increments by GDSF (spilling them to
// SSD where there is a tier), never another namespace's; over its SSD quota
// its own SSD records go. Only the namespace's owner or root may set it
// (Client::SetQuota). Quotas are per node, and persist with the SSD tier.
//
// Use is counted exactly: every block belongs to one namespace's one
// increment, and an increment's DRAM use is the arena bytes its tensor takes
// (rounded to the arena's alignment), its SSD use the footprint of its
// record (header and payload, padded to 4 KiB).
//
// Thread safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "ptstore/status.h"

namespace ptstore {

// The largest quota that can be set (1 EiB): more is a typo, not a limit.
inline constexpr uint64_t kMaxQuotaBytes = 1ull << 60;

// One namespace's quotas and use on one node.
struct NamespaceQuota {
  std::string ns;
  uint64_t dram_quota = 0;      // bytes; 0: no limit
  uint64_t ssd_quota = 0;       // bytes; 0: no limit
  uint64_t dram_bytes = 0;      // arena bytes its increments take now
  uint64_t ssd_bytes = 0;       // SSD tier bytes its increments' records take now
  uint64_t dram_evictions = 0;  // its increments evicted from DRAM to keep it under its DRAM quota
  uint64_t ssd_evictions = 0;   // its SSD records dropped to keep it under its SSD quota
  uint64_t cut_saves = 0;       // saves that stored less than asked (or nothing) because of its DRAM quota
  bool operator==(const NamespaceQuota&) const = default;
};

// What a SetQuota changes: each tier present is set (0: no limit), an
// absent one stays as it is.
struct QuotaChange {
  std::optional<uint64_t> dram;
  std::optional<uint64_t> ssd;
};

enum class QuotaTier : uint8_t { kDram = 1, kSsd = 2 };
const char* QuotaTierName(QuotaTier tier);  // "dram" / "ssd"
// "dram" or "ssd" (as in user.ptstore.quota.dram); InvalidArgument otherwise.
Result<QuotaTier> ParseQuotaTier(std::string_view text);

// A quota as people write it: a number (decimals allowed: "1.5GiB") and a
// unit: none or B (bytes); K, KiB, M, MiB, G, GiB, T, TiB, P, PiB, E, EiB
// (powers of 1024); kB, KB, MB, GB, TB, PB, EB (powers of 1000); units are case-blind
// ("4gib", "512mb"). "0", "none" and "unlimited" mean no limit. Spaces around
// the number and before the unit are allowed. InvalidArgument, quoting the
// text and saying what was wrong, for an empty text, a negative number, an
// unknown unit, a fraction of a byte left over ("0.5B"), or more than
// kMaxQuotaBytes.
Result<uint64_t> ParseQuotaBytes(std::string_view text);
// "unlimited" for 0, else the exact number of bytes when it is not a whole
// number of KiB, else the largest binary unit that divides it ("4GiB",
// "1536MiB"): ParseQuotaBytes(FormatQuotaBytes(b)) == b.
std::string FormatQuotaBytes(uint64_t bytes);

}  // namespace ptstore

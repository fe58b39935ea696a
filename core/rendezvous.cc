#include "core/rendezvous.h"

#include <xxhash.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <utility>

namespace ptstore::core {

static_assert(std::endian::native == std::endian::little, "weights hash little-endian fields as stored");

uint64_t RendezvousWeight(const ChainKey& root, uint32_t node_id) {
  uint8_t buf[20];
  std::memcpy(buf, &root.hi, 8);
  std::memcpy(buf + 8, &root.lo, 8);
  std::memcpy(buf + 16, &node_id, 4);
  return XXH3_64bits(buf, sizeof(buf));
}

namespace {
// True when (wa, a) ranks before (wb, b).
bool Before(uint64_t wa, uint32_t a, uint64_t wb, uint32_t b) { return wa != wb ? wa > wb : a < b; }
}  // namespace

std::vector<uint32_t> RendezvousOrder(const ChainKey& root, std::span<const uint32_t> node_ids) {
  std::vector<std::pair<uint64_t, uint32_t>> ranked;
  ranked.reserve(node_ids.size());
  for (uint32_t id : node_ids) ranked.emplace_back(RendezvousWeight(root, id), id);
  std::sort(ranked.begin(), ranked.end(),
            [](const auto& x, const auto& y) { return Before(x.first, x.second, y.first, y.second); });
  std::vector<uint32_t> out;
  out.reserve(ranked.size());
  for (const auto& r : ranked) out.push_back(r.second);
  return out;
}

uint32_t ShardOf(const ChainKey& root, std::span<const uint32_t> alive) {
  uint32_t best = kNoShard;
  uint64_t best_w = 0;
  for (uint32_t id : alive) {
    uint64_t w = RendezvousWeight(root, id);
    if (best == kNoShard || Before(w, id, best_w, best)) {
      best = id;
      best_w = w;
    }
  }
  return best;
}

}  // namespace ptstore::core

// tools/format.h: the JSON of the client API's value types (the
// conventions are at the top of format.h).
#include "tools/format.h"

namespace ptstore::tools {

// -------------------------------------------------------------------- JSON

Json RatioJson(std::optional<double> r) { return r ? Json(*r) : Json(nullptr); }

Json KeyJson(const ChainKey& key) {
  if (key == ChainKey{}) return nullptr;
  return key.ToHex();
}

Json ToJson(const LayoutGroup& g, uint64_t offset, uint64_t bytes_per_block) {
  Json j = {{"kind", std::string(GroupKindName(g.kind))}, {"layers", g.layers}};
  if (g.kind != GroupKind::kState) {
    j["kv_heads"] = g.kv_heads;
    j["head_dim"] = g.head_dim;
    j["dtype"] = std::string(DTypeName(g.dtype));
  }
  if (g.kind == GroupKind::kWindow) j["window_tokens"] = g.window_tokens;
  if (g.kind == GroupKind::kState) j["state_bytes"] = g.state_bytes;
  j["offset"] = offset;
  j["bytes_per_block"] = bytes_per_block;
  return j;
}

Json ToJson(const Layout& l) {
  // A dense layout keeps the object it always had; a grouped one has its
  // dense fields 0 (dtype "none") and a "groups" array besides.
  Json j = {{"layers", l.layers},
            {"kv_heads", l.kv_heads},
            {"head_dim", l.head_dim},
            {"dtype", std::string(DTypeName(l.dtype))},
            {"block_tokens", l.block_tokens},
            {"bytes_per_token", l.BytesPerToken()},
            {"bytes_per_block", l.BytesPerBlock()}};
  if (l.grouped()) {
    Json groups = Json::array();
    for (size_t i = 0; i < l.groups.size(); ++i) {
      groups.push_back(ToJson(l.groups[i], l.GroupOffset(i), l.GroupBytesPerBlock(i)));
    }
    j["groups"] = std::move(groups);
  }
  return j;
}

Json ToJson(const NamespaceInfo& i) {
  return {{"name", i.name},   {"layout", ToJson(i.layout)}, {"salted", i.salted},
          {"uid", i.uid},     {"gid", i.gid},               {"mode", OctalMode(i.mode)},
          {"bytes", i.bytes}, {"increments", i.prefixes},         {"mtime", EpochSeconds(i.times.mtime_ns)},
          {"atime", EpochSeconds(i.times.atime_ns)},                {"ctime", EpochSeconds(i.times.ctime_ns)}};
}

Json LocationsJson(const std::vector<IncrementLocation>& where) {
  Json j = Json::object();
  for (const IncrementLocation& l : where) j[l.key.ToHex()] = {{"owner", l.owner}, {"nodes", l.nodes}};
  return j;
}

Json ToJson(const PrefixNodeInfo& n) {
  return {{"key", KeyJson(n.key)},
          {"parent", KeyJson(n.parent)},
          {"start_token", n.start_token},
          {"tokens", n.tokens},
          {"bytes", n.bytes},
          {"hits", n.hits},
          {"class", CacheClassName(n.cache_class)},
          {"tier", TierName(n.tier)},
          {"pins", n.pins},
          {"children", n.children},
          {"mtime", EpochSeconds(n.times.mtime_ns)},
          {"atime", EpochSeconds(n.times.atime_ns)},
          {"ctime", EpochSeconds(n.times.ctime_ns)},
          // Split so that no number exceeds 2^53 (JavaScript, jq).
          {"tensor", {{"owner", n.tensor.owner().value}, {"seq", n.tensor.seq()}}}};
}

Json ToJson(const StoreStats& s) {
  return {{"arena_bytes", s.arena_bytes},
          {"used_bytes", s.used_bytes},
          {"owned_bytes", s.owned_bytes},
          {"replica_bytes", s.replica_bytes},
          {"pinned_bytes", s.pinned_bytes},
          {"tensors", s.tensors},
          {"increments", s.prefix_nodes},
          {"namespaces", s.namespaces},
          {"lookups", s.lookups},
          {"hits", s.hits},
          {"misses", s.misses},
          {"hit_rate", RatioJson(Ratio(s.hits, s.hits + s.misses))},
          {"hit_tokens", s.hit_tokens},
          {"requested_tokens", s.requested_tokens},
          {"token_hit_rate", RatioJson(Ratio(s.hit_tokens, s.requested_tokens))},
          {"saves", s.saves},
          {"saved_bytes", s.saved_bytes},
          {"dedup_bytes", s.dedup_bytes},
          {"dedup_ratio", RatioJson(Ratio(s.dedup_bytes, s.saved_bytes + s.dedup_bytes))},
          {"evictions", s.evictions},
          {"evicted_bytes", s.evicted_bytes},
          {"active_leases", s.active_leases},
          {"expired_leases", s.expired_leases},
          {"ssd_capacity", s.ssd_capacity},
          {"ssd_file_bytes", s.ssd_file_bytes},
          {"ssd_live_bytes", s.ssd_live_bytes},
          {"ssd_segments", s.ssd_segments},
          {"ssd_tensors", s.ssd_tensors},
          {"ssd_hits", s.ssd_hits},
          {"ssd_fills", s.ssd_fills},
          {"ssd_fill_bytes", s.ssd_fill_bytes},
          {"ssd_spills", s.ssd_spills},
          {"ssd_spill_bytes", s.ssd_spill_bytes},
          {"ssd_stored_bytes", s.ssd_stored_bytes},
          {"ssd_compression_ratio", RatioJson(CompressionRatio(s.ssd_spill_bytes, s.ssd_stored_bytes))},
          {"ssd_spill_failures", s.ssd_spill_failures},
          {"ssd_evictions", s.ssd_evictions},
          {"ssd_read_errors", s.ssd_read_errors},
          {"ssd_compactions", s.ssd_compactions},
          {"recovered_tensors", s.recovered_tensors},
          {"recovered_bytes", s.recovered_bytes},
          {"recovery_corrupt", s.recovery_corrupt},
          {"recovery_dropped", s.recovery_dropped},
          {"remote_tensors", s.remote_tensors},
          {"remote_hits", s.remote_hits},
          {"remote_fetches", s.remote_fetches},
          {"remote_fetch_bytes", s.remote_fetch_bytes},
          {"remote_fetch_failures", s.remote_fetch_failures},
          {"replicas_kept", s.replicas_kept},
          {"peer_served_bytes", s.peer_served_bytes},
          {"dram_hits", s.dram_hits}};
}

Json ToJson(const TreeSummary& t) {
  return {{"increments", t.increments},       {"tokens", t.tokens},
          {"bytes", t.bytes},                 {"hits", t.hits},
          {"owned_bytes", t.owned_bytes},     {"replica_bytes", t.replica_bytes},
          {"remote_bytes", t.remote_bytes},
          {"pinned_increments", t.pinned_increments}, {"longest_prefix_tokens", t.max_depth_tokens},
          {"prefixes", t.leaves}};
}

}  // namespace ptstore::tools

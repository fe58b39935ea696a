// tools/format.h: ptstore-stat's reports, as text (RenderStats,
// RenderIncrementReport, TokenIdsText: "label  value" lines) and as JSON
// (StatsReportJson, IncrementReportJson).
#include "tools/format.h"

#include <algorithm>
#include <string_view>
#include <utility>

namespace ptstore::tools {

namespace {

// "label  value" lines, the values in one column whatever the labels (at
// least as wide as "pinned increments", so that scripts may cut them at a
// fixed offset); a blank line before each row index in section_starts.
std::string RenderLabelled(const std::vector<std::pair<std::string, std::string>>& rows,
                           const std::vector<size_t>& section_starts) {
  size_t width = std::string_view("pinned increments").size();
  for (const auto& [label, value] : rows) width = std::max(width, label.size());
  std::string out;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (std::find(section_starts.begin(), section_starts.end(), r) != section_starts.end()) out += "\n";
    out += rows[r].first;
    out.append(width + 2 - rows[r].first.size(), ' ');
    out += rows[r].second;
    out += "\n";
  }
  return out;
}

}  // namespace

std::string RenderStats(uint32_t node_id, const StoreStats& s, const std::optional<NamespaceReport>& ns) {
  std::vector<std::pair<std::string, std::string>> rows;
  auto add = [&](std::string label, std::string value) { rows.emplace_back(std::move(label), std::move(value)); };
  auto num = [](uint64_t v) { return std::to_string(v); };
  add("node", num(node_id));
  add("arena size", HumanBytes(s.arena_bytes));
  add("arena used", HumanBytes(s.used_bytes) + " (" + Percent(Ratio(s.used_bytes, s.arena_bytes)) + ")");
  add("arena owned", HumanBytes(s.owned_bytes));
  add("arena replica", HumanBytes(s.replica_bytes));
  add("arena pinned", HumanBytes(s.pinned_bytes));
  add("namespaces", num(s.namespaces));
  add("tensors", num(s.tensors));
  add("increments", num(s.prefix_nodes));
  add("lookups", num(s.lookups));
  add("hits", num(s.hits));
  add("misses", num(s.misses));
  add("hit rate", Percent(Ratio(s.hits, s.hits + s.misses)));
  add("hit tokens",
      num(s.hit_tokens) + " of " + num(s.requested_tokens) + " (" + Percent(Ratio(s.hit_tokens, s.requested_tokens)) +
          ")");
  add("saves", num(s.saves));
  add("saved bytes", HumanBytes(s.saved_bytes));
  add("dedup saving", HumanBytes(s.dedup_bytes) + " (" +
                          Percent(Ratio(s.dedup_bytes, s.saved_bytes + s.dedup_bytes)) + " of bytes offered)");
  add("evictions", num(s.evictions) + " (" + HumanBytes(s.evicted_bytes) + ")");
  add("active leases", num(s.active_leases));
  add("expired leases", num(s.expired_leases));
  // Each section after the first starts after a blank line.
  std::vector<size_t> section_starts;
  if (s.ssd_capacity > 0) {
    // Labels no wider than "pinned increments": the value column stays put.
    section_starts.push_back(rows.size());
    add("ssd capacity", HumanBytes(s.ssd_capacity));
    add("ssd file bytes",
        HumanBytes(s.ssd_file_bytes) + " (" + Percent(Ratio(s.ssd_file_bytes, s.ssd_capacity)) + ")");
    add("ssd live bytes",
        HumanBytes(s.ssd_live_bytes) + " (" + Percent(Ratio(s.ssd_live_bytes, s.ssd_file_bytes)) + " of file bytes)");
    add("ssd segments", num(s.ssd_segments));
    add("ssd tensors", num(s.ssd_tensors));
    add("ssd hits", num(s.ssd_hits));
    add("ssd fills", num(s.ssd_fills) + " (" + HumanBytes(s.ssd_fill_bytes) + ")");
    add("ssd spills", num(s.ssd_spills) + " (" + HumanBytes(s.ssd_spill_bytes) + ", stored in " +
                          HumanBytes(s.ssd_stored_bytes) + ")");
    add("ssd compression", CompressionRatioText(s.ssd_spill_bytes, s.ssd_stored_bytes));
    add("ssd failed spills", num(s.ssd_spill_failures));
    add("ssd evictions", num(s.ssd_evictions));
    add("ssd read errors", num(s.ssd_read_errors));
    add("ssd compactions", num(s.ssd_compactions));
    add("recovered tensors", num(s.recovered_tensors) + " (" + HumanBytes(s.recovered_bytes) + ")");
    add("recovery corrupt", num(s.recovery_corrupt));
    add("recovery dropped", num(s.recovery_dropped));
  }
  if (s.remote_tensors > 0 || s.remote_fetches > 0 || s.peer_served_bytes > 0) {
    section_starts.push_back(rows.size());
    add("remote increments", num(s.remote_tensors));
    add("remote hits", num(s.remote_hits));
    add("remote fetches", num(s.remote_fetches) + " (" + HumanBytes(s.remote_fetch_bytes) + ")");
    add("failed fetches", num(s.remote_fetch_failures));
    add("replicas kept", num(s.replicas_kept));
    add("served to peers", HumanBytes(s.peer_served_bytes));
  }
  if (ns) {
    section_starts.push_back(rows.size());
    const NamespaceInfo& i = ns->info;
    add("namespace", i.name);
    add("layout", i.layout.ToString());
    if (i.layout.grouped()) {
      // One row per group: its text form, where it sits in a block and its
      // bytes there (the rest of the block is padding).
      for (size_t g = 0; g < i.layout.groups.size(); ++g) {
        add("group " + num(g), i.layout.groups[g].ToString() + " (" + num(i.layout.GroupBytesPerBlock(g)) +
                                   " bytes per block at byte " + num(i.layout.GroupOffset(g)) + ")");
      }
      add("bytes per block", HumanBytes(i.layout.BytesPerBlock()) + " (" + num(i.layout.BytesPerBlock()) + ")");
    }
    add("bytes per token", HumanBytes(i.layout.BytesPerToken()));
    add("owner", num(i.uid) + ":" + num(i.gid));
    add("mode", OctalMode(i.mode) + " (" + SymbolicMode(i.mode) + ")");
    add("salted", i.salted ? "yes" : "no");
    add("stored bytes", HumanBytes(i.bytes) + " (" + Percent(Ratio(i.bytes, s.used_bytes)) + " of arena used)");
    add("stored increments", num(i.prefixes));
    if (ns->tree) {
      const TreeSummary& t = *ns->tree;
      add("stored tokens", num(t.tokens));
      add("stored prefixes", num(t.leaves) + " (increments without children)");
      add("longest prefix", num(t.max_depth_tokens) + " tokens");
      add("increment hits", num(t.hits));
      add("owned bytes", HumanBytes(t.owned_bytes));
      add("replica bytes", HumanBytes(t.replica_bytes));
      if (t.remote_bytes > 0) add("remote bytes", HumanBytes(t.remote_bytes) + " (held by other nodes)");
      add("pinned increments", num(t.pinned_increments));
    }
  }
  return RenderLabelled(rows, section_starts);
}

std::string TokenIdsText(const std::vector<uint32_t>& ids, size_t max_shown) {
  max_shown = std::max<size_t>(max_shown, 2);
  std::string out;
  auto append = [&](size_t from, size_t to) {
    for (size_t i = from; i < to; ++i) {
      if (!out.empty()) out += ' ';
      out += std::to_string(ids[i]);
    }
  };
  if (ids.size() <= max_shown) {
    append(0, ids.size());
    return out;
  }
  const size_t tail = std::max<size_t>(max_shown / 4, 1);
  append(0, max_shown - tail);
  out += " ...";
  append(ids.size() - tail, ids.size());
  return out + " (" + std::to_string(ids.size()) + " ids)";
}

std::string RenderIncrementReport(const NamespaceInfo& ns, const IncrementInfo& inc) {
  const PrefixNodeInfo& n = inc.node;
  const uint64_t end = n.start_token + n.tokens;
  std::vector<std::pair<std::string, std::string>> rows;
  auto add = [&](std::string label, std::string value) { rows.emplace_back(std::move(label), std::move(value)); };
  auto num = [](uint64_t v) { return std::to_string(v); };
  add("namespace", ns.name);
  add("key", n.key.ToHex());
  add("parent", n.parent == ChainKey{} ? "none (a top increment)" : n.parent.ToHex());
  add("tokens", num(n.tokens) + " (tokens " + num(n.start_token) + ".." + num(end == 0 ? 0 : end - 1) +
                    " of its prefix)");
  add("bytes", HumanBytes(n.bytes) + " (" + num(n.bytes) + ")");
  add("prefix", num(end) + " tokens, " + HumanBytes(end * ns.layout.BytesPerToken()) +
                    " (this increment and its ancestors)");
  add("hits", num(n.hits));
  add("owner", "node " + num(n.tensor.owner().value));
  add("tensor", "node " + num(n.tensor.owner().value) + " seq " + num(n.tensor.seq()));
  add("class", CacheClassName(n.cache_class));
  add("tier", TierName(n.tier));
  add("pins", num(n.pins));
  add("children", num(n.children));
  add("token ids", TokenIdsText(inc.tokens));
  return RenderLabelled(rows, {});
}

Json StatsReportJson(uint32_t node_id, const StoreStats& stats, const std::optional<NamespaceReport>& ns) {
  Json j = {{"node_id", node_id}, {"stats", ToJson(stats)}};
  if (ns) {
    Json n = ToJson(ns->info);
    n["tree"] = ns->tree ? ToJson(*ns->tree) : Json(nullptr);
    j["namespace"] = std::move(n);
  }
  return j;
}

Json IncrementReportJson(uint32_t node_id, const NamespaceInfo& ns, const IncrementInfo& inc) {
  const PrefixNodeInfo& n = inc.node;
  Json i = ToJson(n);
  i["prefix_tokens"] = n.start_token + n.tokens;
  i["prefix_bytes"] = (n.start_token + n.tokens) * ns.layout.BytesPerToken();
  i["token_ids"] = inc.tokens;
  return {{"node_id", node_id}, {"namespace", ToJson(ns)}, {"increment", std::move(i)}};
}

}  // namespace ptstore::tools

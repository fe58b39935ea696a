#include "tools/format.h"

#include <algorithm>
#include <cctype>
#include <cinttypes>
#include <cstdio>
#include <ctime>
#include <functional>
#include <string_view>
#include <unordered_map>

namespace ptstore::tools {

// ------------------------------------------------------------------ values

std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return std::to_string(bytes) + " B";
  size_t unit = 0;
  double v = static_cast<double>(bytes);
  while (v >= 1024.0 && unit + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++unit;
  }
  // 1048575 bytes is 1023.999 KiB: printed with one decimal that would be
  // "1024.0 KiB"; show "1.0 MiB" instead.
  if (v >= 1023.95 && unit + 1 < std::size(kUnits)) {
    v /= 1024.0;
    ++unit;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f %s", v, kUnits[unit]);
  return buf;
}

std::string OctalMode(uint32_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04o", mode & 07777);
  return buf;
}

std::string SymbolicMode(uint32_t mode) {
  std::string s = "rwxrwxrwx";
  for (int i = 0; i < 9; ++i) {
    if (!(mode & (0400u >> i))) s[i] = '-';
  }
  return s;
}

std::optional<double> Ratio(uint64_t part, uint64_t whole) {
  if (whole == 0) return std::nullopt;
  return static_cast<double>(part) / static_cast<double>(whole);
}

std::string Percent(std::optional<double> ratio) {
  if (!ratio) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f%%", *ratio * 100.0);
  return buf;
}

std::optional<double> CompressionRatio(uint64_t logical_bytes, uint64_t stored_bytes) {
  return Ratio(logical_bytes, stored_bytes);
}

std::string CompressionRatioText(uint64_t logical_bytes, uint64_t stored_bytes) {
  std::optional<double> r = CompressionRatio(logical_bytes, stored_bytes);
  if (!r) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2fx", *r);
  return buf;
}

const char* TimeFieldName(TimeField f) {
  switch (f) {
    case TimeField::kAtime: return "atime";
    case TimeField::kCtime: return "ctime";
    case TimeField::kMtime: break;
  }
  return "mtime";
}

uint64_t TimeOf(const Times& t, TimeField f) {
  switch (f) {
    case TimeField::kAtime: return t.atime_ns;
    case TimeField::kCtime: return t.ctime_ns;
    case TimeField::kMtime: break;
  }
  return t.mtime_ns;
}

std::string LocalTime(uint64_t ns) {
  if (ns == 0) return "-";
  const time_t secs = static_cast<time_t>(ns / 1000000000);
  struct tm tm {};
  localtime_r(&secs, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S", &tm);
  return buf;
}

double EpochSeconds(uint64_t ns) {
  return static_cast<double>(ns / 1000) / 1e6;  // whole microseconds: exact in a double until year 2255
}

size_t DisplayWidth(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) != 0x80) ++n;  // count every byte that starts a code point
  }
  return n;
}

// ------------------------------------------------------------------ tables

void Table::AddRow(std::vector<std::string> cells) {
  cells.resize(columns_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::Render(bool with_header) const {
  const size_t n = columns_.size();
  std::vector<size_t> width(n, 0);
  if (with_header) {
    for (size_t c = 0; c < n; ++c) width[c] = DisplayWidth(columns_[c].header);
  }
  for (const auto& row : rows_) {
    for (size_t c = 0; c < n; ++c) width[c] = std::max(width[c], DisplayWidth(row[c]));
  }
  std::string out;
  auto line = [&](const std::vector<std::string>& cells) {
    std::string l;
    for (size_t c = 0; c < n; ++c) {
      if (c > 0) l += "  ";
      const size_t pad = width[c] - DisplayWidth(cells[c]);
      if (columns_[c].align == Align::kRight) {
        l.append(pad, ' ');
        l += cells[c];
      } else {
        l += cells[c];
        if (c + 1 < n) l.append(pad, ' ');
      }
    }
    while (!l.empty() && l.back() == ' ') l.pop_back();
    out += l;
    out += '\n';
  };
  if (with_header) {
    std::vector<std::string> header;
    for (const auto& col : columns_) header.push_back(col.header);
    line(header);
  }
  for (const auto& row : rows_) line(row);
  return out;
}

// ------------------------------------------------------------------ trees

namespace {

struct Forest {
  std::vector<size_t> roots;
  std::vector<std::vector<size_t>> children;
};

// Children keep the order of the input (the server lists them by key).
Forest BuildForest(const std::vector<PrefixNodeInfo>& nodes, const ChainKey& root) {
  Forest f;
  f.children.resize(nodes.size());
  std::unordered_map<ChainKey, size_t, ChainKeyHash> by_key;
  for (size_t i = 0; i < nodes.size(); ++i) by_key.emplace(nodes[i].key, i);
  for (size_t i = 0; i < nodes.size(); ++i) {
    const ChainKey& p = nodes[i].parent;
    auto it = p == root || p == nodes[i].key ? by_key.end() : by_key.find(p);
    if (it == by_key.end()) {
      f.roots.push_back(i);
    } else {
      f.children[it->second].push_back(i);
    }
  }
  return f;
}

// Pre-order walk; nodes caught in a parent cycle (never reachable from a
// root: only a corrupt answer has them) are visited as extra roots.
void WalkForest(const Forest& f, const std::function<void(size_t index, size_t depth,
                                                          const std::vector<bool>& last_at_depth)>& visit) {
  std::vector<bool> seen(f.children.size(), false);
  std::vector<bool> last;  // last[d]: the ancestor at depth d is its parent's last child
  std::function<void(size_t, size_t, bool)> walk = [&](size_t i, size_t depth, bool is_last) {
    if (seen[i]) return;
    seen[i] = true;
    last.resize(depth + 1);
    last[depth] = is_last;
    visit(i, depth, last);
    const auto& c = f.children[i];
    for (size_t k = 0; k < c.size(); ++k) walk(c[k], depth + 1, k + 1 == c.size());
  };
  for (size_t k = 0; k < f.roots.size(); ++k) walk(f.roots[k], 0, k + 1 == f.roots.size());
  for (size_t i = 0; i < f.children.size(); ++i) walk(i, 0, true);
}

}  // namespace

std::vector<TreeLine> LayoutTree(const std::vector<PrefixNodeInfo>& nodes, const ChainKey& root, TreeStyle style) {
  const bool u = style == TreeStyle::kUnicode;
  const std::string tee = u ? "\u251c\u2500\u2500 " : "|-- ";
  const std::string elbow = u ? "\u2514\u2500\u2500 " : "`-- ";
  const std::string pipe = u ? "\u2502   " : "|   ";
  const std::string blank = "    ";
  std::vector<TreeLine> out;
  Forest f = BuildForest(nodes, root);
  WalkForest(f, [&](size_t i, size_t depth, const std::vector<bool>& last) {
    TreeLine line;
    line.index = i;
    line.depth = depth;
    // Depth 0 hangs from the (invisible) root: no glyph. Below it, one
    // column per ancestor that is not at depth 0, then this node's branch.
    for (size_t d = 1; d < depth; ++d) line.prefix += last[d] ? blank : pipe;
    if (depth > 0) line.prefix += last[depth] ? elbow : tee;
    out.push_back(std::move(line));
  });
  return out;
}

// --------------------------------------------------------------- rendering

namespace {
std::string TimeHeader(TimeField f) {
  std::string h = TimeFieldName(f);
  for (char& c : h) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return h;
}
}  // namespace

std::string RenderNamespaces(const std::vector<NamespaceInfo>& namespaces, bool long_format, TimeField time) {
  if (!long_format) {
    std::string out;
    for (const auto& ns : namespaces) out += ns.name + "\n";
    return out;
  }
  using A = Table::Align;
  // The layout is long: last, so that the short columns line up.
  Table t({{"NAME"}, {"OWNER"}, {"MODE"}, {"BYTES", A::kRight}, {"INCREMENTS", A::kRight}, {TimeHeader(time)},
           {"LAYOUT"}});
  for (const auto& ns : namespaces) {
    t.AddRow({ns.name + (ns.salted ? " (salted)" : ""), std::to_string(ns.uid) + ":" + std::to_string(ns.gid),
              SymbolicMode(ns.mode), HumanBytes(ns.bytes), std::to_string(ns.prefixes),
              LocalTime(TimeOf(ns.times, time)), ns.layout.ToString()});
  }
  return t.rows() ? t.Render() : "";
}

namespace {

std::string NodeList(const std::vector<uint32_t>& nodes) {
  std::string out;
  for (uint32_t n : nodes) out += (out.empty() ? "" : ",") + std::to_string(n);
  return out.empty() ? "-" : out;
}

Table IncrementTable(bool where, TimeField time) {
  using A = Table::Align;
  std::vector<Table::Column> cols = {{"KEY"},
                {"START", A::kRight},
                {"TOKENS", A::kRight},
                {"BYTES", A::kRight},
                {"HITS", A::kRight},
                {"OWNER", A::kRight},
                {"CLASS"},
                {"TIER"},
                {"PINS", A::kRight},
                {"CHILDREN", A::kRight},
                {TimeHeader(time), A::kRight}};  // right: every row as wide as the header
  if (where) cols.push_back({"NODES"});
  return Table(cols);
}

std::vector<std::string> IncrementRow(const std::string& name, const PrefixNodeInfo& n,
                                      const IncrementLocation* where, TimeField time) {
  std::vector<std::string> row = {name,
          std::to_string(n.start_token),
          std::to_string(n.tokens),
          HumanBytes(n.bytes),
          std::to_string(n.hits),
          std::to_string(n.tensor.owner().value),
          CacheClassName(n.cache_class),
          TierName(n.tier),
          std::to_string(n.pins),
          std::to_string(n.children),
          LocalTime(TimeOf(n.times, time))};
  if (where) row.push_back(NodeList(where->nodes));
  return row;
}

}  // namespace

std::string RenderIncrements(const std::vector<PrefixNodeInfo>& nodes, bool long_format,
                             const std::vector<IncrementLocation>* where, TimeField time) {
  if (!long_format) {
    std::string out;
    for (const auto& n : nodes) out += n.key.ToHex() + "\n";
    return out;
  }
  Table t = IncrementTable(where != nullptr, time);
  for (size_t i = 0; i < nodes.size(); ++i) {
    t.AddRow(IncrementRow(nodes[i].key.ToHex(), nodes[i], where ? &(*where)[i] : nullptr, time));
  }
  return t.rows() ? t.Render() : "";
}

std::string RenderTree(const std::vector<PrefixNodeInfo>& nodes, const ChainKey& root, bool long_format,
                       TreeStyle style, const std::vector<IncrementLocation>* where, TimeField time) {
  std::vector<TreeLine> lines = LayoutTree(nodes, root, style);
  if (!long_format) {
    std::string out;
    for (const auto& l : lines) out += l.prefix + nodes[l.index].key.ToHex() + "\n";
    return out;
  }
  Table t = IncrementTable(where != nullptr, time);
  for (const auto& l : lines) {
    t.AddRow(IncrementRow(l.prefix + nodes[l.index].key.ToHex(), nodes[l.index],
                          where ? &(*where)[l.index] : nullptr, time));
  }
  return t.rows() ? t.Render() : "";
}

TreeSummary Summarize(const std::vector<PrefixNodeInfo>& nodes) {
  TreeSummary s;
  for (const auto& n : nodes) {
    s.increments++;
    s.tokens += n.tokens;
    s.bytes += n.bytes;
    s.hits += n.hits;
    if ((n.tier & (kTierDram | kTierSsd)) == 0 && (n.tier & kTierRemote)) {
      s.remote_bytes += n.bytes;
    } else {
      (n.cache_class == CacheClass::kReplica ? s.replica_bytes : s.owned_bytes) += n.bytes;
    }
    if (n.pins > 0) s.pinned_increments++;
    if (n.children == 0) s.leaves++;
    s.max_depth_tokens = std::max(s.max_depth_tokens, n.start_token + n.tokens);
  }
  return s;
}

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

namespace {
const char* StateName(MemberState s) {
  switch (s) {
    case MemberState::kSelf: return "self";
    case MemberState::kAlive: return "alive";
    case MemberState::kSuspect: return "suspect";
    case MemberState::kDead: return "dead";
  }
  return "?";
}
}  // namespace

std::string RenderCluster(const ClusterStatus& c) {
  using A = Table::Align;
  std::string out = "cluster: " + std::to_string(c.members.size()) + " nodes, loads over " + c.data_path +
                    (c.fabric_provider.empty() ? "" : " (" + c.fabric_provider + ")") + "\n";
  Table t({{"ID", A::kRight}, {"ADDRESS"}, {"STATE"}, {"RTT", A::kRight}, {"SEEN", A::kRight},
           {"ARENA", A::kRight}, {"USED", A::kRight}, {"OWNED", A::kRight}, {"REPLICA", A::kRight}});
  for (const ClusterMember& m : c.members) {
    const bool known = m.state == MemberState::kSelf || m.incarnation != 0;
    t.AddRow({std::to_string(m.id), m.address, StateName(m.state),
              m.state == MemberState::kSelf || !known ? "-" : std::to_string(m.rtt_us) + "us",
              m.state == MemberState::kSelf ? "-" : (known ? std::to_string(m.last_seen_ms) + "ms ago" : "never"),
              known ? HumanBytes(m.arena_bytes) : "-", known ? HumanBytes(m.used_bytes) : "-",
              known ? HumanBytes(m.owned_bytes) : "-", known ? HumanBytes(m.replica_bytes) : "-"});
  }
  return out + t.Render();
}

Json ToJson(const ClusterStatus& c) {
  Json members = Json::array();
  for (const ClusterMember& m : c.members) {
    members.push_back({{"id", m.id},
                       {"address", m.address},
                       {"state", StateName(m.state)},
                       {"incarnation", m.incarnation},
                       {"rtt_us", m.rtt_us},
                       {"last_seen_ms", m.last_seen_ms},
                       {"arena_bytes", m.arena_bytes},
                       {"used_bytes", m.used_bytes},
                       {"owned_bytes", m.owned_bytes},
                       {"replica_bytes", m.replica_bytes}});
  }
  return {{"self", c.self_id}, {"data_path", c.data_path}, {"fabric_provider", c.fabric_provider},
          {"members", members}};
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

Json TreeJson(const std::vector<PrefixNodeInfo>& nodes, const ChainKey& root) {
  Forest f = BuildForest(nodes, root);
  std::vector<bool> seen(nodes.size(), false);
  std::function<Json(size_t)> build = [&](size_t i) {
    seen[i] = true;
    Json j = ToJson(nodes[i]);
    Json sub = Json::array();
    for (size_t c : f.children[i]) {
      if (!seen[c]) sub.push_back(build(c));
    }
    j["subtree"] = std::move(sub);
    return j;
  };
  Json out = Json::array();
  for (size_t r : f.roots) {
    if (!seen[r]) out.push_back(build(r));
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (!seen[i]) out.push_back(build(i));
  }
  return out;
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

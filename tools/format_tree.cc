// tools/format.h: the increment tree (LayoutTree, TreeJson), the listings
// of ptstore-ls (RenderNamespaces, RenderIncrements, RenderTree) and
// Summarize. A flat ListTree answer becomes a forest once, here; both the
// text tree and the nested JSON walk it.
#include "tools/format.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <unordered_map>

namespace ptstore::tools {

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

}  // namespace ptstore::tools

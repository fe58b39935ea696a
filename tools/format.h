// Formatting for the PTStore command-line tools (ptstore-ls, ptstore-stat):
// human-readable sizes, aligned tables, the increment tree, and the JSON
// form of the client API's value types.
//
// Everything here is pure (no I/O, no client), so it is unit-tested on its
// own (tests/tools/format_test.cc).
// One .cc file a section: format.cc (values, tables), format_tree.cc (trees
// and listings), format_report.cc (ptstore-stat's reports), format_json.cc
// and format_cluster.cc.
//
// JSON conventions (the --json output of every tool):
//   - byte counts, token counts and counters are exact integers;
//   - chain keys are 32 lowercase hex digits; a zero key (the namespace
//     root) is null;
//   - modes are octal strings ("0755");
//   - ratios are numbers in [0, 1], or null when undefined (0 / 0); the one
//     exception, a compression ratio (logical bytes / stored bytes), is a
//     positive number (2.0: half the size), or null when nothing is stored;
//   - a tier is "dram", "ssd", "dram+ssd" (TierName).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptstore/keys.h"
#include "ptstore/layout.h"
#include "ptstore/types.h"

namespace ptstore::tools {

// Keys keep the order they are written in (the most useful first).
using Json = nlohmann::ordered_json;

// ------------------------------------------------------------------ values

// Binary units with one decimal: "0 B", "1023 B", "1.0 KiB", "2.0 MiB",
// "1.5 GiB" (up to EiB). Rounding never shows "1024.0" of a unit.
std::string HumanBytes(uint64_t bytes);

// "0755"
std::string OctalMode(uint32_t mode);
// "rwxr-xr-x" (the low nine bits)
std::string SymbolicMode(uint32_t mode);

// part / whole, or nullopt when whole is 0.
std::optional<double> Ratio(uint64_t part, uint64_t whole);
// "75.0%", or "n/a" for nullopt.
std::string Percent(std::optional<double> ratio);

// logical / stored (e.g. 2.0 when compression halved the bytes), or nullopt
// when nothing is stored.
std::optional<double> CompressionRatio(uint64_t logical_bytes, uint64_t stored_bytes);
// "2.00x", or "n/a".
std::string CompressionRatioText(uint64_t logical_bytes, uint64_t stored_bytes);

// Which of an increment's times a listing shows and sorts by (ptstore-ls
// --time; ptstore(7) "Times").
enum class TimeField { kMtime, kAtime, kCtime };
const char* TimeFieldName(TimeField f);  // "mtime", "atime", "ctime"
uint64_t TimeOf(const Times& t, TimeField f);
// "2026-12-02 18:00:45" in local time, or "-" for 0 (not known).
std::string LocalTime(uint64_t ns);
// Seconds since the epoch with microseconds, for JSON (nanoseconds since the
// epoch are past 2^53, the integers JSON readers such as jq keep exact).
double EpochSeconds(uint64_t ns);

// Display width of a UTF-8 string (code points; the tree glyphs are one
// column wide).
size_t DisplayWidth(const std::string& s);

// ------------------------------------------------------------------ tables

// Columns separated by two spaces; the header and every cell padded to the
// widest cell of its column; right-aligned columns for numbers. The last
// column is never padded (no trailing spaces).
class Table {
 public:
  enum class Align { kLeft, kRight };
  struct Column {
    std::string header;
    Align align = Align::kLeft;
  };
  explicit Table(std::vector<Column> columns) : columns_(std::move(columns)) {}
  // REQUIRES: cells.size() == number of columns.
  void AddRow(std::vector<std::string> cells);
  size_t rows() const { return rows_.size(); }
  // Every row ends in '\n'; with_header adds the header line first.
  std::string Render(bool with_header = true) const;

 private:
  std::vector<Column> columns_;
  std::vector<std::vector<std::string>> rows_;
};

// ------------------------------------------------------------------ trees

// Glyphs of an indented tree: Unicode box drawing ("├── ") or ASCII ("|-- ").
enum class TreeStyle { kAscii, kUnicode };

// A forest built from a flat ListTree answer: node indices in pre-order,
// with their depth (0 = child of `root`) and the prefix to draw before each
// node's name. A node whose parent is not in the list hangs from the root.
struct TreeLine {
  size_t index = 0;  // into the nodes given
  size_t depth = 0;
  std::string prefix;  // e.g. "|   `-- "
};
std::vector<TreeLine> LayoutTree(const std::vector<PrefixNodeInfo>& nodes, const ChainKey& root, TreeStyle style);

// --------------------------------------------------------------- rendering

// ptstore-ls with no namespace. Short: one name per line. Long: a table of
// NAME OWNER MODE BYTES INCREMENTS <TIME> LAYOUT (bytes human-readable;
// TIME: the `time` field of the namespace's times, headed MTIME, ATIME or
// CTIME).
std::string RenderNamespaces(const std::vector<NamespaceInfo>& namespaces, bool long_format,
                             TimeField time = TimeField::kMtime);

// Increments as a flat list (short: one key per line; long: a table of
// KEY START TOKENS BYTES HITS OWNER CLASS TIER PINS CHILDREN <TIME>; OWNER
// is the id of the node that owns the increment's tensor,
// TensorId::owner(); TIME as in RenderNamespaces). With `where` (one
// location per node, in order), the long format gets a NODES column: the
// nodes holding each increment's bytes, the owner first.
std::string RenderIncrements(const std::vector<PrefixNodeInfo>& nodes, bool long_format,
                             const std::vector<IncrementLocation>* where = nullptr,
                             TimeField time = TimeField::kMtime);

// Increments as an indented tree below `root` (short: keys only; long: the
// table of RenderIncrements with the tree drawn in the KEY column).
// Siblings keep the order of `nodes`.
std::string RenderTree(const std::vector<PrefixNodeInfo>& nodes, const ChainKey& root, bool long_format,
                       TreeStyle style, const std::vector<IncrementLocation>* where = nullptr,
                       TimeField time = TimeField::kMtime);

// The aggregate of a namespace's increments (from a recursive ListTree).
struct TreeSummary {
  uint64_t increments = 0;
  uint64_t tokens = 0;  // sum of the increments' tokens (stored tokens)
  uint64_t bytes = 0;
  uint64_t hits = 0;
  uint64_t owned_bytes = 0;
  uint64_t replica_bytes = 0;
  uint64_t remote_bytes = 0;      // increments other nodes hold that this node knows (no bytes here)
  uint64_t pinned_increments = 0;
  uint64_t max_depth_tokens = 0;  // longest stored prefix, in tokens
  uint64_t leaves = 0;            // increments without children: the distinct longest prefixes
};
TreeSummary Summarize(const std::vector<PrefixNodeInfo>& nodes);

// What ptstore-stat shows about one namespace.
struct NamespaceReport {
  NamespaceInfo info;
  std::optional<TreeSummary> tree;  // absent if the tree could not be listed
};

// ptstore-stat's text: "label  value" lines, labels padded to one column;
// the SSD tier's section only on a node with one (ssd_capacity > 0).
std::string RenderStats(uint32_t node_id, const StoreStats& stats, const std::optional<NamespaceReport>& ns);

// ptstore-stat NAMESPACE --key KEY: one increment ("label  value" lines, in
// the column of RenderStats). Token ids: all of them up to 16, else the
// first 12, "...", the last 4 and their count (TokenIdsText).
std::string RenderIncrementReport(const NamespaceInfo& ns, const IncrementInfo& inc);

// "1 2 3", or when there are more than `max_shown`: the first
// max_shown - max_shown/4, " ...", the last max_shown/4 and " (N ids)".
std::string TokenIdsText(const std::vector<uint32_t>& ids, size_t max_shown = 16);

// -------------------------------------------------------------------- JSON

Json KeyJson(const ChainKey& key);  // hex, or null for the zero key
Json RatioJson(std::optional<double> ratio);  // the number, or null for nullopt
// A layout: {layers, kv_heads, head_dim, dtype, block_tokens, bytes_per_token,
// bytes_per_block}; a grouped one also "groups": [{kind, layers, kv_heads,
// head_dim, dtype (not for state), window_tokens (window), state_bytes
// (state), offset, bytes_per_block}] (its dense fields are 0, dtype "none").
Json ToJson(const Layout& layout);
Json ToJson(const LayoutGroup& group, uint64_t offset, uint64_t bytes_per_block);
Json ToJson(const NamespaceInfo& info);
Json ToJson(const PrefixNodeInfo& node);
// {"<key hex>": {"owner": N, "nodes": [...]}, ...}
Json LocationsJson(const std::vector<IncrementLocation>& where);
// Every counter (the SSD ones too, 0 without a tier) plus hit_rate,
// token_hit_rate, dedup_ratio and ssd_compression_ratio.
Json ToJson(const StoreStats& stats);
// The members of the cluster as a table (ID ADDRESS STATE RTT SEEN ARENA
// USED OWNED REPLICA), after a "cluster:" line with the data path.
std::string RenderCluster(const ClusterStatus& cluster);
Json ToJson(const ClusterStatus& cluster);
Json ToJson(const TreeSummary& summary);

// The increments below `root` nested: each node's object gets "subtree", the
// array of its children's objects.
Json TreeJson(const std::vector<PrefixNodeInfo>& nodes, const ChainKey& root);

// ptstore-stat --json: {"node_id", "stats", "namespace"?}.
Json StatsReportJson(uint32_t node_id, const StoreStats& stats, const std::optional<NamespaceReport>& ns);

// ptstore-stat NAMESPACE --key KEY --json: {"node_id", "namespace" (ToJson
// of the NamespaceInfo), "increment": ToJson(node) plus "prefix_tokens"
// (start_token + tokens), "prefix_bytes" and "token_ids" (all of them)}.
Json IncrementReportJson(uint32_t node_id, const NamespaceInfo& ns, const IncrementInfo& inc);

}  // namespace ptstore::tools

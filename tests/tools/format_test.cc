// Unit tests of the tools' formatting code (tools/format.h) and argument
// parsing (tools/commands.h).
#include "tools/format.h"

#include <gtest/gtest.h>

#include <functional>
#include <sstream>

#include "tests/testing/temp_dir.h"
#include "tools/commands.h"
#include "tools/quota.h"
#include "tools/transfer.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::tools {
namespace {

ChainKey K(uint64_t lo) { return ChainKey{0, lo}; }

constexpr uint64_t kT0 = 1'700'000'000'000'000'000ull;  // 2023-11-14 22:13:20 UTC

PrefixNodeInfo Node(uint64_t key, uint64_t parent, uint64_t start, uint64_t tokens, uint64_t bytes,
                    uint64_t hits = 0, uint32_t children = 0) {
  PrefixNodeInfo n;
  n.key = K(key);
  n.parent = K(parent);
  n.start_token = start;
  n.tokens = tokens;
  n.bytes = bytes;
  n.hits = hits;
  n.children = children;
  n.tensor = TensorId::Make(NodeId{3}, key);
  n.times = Times{kT0 + key, kT0 + key + 1'000'000'000, kT0 + key + 2'000'000'000};
  return n;
}

TEST(ToolsFormat, HumanBytesUnits) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1), "1 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1.0 KiB");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(2ull << 20), "2.0 MiB");
  EXPECT_EQ(HumanBytes(3ull << 29), "1.5 GiB");
  EXPECT_EQ(HumanBytes(1ull << 40), "1.0 TiB");
  EXPECT_EQ(HumanBytes(UINT64_MAX), "16.0 EiB");
}

TEST(ToolsFormat, HumanBytesNeverShows1024OfAUnit) {
  EXPECT_EQ(HumanBytes((1ull << 20) - 1), "1.0 MiB");
  EXPECT_EQ(HumanBytes((1ull << 30) - 1), "1.0 GiB");
  EXPECT_EQ(HumanBytes(1023 * 1024 + 900), "1023.9 KiB");
}

TEST(ToolsFormat, ModesOctalAndSymbolic) {
  EXPECT_EQ(OctalMode(0755), "0755");
  EXPECT_EQ(OctalMode(0640), "0640");
  EXPECT_EQ(SymbolicMode(0755), "rwxr-xr-x");
  EXPECT_EQ(SymbolicMode(0640), "rw-r-----");
  EXPECT_EQ(SymbolicMode(0), "---------");
}

TEST(ToolsFormat, RatiosPercentAndUndefined) {
  EXPECT_FALSE(Ratio(0, 0).has_value());
  EXPECT_DOUBLE_EQ(*Ratio(3, 4), 0.75);
  EXPECT_EQ(Percent(Ratio(3, 4)), "75.0%");
  EXPECT_EQ(Percent(Ratio(1, 3)), "33.3%");
  EXPECT_EQ(Percent(std::nullopt), "n/a");
}

TEST(ToolsFormat, DisplayWidthCountsCodePoints) {
  EXPECT_EQ(DisplayWidth("abc"), 3u);
  EXPECT_EQ(DisplayWidth("\u251c\u2500\u2500 x"), 5u);
}

TEST(ToolsFormat, TableAlignsColumnsWithoutTrailingSpaces) {
  Table t({{"NAME"}, {"N", Table::Align::kRight}, {"LAST"}});
  t.AddRow({"a", "1", "x"});
  t.AddRow({"longer", "12345", ""});
  EXPECT_EQ(t.Render(),
            "NAME        N  LAST\n"
            "a           1  x\n"
            "longer  12345\n");
  EXPECT_EQ(t.Render(false),
            "a           1  x\n"
            "longer  12345\n");
}

TEST(ToolsFormat, TableUnicodeCellsAlignByColumns) {
  Table t({{"KEY"}, {"V", Table::Align::kRight}});
  t.AddRow({"\u2514\u2500\u2500 ab", "1"});
  t.AddRow({"abcdef", "22"});
  EXPECT_EQ(t.Render(false),
            "\u2514\u2500\u2500 ab   1\n"
            "abcdef  22\n");
}

// root
//   1 (0..32)
//     2 (32..48)
//       4 (48..64)
//     3 (32..64)
//   5 (0..16)
std::vector<PrefixNodeInfo> SampleTree() {
  return {Node(1, 0, 0, 32, 4096, 7, 2), Node(2, 1, 32, 16, 2048, 1, 1), Node(4, 2, 48, 16, 2048),
          Node(3, 1, 32, 32, 4096, 2), Node(5, 0, 0, 16, 2048)};
}

TEST(ToolsFormat, TreeAsciiLayout) {
  auto nodes = SampleTree();
  std::string k1 = K(1).ToHex(), k2 = K(2).ToHex(), k3 = K(3).ToHex(), k4 = K(4).ToHex(), k5 = K(5).ToHex();
  EXPECT_EQ(RenderTree(nodes, {}, false, TreeStyle::kAscii),
            k1 + "\n" +
            "|-- " + k2 + "\n" +
            "|   `-- " + k4 + "\n" +
            "`-- " + k3 + "\n" +
            k5 + "\n");
}

TEST(ToolsFormat, TreeUnicodeLayout) {
  auto lines = LayoutTree(SampleTree(), {}, TreeStyle::kUnicode);
  ASSERT_EQ(lines.size(), 5u);
  EXPECT_EQ(lines[0].prefix, "");
  EXPECT_EQ(lines[1].prefix, "\u251c\u2500\u2500 ");
  EXPECT_EQ(lines[2].prefix, "\u2502   \u2514\u2500\u2500 ");
  EXPECT_EQ(lines[3].prefix, "\u2514\u2500\u2500 ");
  EXPECT_EQ(lines[4].depth, 0u);
}

TEST(ToolsFormat, TreeSubtreeBelowAKey) {
  // ListTree(parent = 1, recursive): the descendants of 1 only.
  std::vector<PrefixNodeInfo> nodes = {Node(2, 1, 32, 16, 2048), Node(4, 2, 48, 16, 2048), Node(3, 1, 32, 32, 4096)};
  auto lines = LayoutTree(nodes, K(1), TreeStyle::kAscii);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].depth, 0u);
  EXPECT_EQ(lines[1].depth, 1u);
  EXPECT_EQ(lines[1].prefix, "`-- ");
  EXPECT_EQ(lines[2].depth, 0u);
}

TEST(ToolsFormat, TreeOrphansAndCyclesAreStillShownOnce) {
  std::vector<PrefixNodeInfo> nodes = {Node(7, 99, 0, 16, 1), Node(8, 9, 0, 16, 1), Node(9, 8, 0, 16, 1)};
  auto lines = LayoutTree(nodes, {}, TreeStyle::kAscii);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].index, 0u);
  auto j = TreeJson(nodes, {});
  size_t count = 0;
  std::function<void(const Json&)> walk = [&](const Json& a) {
    for (const auto& n : a) {
      ++count;
      walk(n["subtree"]);
    }
  };
  walk(j);
  EXPECT_EQ(count, 3u);
}

TEST(ToolsFormat, TreeLongFormatDrawsTheTreeInTheKeyColumn) {
  std::string s = RenderTree(SampleTree(), {}, true, TreeStyle::kAscii);
  std::istringstream in(s);
  std::string header, l1, l2, l3;
  std::getline(in, header);
  std::getline(in, l1);
  std::getline(in, l2);
  std::getline(in, l3);
  EXPECT_EQ(header.rfind("KEY", 0), 0u) << s;
  EXPECT_NE(header.find("START  TOKENS"), std::string::npos) << s;
  EXPECT_EQ(l1.rfind(K(1).ToHex(), 0), 0u) << s;
  EXPECT_EQ(l2.rfind("|-- " + K(2).ToHex(), 0), 0u) << s;
  EXPECT_EQ(l3.rfind("|   `-- " + K(4).ToHex(), 0), 0u) << s;
  EXPECT_NE(l1.find("4.0 KiB"), std::string::npos) << s;
  EXPECT_NE(l1.find("owned"), std::string::npos) << s;
  // Every row has the same width up to the last column (CHILDREN, right-aligned).
  EXPECT_EQ(DisplayWidth(header), DisplayWidth(l1));
  EXPECT_EQ(DisplayWidth(l1), DisplayWidth(l3));
}

TEST(ToolsFormat, IncrementsShortAndLong) {
  auto nodes = SampleTree();
  nodes.resize(1);
  EXPECT_EQ(RenderIncrements(nodes, false), K(1).ToHex() + "\n");
  EXPECT_EQ(RenderIncrements(nodes, true),
            "KEY                               START  TOKENS    BYTES  HITS  OWNER  CLASS  TIER  PINS  CHILDREN"
            "                MTIME\n" +
                K(1).ToHex() + "      0      32  4.0 KiB     7      3  owned  dram     0         2  " +
                LocalTime(kT0 + 1) + "\n");
  // -u / -c: the other times.
  EXPECT_NE(RenderIncrements(nodes, true, nullptr, TimeField::kAtime).find("ATIME\n"), std::string::npos);
  EXPECT_NE(RenderIncrements(nodes, true, nullptr, TimeField::kAtime).find(LocalTime(kT0 + 1'000'000'001)),
            std::string::npos);
  EXPECT_NE(RenderIncrements(nodes, true, nullptr, TimeField::kCtime).find(LocalTime(kT0 + 2'000'000'001)),
            std::string::npos);
  EXPECT_EQ(RenderIncrements({}, true), "");
}

TEST(ToolsFormat, IncrementsShowTheirTier) {
  auto nodes = SampleTree();
  nodes.resize(3);
  nodes[1].tier = kTierSsd;
  nodes[2].tier = kTierDram | kTierSsd;
  std::string t = RenderIncrements(nodes, true);
  std::istringstream in(t);
  std::string header, l0, l1, l2;
  std::getline(in, header);
  std::getline(in, l0);
  std::getline(in, l1);
  std::getline(in, l2);
  EXPECT_NE(header.find("  CLASS  TIER      PINS  CHILDREN"), std::string::npos) << t;
  EXPECT_NE(l0.find("  owned  dram         0"), std::string::npos) << t;
  EXPECT_NE(l1.find("  owned  ssd          0"), std::string::npos) << t;
  EXPECT_NE(l2.find("  owned  dram+ssd     0"), std::string::npos) << t;
  EXPECT_EQ(header.size(), l0.size()) << t;
  EXPECT_EQ(l0.size(), l2.size()) << t;
  EXPECT_STREQ(TierName(0), "-");
}

TEST(ToolsFormat, IncrementsShowTheirOwnerNode) {
  // OWNER is the node that owns the increment's tensor (TensorId::owner()),
  // not the sequence number or the whole id.
  auto nodes = SampleTree();
  nodes.resize(2);
  nodes[0].tensor = TensorId::Make(NodeId{0}, 5);
  nodes[1].tensor = TensorId::Make(NodeId{123456}, 99);
  nodes[1].cache_class = CacheClass::kReplica;
  std::string t = RenderIncrements(nodes, true);
  std::istringstream in(t);
  std::string header, l0, l1;
  std::getline(in, header);
  std::getline(in, l0);
  std::getline(in, l1);
  EXPECT_NE(header.find("  HITS   OWNER  CLASS    TIER  PINS  CHILDREN"), std::string::npos) << t;
  EXPECT_NE(l0.find("     7       0  owned    dram"), std::string::npos) << t;
  EXPECT_NE(l1.find("     1  123456  replica  dram"), std::string::npos) << t;
  EXPECT_EQ(t.find("99"), std::string::npos) << t;
  // The same column in the tree form.
  std::string tree = RenderTree(nodes, {}, true, TreeStyle::kAscii);
  EXPECT_NE(tree.find("  123456  replica"), std::string::npos) << tree;
}

TEST(ToolsFormat, NamespacesShortAndLong) {
  NamespaceInfo a;
  a.name = "mistral-7b";
  a.layout = MistralLayout();
  a.uid = 1000;
  a.gid = 100;
  a.mode = 0750;
  a.bytes = 2ull << 20;
  a.prefixes = 3;
  a.times = Times{kT0, kT0, kT0};
  NamespaceInfo b = a;
  b.name = "t";
  b.salted = true;
  b.bytes = 0;
  b.prefixes = 0;
  EXPECT_EQ(RenderNamespaces({a, b}, false), "mistral-7b\nt\n");
  std::string l = RenderNamespaces({a, b}, true);
  EXPECT_NE(l.find("NAME"), std::string::npos);
  EXPECT_EQ(l.substr(0, l.find('\n')),
            "NAME        OWNER     MODE         BYTES  INCREMENTS  MTIME                LAYOUT")
      << l;
  EXPECT_NE(l.find("\nmistral-7b  1000:100  rwxr-x---  2.0 MiB           3  " + LocalTime(kT0) + "  " +
                   MistralLayout().ToString() + "\n"),
            std::string::npos)
      << l;
  EXPECT_NE(l.find("t (salted)"), std::string::npos) << l;
}

TEST(ToolsFormat, JsonPrefixNode) {
  PrefixNodeInfo n = Node(2, 1, 32, 16, 2048, 5, 1);
  n.cache_class = CacheClass::kReplica;
  n.pins = 2;
  n.tensor = TensorId::Make(NodeId{0xABCDEF}, 42);
  auto j = ToJson(n);
  EXPECT_EQ(j["key"], K(2).ToHex());
  EXPECT_EQ(j["parent"], K(1).ToHex());
  EXPECT_EQ(j["start_token"], 32);
  EXPECT_EQ(j["tokens"], 16);
  EXPECT_EQ(j["bytes"], 2048);
  EXPECT_EQ(j["hits"], 5);
  EXPECT_EQ(j["class"], "replica");
  EXPECT_EQ(j["tier"], "dram");
  EXPECT_EQ(j["pins"], 2);
  EXPECT_EQ(j["children"], 1);
  EXPECT_EQ(j["tensor"]["owner"], 0xABCDEF);
  EXPECT_EQ(j["tensor"]["seq"], 42);
  // Times in seconds with microseconds (no JSON number past 2^53).
  EXPECT_DOUBLE_EQ(j["mtime"].get<double>(), 1700000000.0);
  EXPECT_DOUBLE_EQ(j["atime"].get<double>(), 1700000001.0);
  EXPECT_DOUBLE_EQ(j["ctime"].get<double>(), 1700000002.0);
  EXPECT_TRUE(ToJson(Node(1, 0, 0, 16, 1))["parent"].is_null());
  n.tier = kTierSsd;
  EXPECT_EQ(ToJson(n)["tier"], "ssd");
  n.tier = kTierDram | kTierSsd;
  EXPECT_EQ(ToJson(n)["tier"], "dram+ssd");
}

TEST(ToolsFormat, LocalTimeAndEpochSeconds) {
  EXPECT_EQ(LocalTime(0), "-");
  EXPECT_EQ(LocalTime(kT0).size(), 19u);
  EXPECT_EQ(LocalTime(kT0).substr(0, 4), "2023");
  EXPECT_DOUBLE_EQ(EpochSeconds(kT0 + 123'456'789), 1700000000.123456);
  EXPECT_STREQ(TimeFieldName(TimeField::kCtime), "ctime");
  EXPECT_EQ(TimeOf(Times{1, 2, 3}, TimeField::kAtime), 2u);
}

TEST(ToolsFormat, JsonNamespaceAndLayout) {
  NamespaceInfo a;
  a.name = "m";
  a.layout = MistralLayout();
  a.mode = 0640;
  a.uid = 7;
  a.gid = 8;
  a.bytes = (1ull << 40) + 1;  // exact, not rounded
  a.prefixes = 9;
  auto j = ToJson(a);
  EXPECT_EQ(j["name"], "m");
  EXPECT_EQ(j["mode"], "0640");
  EXPECT_EQ(j["uid"], 7);
  EXPECT_EQ(j["gid"], 8);
  EXPECT_EQ(j["bytes"].get<uint64_t>(), (1ull << 40) + 1);
  EXPECT_EQ(j["increments"], 9);
  EXPECT_EQ(j["salted"], false);
  EXPECT_EQ(j["layout"]["layers"], 32);
  EXPECT_EQ(j["layout"]["dtype"], "bf16");
  EXPECT_EQ(j["layout"]["bytes_per_token"], 131072);
  EXPECT_EQ(j["layout"]["bytes_per_block"], 131072 * 16);
}

TEST(ToolsFormat, JsonStatsWithDerivedRatios) {
  StoreStats s;
  s.arena_bytes = 1 << 20;
  s.hits = 3;
  s.misses = 1;
  s.hit_tokens = 48;
  s.requested_tokens = 64;
  s.saved_bytes = 300;
  s.dedup_bytes = 100;
  s.prefix_nodes = 5;
  auto j = ToJson(s);
  EXPECT_EQ(j["arena_bytes"], 1 << 20);
  EXPECT_EQ(j["increments"], 5);
  EXPECT_DOUBLE_EQ(j["hit_rate"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["token_hit_rate"].get<double>(), 0.75);
  EXPECT_DOUBLE_EQ(j["dedup_ratio"].get<double>(), 0.25);
  auto empty = ToJson(StoreStats{});
  EXPECT_TRUE(empty["hit_rate"].is_null());
  EXPECT_TRUE(empty["dedup_ratio"].is_null());
  EXPECT_EQ(empty.size(), j.size());
  // Without an SSD tier its counters are there all the same, as 0.
  for (const char* k : {"ssd_capacity", "ssd_file_bytes", "ssd_live_bytes", "ssd_segments", "ssd_tensors", "ssd_hits",
                        "ssd_fills", "ssd_fill_bytes", "ssd_spills", "ssd_spill_bytes", "ssd_stored_bytes",
                        "ssd_spill_failures", "ssd_evictions", "ssd_read_errors", "ssd_compactions",
                        "recovered_tensors", "recovered_bytes", "recovery_corrupt", "recovery_dropped"}) {
    ASSERT_TRUE(empty.contains(k)) << k;
    EXPECT_EQ(empty[k], 0) << k;
  }
  EXPECT_TRUE(empty["ssd_compression_ratio"].is_null());
}

TEST(ToolsFormat, JsonStatsSsdCounters) {
  StoreStats s;
  s.ssd_capacity = 1ull << 40;
  s.ssd_file_bytes = 5;
  s.ssd_live_bytes = 4;
  s.ssd_segments = 6;
  s.ssd_tensors = 7;
  s.ssd_hits = 8;
  s.ssd_fills = 9;
  s.ssd_fill_bytes = 10;
  s.ssd_spills = 11;
  s.ssd_spill_bytes = 3000;
  s.ssd_stored_bytes = 1000;
  s.ssd_spill_failures = 12;
  s.ssd_evictions = 13;
  s.ssd_read_errors = 14;
  s.ssd_compactions = 15;
  s.recovered_tensors = 16;
  s.recovered_bytes = 17;
  s.recovery_corrupt = 18;
  s.recovery_dropped = 19;
  auto j = ToJson(s);
  EXPECT_EQ(j["ssd_capacity"].get<uint64_t>(), 1ull << 40);
  EXPECT_EQ(j["ssd_file_bytes"], 5);
  EXPECT_EQ(j["ssd_live_bytes"], 4);
  EXPECT_EQ(j["ssd_segments"], 6);
  EXPECT_EQ(j["ssd_tensors"], 7);
  EXPECT_EQ(j["ssd_hits"], 8);
  EXPECT_EQ(j["ssd_fills"], 9);
  EXPECT_EQ(j["ssd_fill_bytes"], 10);
  EXPECT_EQ(j["ssd_spills"], 11);
  EXPECT_EQ(j["ssd_spill_bytes"], 3000);
  EXPECT_EQ(j["ssd_stored_bytes"], 1000);
  EXPECT_DOUBLE_EQ(j["ssd_compression_ratio"].get<double>(), 3.0);
  EXPECT_EQ(j["ssd_spill_failures"], 12);
  EXPECT_EQ(j["ssd_evictions"], 13);
  EXPECT_EQ(j["ssd_read_errors"], 14);
  EXPECT_EQ(j["ssd_compactions"], 15);
  EXPECT_EQ(j["recovered_tensors"], 16);
  EXPECT_EQ(j["recovered_bytes"], 17);
  EXPECT_EQ(j["recovery_corrupt"], 18);
  EXPECT_EQ(j["recovery_dropped"], 19);
}

TEST(ToolsFormat, CompressionRatio) {
  EXPECT_FALSE(CompressionRatio(10, 0).has_value());
  EXPECT_DOUBLE_EQ(*CompressionRatio(3, 2), 1.5);
  EXPECT_EQ(CompressionRatioText(3, 2), "1.50x");
  EXPECT_EQ(CompressionRatioText(1, 1), "1.00x");
  EXPECT_EQ(CompressionRatioText(0, 0), "n/a");
}

TEST(ToolsFormat, JsonNestedTree) {
  auto j = TreeJson(SampleTree(), {});
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["key"], K(1).ToHex());
  ASSERT_EQ(j[0]["subtree"].size(), 2u);
  EXPECT_EQ(j[0]["subtree"][0]["key"], K(2).ToHex());
  EXPECT_EQ(j[0]["subtree"][0]["subtree"][0]["key"], K(4).ToHex());
  EXPECT_EQ(j[0]["subtree"][1]["key"], K(3).ToHex());
  EXPECT_TRUE(j[1]["subtree"].empty());
}

TEST(ToolsFormat, StatsTextReport) {
  StoreStats s;
  s.arena_bytes = 64ull << 20;
  s.used_bytes = 2ull << 20;
  s.hits = 1;
  s.misses = 1;
  s.saved_bytes = 3 << 20;
  s.dedup_bytes = 1 << 20;
  std::string t = RenderStats(4, s, std::nullopt);
  EXPECT_EQ(t.rfind("node ", 0), 0u) << t;
  EXPECT_NE(t.find("arena size         64.0 MiB\n"), std::string::npos) << t;
  EXPECT_NE(t.find("arena used         2.0 MiB (3.1%)\n"), std::string::npos) << t;
  EXPECT_NE(t.find("hit rate           50.0%\n"), std::string::npos) << t;
  EXPECT_NE(t.find("hit tokens         0 of 0 (n/a)\n"), std::string::npos) << t;
  EXPECT_NE(t.find("dedup saving       1.0 MiB (25.0% of bytes offered)\n"), std::string::npos) << t;
  EXPECT_EQ(t.find("\nnamespace "), std::string::npos) << t;
  EXPECT_EQ(t.find("ssd"), std::string::npos) << t;  // no SSD tier: no SSD section
  EXPECT_EQ(t.find("recover"), std::string::npos) << t;
  EXPECT_EQ(t.find("\n\n"), std::string::npos) << t;

  NamespaceReport r;
  r.info.name = "m";
  r.info.layout = MistralLayout();
  r.info.bytes = 1 << 20;
  r.tree = Summarize(SampleTree());
  std::string n = RenderStats(4, s, r);
  EXPECT_NE(n.find("\n\nnamespace "), std::string::npos) << n;
  EXPECT_NE(n.find("bytes per token    128.0 KiB\n"), std::string::npos) << n;
  EXPECT_NE(n.find("stored tokens      112\n"), std::string::npos) << n;
  EXPECT_NE(n.find("longest prefix     64 tokens\n"), std::string::npos) << n;
  EXPECT_NE(n.find("stored prefixes    3 (increments without children)\n"), std::string::npos) << n;
}

TEST(ToolsFormat, StatsTextSsdSection) {
  StoreStats s;
  s.arena_bytes = 64ull << 20;
  s.ssd_capacity = 100ull << 30;
  s.ssd_file_bytes = 10ull << 30;
  s.ssd_live_bytes = 8ull << 30;
  s.ssd_segments = 40;
  s.ssd_tensors = 1234;
  s.ssd_hits = 17;
  s.ssd_fills = 20;
  s.ssd_fill_bytes = 40ull << 20;
  s.ssd_spills = 1300;
  s.ssd_spill_bytes = 18ull << 30;
  s.ssd_stored_bytes = 9ull << 30;
  s.ssd_spill_failures = 2;
  s.ssd_evictions = 66;
  s.ssd_read_errors = 1;
  s.ssd_compactions = 3;
  s.recovered_tensors = 1000;
  s.recovered_bytes = 6ull << 30;
  s.recovery_corrupt = 4;
  s.recovery_dropped = 5;
  std::string t = RenderStats(0, s, std::nullopt);
  for (const char* line : {"\n\nssd capacity       100.0 GiB\n",
                                  "\nssd file bytes     10.0 GiB (10.0%)\n",
                                  "\nssd live bytes     8.0 GiB (80.0% of file bytes)\n",
                                  "\nssd segments       40\n",
                                  "\nssd tensors        1234\n",
                                  "\nssd hits           17\n",
                                  "\nssd fills          20 (40.0 MiB)\n",
                                  "\nssd spills         1300 (18.0 GiB, stored in 9.0 GiB)\n",
                                  "\nssd compression    2.00x\n",
                                  "\nssd failed spills  2\n",
                                  "\nssd evictions      66\n",
                                  "\nssd read errors    1\n",
                                  "\nssd compactions    3\n",
                                  "\nrecovered tensors  1000 (6.0 GiB)\n",
                                  "\nrecovery corrupt   4\n",
                                  "\nrecovery dropped   5\n"}) {
    EXPECT_NE(t.find(line), std::string::npos) << line << "\n" << t;
  }
  // The node's figures keep their column; a namespace follows after
  // another blank line.
  EXPECT_NE(t.find("arena size         64.0 MiB\n"), std::string::npos) << t;
  NamespaceReport r;
  r.info.name = "m";
  std::string n = RenderStats(0, s, r);
  EXPECT_NE(n.find("recovery dropped   5\n\nnamespace          m\n"), std::string::npos) << n;
  // No spills yet: no ratio.
  s.ssd_spill_bytes = s.ssd_stored_bytes = 0;
  EXPECT_NE(RenderStats(0, s, std::nullopt).find("ssd compression    n/a\n"), std::string::npos);
}

TEST(ToolsFormat, SummarizeAddsUp) {
  auto nodes = SampleTree();
  nodes[3].cache_class = CacheClass::kReplica;
  nodes[4].pins = 1;
  TreeSummary t = Summarize(nodes);
  EXPECT_EQ(t.increments, 5u);
  EXPECT_EQ(t.tokens, 112u);
  EXPECT_EQ(t.bytes, 14336u);
  EXPECT_EQ(t.hits, 10u);
  EXPECT_EQ(t.replica_bytes, 4096u);
  EXPECT_EQ(t.owned_bytes, 10240u);
  EXPECT_EQ(t.pinned_increments, 1u);
  EXPECT_EQ(t.max_depth_tokens, 64u);
  EXPECT_EQ(t.leaves, 3u);  // 4, 3 and 5
  auto j = ToJson(t);
  EXPECT_EQ(j["prefixes"], 3);
  EXPECT_EQ(j["longest_prefix_tokens"], 64);
  EXPECT_EQ(Summarize({}).leaves, 0u);
}

TEST(ToolsFormat, TokenIdsShortenedAfterSixteen) {
  EXPECT_EQ(TokenIdsText({}), "");
  EXPECT_EQ(TokenIdsText({1, 22, 333}), "1 22 333");
  std::vector<uint32_t> sixteen(16);
  for (uint32_t i = 0; i < 16; ++i) sixteen[i] = 100 + i;
  EXPECT_EQ(TokenIdsText(sixteen).find("..."), std::string::npos);
  std::vector<uint32_t> many(40);
  for (uint32_t i = 0; i < 40; ++i) many[i] = i;
  EXPECT_EQ(TokenIdsText(many), "0 1 2 3 4 5 6 7 8 9 10 11 ... 36 37 38 39 (40 ids)");
  EXPECT_EQ(TokenIdsText(many, 4), "0 1 2 ... 39 (40 ids)");
  EXPECT_EQ(TokenIdsText(many, 0), "0 ... 39 (40 ids)");
}

IncrementInfo SampleIncrement() {
  IncrementInfo inc;
  inc.node = Node(2, 1, 32, 16, 16 * 131072, 5, 1);
  inc.node.tensor = TensorId::Make(NodeId{7}, 42);
  inc.node.tier = kTierDram | kTierSsd;
  for (uint32_t i = 0; i < 16; ++i) inc.tokens.push_back(5000 + i);
  return inc;
}

TEST(ToolsFormat, IncrementReportText) {
  NamespaceInfo ns;
  ns.name = "m";
  ns.layout = MistralLayout();  // 128 KiB per token
  IncrementInfo inc = SampleIncrement();
  std::string t = RenderIncrementReport(ns, inc);
  for (const std::string& line :
       {std::string("namespace          m\n"), "key                " + K(2).ToHex() + "\n",
        "parent             " + K(1).ToHex() + "\n", std::string("tokens             16 (tokens 32..47 of its prefix)\n"),
        std::string("bytes              2.0 MiB (2097152)\n"),
        std::string("prefix             48 tokens, 6.0 MiB (this increment and its ancestors)\n"),
        std::string("hits               5\n"), std::string("owner              node 7\n"),
        std::string("tensor             node 7 seq 42\n"), std::string("class              owned\n"),
        std::string("tier               dram+ssd\n"), std::string("pins               0\n"),
        std::string("children           1\n"), std::string("token ids          5000 5001 5002"),
        std::string(" 5015\n")}) {
    EXPECT_NE(t.find(line), std::string::npos) << line << "\n" << t;
  }
  EXPECT_EQ(t.rfind("namespace ", 0), 0u) << t;
  inc.node.parent = ChainKey{};
  EXPECT_NE(RenderIncrementReport(ns, inc).find("parent             none (a top increment)\n"), std::string::npos);
}

TEST(ToolsFormat, IncrementReportJson) {
  NamespaceInfo ns;
  ns.name = "m";
  ns.layout = MistralLayout();
  IncrementInfo inc = SampleIncrement();
  Json j = IncrementReportJson(3, ns, inc);
  EXPECT_EQ(j["node_id"], 3);
  EXPECT_EQ(j["namespace"]["name"], "m");
  EXPECT_EQ(j["namespace"]["layout"]["bytes_per_token"], 131072);
  const Json& i = j["increment"];
  EXPECT_EQ(i["key"], K(2).ToHex());
  EXPECT_EQ(i["parent"], K(1).ToHex());
  EXPECT_EQ(i["start_token"], 32);
  EXPECT_EQ(i["tokens"], 16);
  EXPECT_EQ(i["tensor"]["owner"], 7);
  EXPECT_EQ(i["tier"], "dram+ssd");
  EXPECT_EQ(i["prefix_tokens"], 48);
  EXPECT_EQ(i["prefix_bytes"].get<uint64_t>(), 48u * 131072);
  ASSERT_EQ(i["token_ids"].size(), 16u);
  EXPECT_EQ(i["token_ids"][0], 5000);
  EXPECT_EQ(i["token_ids"][15], 5015);
}

TEST(ToolsFormat, LsTargetParses) {
  std::string hex = K(0x1234).ToHex();
  auto a = ParseLsTarget("mistral-7b");
  ASSERT_OK(a);
  EXPECT_EQ(a->ns, "mistral-7b");
  EXPECT_FALSE(a->has_key);
  auto b = ParseLsTarget("mistral-7b/");
  ASSERT_OK(b);
  EXPECT_FALSE(b->has_key);
  auto c = ParseLsTarget("m/" + hex);
  ASSERT_OK(c);
  EXPECT_TRUE(c->has_key);
  EXPECT_EQ(c->key, K(0x1234));
  auto d = ParseLsTarget("m/" + hex + "/");
  ASSERT_OK(d);
  EXPECT_EQ(d->key, K(0x1234));
}

TEST(ToolsFormat, LsTargetRejects) {
  std::string hex = K(0x1234).ToHex();
  for (const std::string& bad : std::vector<std::string>{"", "/" + hex, "bad name", ".hidden", "m/xyz", "m/" + hex + "0", "m/" + hex + "/" + hex,
                          "m/" + std::string(31, '0') + "g"}) {
    auto r = ParseLsTarget(bad);
    EXPECT_FALSE(r.ok()) << bad;
    if (!r.ok()) {
      EXPECT_ERROR(r, Code::kInvalidArgument) << bad;
    }
  }
}

// ------------------------------------------- ptstore-put/-get token files

TEST(ToolsTransfer, TokensFormatNames) {
  EXPECT_EQ(*ParseTokensFormat("raw"), TokensFormat::kRaw);
  EXPECT_EQ(*ParseTokensFormat("text"), TokensFormat::kText);
  auto bad = ParseTokensFormat("json");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "token file format 'json' is not raw or text");
}

TEST(ToolsTransfer, RawTokensAreLittleEndianUint32) {
  const std::string bytes("\x01\x00\x00\x00\xff\xff\xff\xff\x00\x01\x02\x03", 12);
  auto t = ParseTokens(bytes, TokensFormat::kRaw);
  ASSERT_OK(t);
  EXPECT_EQ(*t, (std::vector<uint32_t>{1, 0xffffffffu, 0x03020100u}));
  EXPECT_EQ(FormatTokens(*t, TokensFormat::kRaw), bytes);
  EXPECT_TRUE(ParseTokens("", TokensFormat::kRaw)->empty());
  auto odd = ParseTokens(std::string(7, 'x'), TokensFormat::kRaw);
  ASSERT_FALSE(odd.ok());
  EXPECT_ERROR(odd, Code::kInvalidArgument);
  EXPECT_NE(odd.status().message().find("holds 7 bytes, not a whole number of 4-byte token ids"), std::string::npos)
      << odd.status().message();
}

TEST(ToolsTransfer, TextTokensAreWhitespaceSeparatedDecimals) {
  auto t = ParseTokens("  1 22\t333\r\n4294967295\n\n0\n", TokensFormat::kText);
  ASSERT_OK(t);
  EXPECT_EQ(*t, (std::vector<uint32_t>{1, 22, 333, 4294967295u, 0}));
  EXPECT_EQ(FormatTokens(*t, TokensFormat::kText), "1\n22\n333\n4294967295\n0\n");
  EXPECT_TRUE(ParseTokens(" \n\t", TokensFormat::kText)->empty());
  EXPECT_EQ(FormatTokens({}, TokensFormat::kText), "");
  // Round trip of FormatTokens in both formats.
  std::vector<uint32_t> ids = {7, 0, 65536, 4000000000u};
  for (TokensFormat f : {TokensFormat::kRaw, TokensFormat::kText}) {
    EXPECT_EQ(*ParseTokens(FormatTokens(ids, f), f), ids);
  }
}

TEST(ToolsTransfer, TextTokenErrorsNameTheLineAndWord) {
  struct Case {
    std::string text, message;
  };
  for (const Case& c : std::vector<Case>{
           {"1 2\n3 abc 4\n", "line 2: 'abc' is not a token id (a decimal integer from 0 to 4294967295)"},
           {"4294967296", "line 1: '4294967296' is not a token id (a decimal integer from 0 to 4294967295)"},
           {"-1", "line 1: '-1' is not a token id (a decimal integer from 0 to 4294967295)"},
           {"1,2", "line 1: '1,2' is not a token id (a decimal integer from 0 to 4294967295)"},
           {"0x10", "line 1: '0x10' is not a token id (a decimal integer from 0 to 4294967295)"},
           {"\n\n\n+5", "line 4: '+5' is not a token id (a decimal integer from 0 to 4294967295)"},
       }) {
    auto r = ParseTokens(c.text, TokensFormat::kText);
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_ERROR(r, Code::kInvalidArgument);
    EXPECT_EQ(r.status().message(), c.message) << c.text;
  }
  // A long word is cut in the message.
  auto r = ParseTokens(std::string(100, 'z'), TokensFormat::kText);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("'" + std::string(40, 'z') + "...'"), std::string::npos);
}

TEST(ToolsTransfer, WholeFilesReadAndWritten) {
  testing::TempDir dir("ptstore-transfer");
  const std::string path = dir.Join("f");
  std::string data(300000, '\0');
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<char>(i * 31);
  ASSERT_OK(WriteWholeFile(path, data.data(), data.size()));
  EXPECT_EQ(*ReadWholeFile(path), data);
  // Truncated by the next write.
  ASSERT_OK(WriteWholeFile(path, "ab", 2));
  EXPECT_EQ(*ReadWholeFile(path), "ab");
  ASSERT_OK(WriteWholeFile(path, nullptr, 0));
  EXPECT_EQ(*ReadWholeFile(path), "");

  auto missing = ReadWholeFile(dir.Join("nope"));
  ASSERT_FALSE(missing.ok());
  EXPECT_ERROR(missing, Code::kNotFound);
  EXPECT_EQ(missing.status().message(), "cannot open '" + dir.Join("nope") + "': No such file or directory");
  auto a_dir = ReadWholeFile(dir.path());
  ASSERT_FALSE(a_dir.ok());
  EXPECT_NE(a_dir.status().message().find("cannot read '" + dir.path() + "'"), std::string::npos);
  Status w = WriteWholeFile(dir.Join("no/such/dir"), "x", 1);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.message().find("cannot create '" + dir.Join("no/such/dir") + "'"), std::string::npos) << w.message();
}

TEST(QuotaFormatTest, TableAndJson) {
  std::vector<NamespaceQuota> qs = {NamespaceQuota{"flood", 8ull << 20, 0, 8ull << 20, 0, 368, 0, 2},
                                    NamespaceQuota{"steady", 0, 0, 10ull << 20, 0, 0, 0, 0}};
  EXPECT_FALSE(AnySsd(qs));
  const std::string t = RenderQuotas(qs, false);
  EXPECT_EQ(t,
            "NAMESPACE  DRAM USED  DRAM QUOTA  DRAM %  EVICTED  CUT SAVES\n"
            "flood        8.0 MiB     8.0 MiB  100.0%      368          2\n"
            "steady      10.0 MiB           -       -        0          0\n");
  qs[1].ssd_quota = 1ull << 30;
  EXPECT_TRUE(AnySsd(qs));
  EXPECT_NE(RenderQuotas(qs, true).find("SSD QUOTA"), std::string::npos);
  EXPECT_NE(RenderQuotas(qs, true).find("1.0 GiB"), std::string::npos);
  Json j = QuotasJson(qs);
  ASSERT_EQ(j.size(), 2u);
  EXPECT_EQ(j[0]["namespace"], "flood");
  EXPECT_EQ(j[0]["dram"]["quota"], 8ull << 20);
  EXPECT_EQ(j[0]["dram"]["used"], 8ull << 20);
  EXPECT_DOUBLE_EQ(j[0]["dram"]["ratio"].get<double>(), 1.0);
  EXPECT_TRUE(j[0]["ssd"]["quota"].is_null());
  EXPECT_TRUE(j[1]["dram"]["quota"].is_null());
  EXPECT_TRUE(j[1]["dram"]["ratio"].is_null());
  EXPECT_EQ(j[1]["ssd"]["quota"], 1ull << 30);
  EXPECT_EQ(j[0]["dram_evictions"], 368);
  EXPECT_EQ(j[0]["cut_saves"], 2);
}

}  // namespace
}  // namespace ptstore::tools

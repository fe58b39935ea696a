// ptstore-ls and ptstore-stat against a real ptstored: a namespace with a
// few branching prefixes saved by the C++ client, then the real binaries'
// text and --json output checked against what the client API reports, and
// their errors (no server, unknown namespace, malformed key).
#include <locale.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "ptstore/client.h"
#include "tests/testing/client.h"
#include "tests/testing/daemon.h"
#include "tests/testing/generators.h"
#include "tests/testing/run_tool.h"
#include "tests/testing/segment_files.h"
#include "tools/format.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using nlohmann::json;
using testing::Lines;
using testing::RunTool;
// 2 layers, 2 KV heads, head_dim 64, bf16: 1 KiB per token, 16 KiB per block
// of 16 tokens.
using testing::SegmentTestLayout;
using testing::SequentialTokens;
using testing::ToolRun;
using tools::EpochSeconds;
using tools::LocalTime;

constexpr const char* kNs = "tools-test";
const std::string kLs = PTSTORE_LS_PATH;
const std::string kStat = PTSTORE_STAT_PATH;

class ToolsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(daemon_.Start());
    auto c = testing::ConnectTo(daemon_.socket_path());
    ASSERT_OK(c);
    client_ = std::move(*c);
    ASSERT_OK(client_->CreateNamespace(kNs, SegmentTestLayout(), "", 0750));
    ASSERT_OK(client_->CreateNamespace("empty-ns", MistralLayout(), "salt", 0700));
    // A: 64 tokens (4 blocks).            root ── [0,32) ── [32,64)  (A)
    // B: A's first 32 tokens, then 48     │              └── [32,80) (B)
    //    others: splits A's increment.    └── [0,32)             (C, other tokens)
    // C: 32 unrelated tokens.
    // D: A + 16 more: a child of A's tail.
    const uint64_t bpt = SegmentTestLayout().BytesPerToken();
    auto save = [&](const std::vector<uint32_t>& t) {
      std::vector<uint8_t> kv(t.size() / 16 * 16 * bpt, 0x5a);
      auto r = client_->Save(kNs, t, kv.data(), kv.size());
      ASSERT_OK(r);
    };
    a_ = SequentialTokens(1000, 64);
    b_ = SequentialTokens(1000, 32);
    auto b_tail = SequentialTokens(5000, 48);
    b_.insert(b_.end(), b_tail.begin(), b_tail.end());
    c_ = SequentialTokens(9000, 32);
    d_ = a_;
    auto d_tail = SequentialTokens(7000, 16);
    d_.insert(d_.end(), d_tail.begin(), d_tail.end());
    save(a_);
    save(b_);
    save(c_);
    save(d_);
    save(a_);  // all present: dedup
    // Loads make hits (and one miss).
    std::vector<uint8_t> dst(d_.size() * bpt);
    for (int i = 0; i < 3; ++i) ASSERT_OK(client_->Load(kNs, d_, dst.data(), dst.size()));
    ASSERT_OK(client_->Load(kNs, b_, dst.data(), dst.size()));
    ASSERT_EQ(*client_->Load(kNs, SequentialTokens(123456, 32), dst.data(), dst.size()), 0u);
  }

  std::string Socket() const { return daemon_.socket_path(); }
  ToolRun Ls(std::vector<std::string> args) {
    args.insert(args.begin(), {"-s", Socket()});
    return RunTool(kLs, args);
  }
  ToolRun Stat(std::vector<std::string> args) {
    args.insert(args.begin(), {"-s", Socket()});
    return RunTool(kStat, args);
  }
  std::vector<PrefixNodeInfo> Tree(const ChainKey& parent = {}, bool recursive = false) {
    auto r = client_->ListTree(kNs, parent, recursive);
    EXPECT_OK(r);
    return r.ok() ? *r : std::vector<PrefixNodeInfo>{};
  }

  testing::Daemon daemon_;
  std::unique_ptr<Client> client_;
  std::vector<uint32_t> a_, b_, c_, d_;
};

void ExpectNodeJson(const json& j, const PrefixNodeInfo& n) {
  EXPECT_EQ(j["key"], n.key.ToHex());
  if (n.parent == ChainKey{}) {
    EXPECT_TRUE(j["parent"].is_null());
  } else {
    EXPECT_EQ(j["parent"], n.parent.ToHex());
  }
  EXPECT_EQ(j["start_token"].get<uint64_t>(), n.start_token);
  EXPECT_EQ(j["tokens"].get<uint64_t>(), n.tokens);
  EXPECT_EQ(j["bytes"].get<uint64_t>(), n.bytes);
  EXPECT_EQ(j["hits"].get<uint64_t>(), n.hits);
  EXPECT_EQ(j["class"], CacheClassName(n.cache_class));
  EXPECT_EQ(j["tier"], TierName(n.tier));
  EXPECT_EQ(j["pins"].get<uint32_t>(), n.pins);
  EXPECT_EQ(j["children"].get<uint32_t>(), n.children);
  EXPECT_EQ(j["tensor"]["seq"].get<uint64_t>(), n.tensor.seq());
  EXPECT_EQ(j["tensor"]["owner"].get<uint32_t>(), n.tensor.owner().value);
  EXPECT_DOUBLE_EQ(j["mtime"].get<double>(), EpochSeconds(n.times.mtime_ns));
  EXPECT_DOUBLE_EQ(j["atime"].get<double>(), EpochSeconds(n.times.atime_ns));
  EXPECT_DOUBLE_EQ(j["ctime"].get<double>(), EpochSeconds(n.times.ctime_ns));
}

TEST_F(ToolsTest, ListsNamespaces) {
  ToolRun r = Ls({});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "empty-ns\ntools-test\n");
  EXPECT_EQ(r.err, "");

  r = Ls({"-l"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0].rfind("NAME", 0), 0u) << r.out;
  std::string owner = std::to_string(getuid()) + ":" + std::to_string(getgid());
  auto info = *client_->GetNamespace(kNs);
  EXPECT_EQ(lines[2].rfind("tools-test", 0), 0u) << r.out;
  EXPECT_EQ(lines[2].substr(lines[2].size() - SegmentTestLayout().ToString().size()), SegmentTestLayout().ToString()) << r.out;
  EXPECT_NE(lines[2].find(owner), std::string::npos) << r.out;
  EXPECT_NE(lines[2].find("rwxr-x---"), std::string::npos) << r.out;
  EXPECT_NE(lines[2].find(" KiB"), std::string::npos) << r.out;  // human-readable
  EXPECT_NE(lines[2].find(" " + std::to_string(info.prefixes) + "  " + LocalTime(info.times.mtime_ns) + "  layers="),
            std::string::npos)
      << r.out;
  EXPECT_NE(lines[2].find("160.0 KiB"), std::string::npos) << r.out;
  EXPECT_NE(lines[1].find("empty-ns (salted)"), std::string::npos) << r.out;
  EXPECT_NE(lines[1].find("rwx------"), std::string::npos) << r.out;

  r = Ls({"--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["namespaces"].size(), 2u);
  auto listed = *client_->ListNamespaces();
  std::map<std::string, NamespaceInfo> by_name;
  for (const auto& n : listed) by_name[n.name] = n;
  for (const auto& n : j["namespaces"]) {
    const NamespaceInfo& want = by_name.at(n["name"].get<std::string>());
    EXPECT_EQ(n["bytes"].get<uint64_t>(), want.bytes);
    EXPECT_EQ(n["increments"].get<uint64_t>(), want.prefixes);
    EXPECT_EQ(n["uid"].get<uint32_t>(), want.uid);
    EXPECT_EQ(n["gid"].get<uint32_t>(), want.gid);
    EXPECT_EQ(n["salted"].get<bool>(), want.salted);
    EXPECT_EQ(n["layout"]["block_tokens"].get<uint32_t>(), want.layout.block_tokens);
    EXPECT_EQ(n["layout"]["bytes_per_token"].get<uint64_t>(), want.layout.BytesPerToken());
  }
  EXPECT_EQ(j["namespaces"][1]["mode"], "0750");
  EXPECT_GT(by_name.at(kNs).bytes, 0u);
  EXPECT_EQ(by_name.at(kNs).bytes, 160u * 1024);  // 64 + 48 + 32 + 16 tokens, 1 KiB each
}

// A hybrid model's namespace: ls and stat show its groups, in text and JSON.
TEST_F(ToolsTest, GroupedLayoutsInLsAndStat) {
  const Layout grouped = Layout::FromGroups(
      {LayoutGroup::Full(2, 2, 64, DType::kBF16), LayoutGroup::Window(2, 2, 64, DType::kBF16, 64),
       LayoutGroup::Latent(3, 40, DType::kFP16), LayoutGroup::State(2, 1000)},
      16);
  ASSERT_OK(grouped.Validate());
  ASSERT_OK(client_->CreateNamespace("hybrid", grouped, "", 0700));
  std::vector<uint8_t> kv(2 * grouped.BytesPerBlock(), 0x33);
  ASSERT_OK(client_->Save("hybrid", SequentialTokens(100, 32), kv.data(), kv.size()));

  ToolRun r = Ls({"-l"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_EQ(lines[2].rfind("hybrid", 0), 0u) << r.out;
  EXPECT_EQ(lines[2].substr(lines[2].size() - grouped.ToString().size()), grouped.ToString()) << r.out;

  r = Ls({"--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  json hybrid, dense;
  for (const auto& n : j["namespaces"]) {
    if (n["name"] == "hybrid") hybrid = n["layout"];
    if (n["name"] == kNs) dense = n["layout"];
  }
  // The dense layout's object is what it was: no groups.
  EXPECT_FALSE(dense.contains("groups")) << dense.dump();
  EXPECT_EQ(dense.size(), 7u) << dense.dump();
  ASSERT_TRUE(hybrid.contains("groups")) << hybrid.dump();
  EXPECT_EQ(hybrid["layers"], 0);
  EXPECT_EQ(hybrid["dtype"], "none");
  EXPECT_EQ(hybrid["block_tokens"], 16);
  EXPECT_EQ(hybrid["bytes_per_token"].get<uint64_t>(), grouped.BytesPerToken());
  EXPECT_EQ(hybrid["bytes_per_block"].get<uint64_t>(), grouped.BytesPerBlock());
  const json& g = hybrid["groups"];
  ASSERT_EQ(g.size(), 4u);
  EXPECT_EQ(g[0], json::parse(R"({"kind": "full", "layers": 2, "kv_heads": 2, "head_dim": 64, "dtype": "bf16",
                                  "offset": 0, "bytes_per_block": 16384})"));
  EXPECT_EQ(g[1]["kind"], "window");
  EXPECT_EQ(g[1]["window_tokens"], 64);
  EXPECT_EQ(g[1]["offset"], 16384);
  EXPECT_EQ(g[2]["kind"], "latent");
  EXPECT_EQ(g[2]["kv_heads"], 1);
  EXPECT_EQ(g[2]["head_dim"], 40);
  EXPECT_EQ(g[2]["dtype"], "fp16");
  EXPECT_EQ(g[2]["offset"], 32768);
  EXPECT_EQ(g[2]["bytes_per_block"], 16 * 3 * 40 * 2);
  EXPECT_EQ(g[3], json::parse(R"({"kind": "state", "layers": 2, "state_bytes": 1000, "offset": 36608,
                                  "bytes_per_block": 2000})"));

  r = Stat({"hybrid"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("layout             " + grouped.ToString() + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("group 0            full:layers=2:kv_heads=2:head_dim=64:dtype=bf16 (16384 bytes per block "
                       "at byte 0)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("group 3            state:layers=2:bytes=1000 (2000 bytes per block at byte 36608)\n"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("bytes per block    37.8 KiB (38656)\n"), std::string::npos) << r.out;
  r = Stat({"--json", "hybrid"});
  ASSERT_EQ(r.rc, 0) << r.err;
  j = json::parse(r.out);
  EXPECT_EQ(j["namespace"]["layout"]["groups"].size(), 4u);
  EXPECT_EQ(j["namespace"]["layout"]["groups"][3]["state_bytes"], 1000);
  EXPECT_EQ(j["namespace"]["bytes"].get<uint64_t>(), kv.size());
}

TEST_F(ToolsTest, ListsTopIncrements) {
  auto top = Tree();
  ASSERT_EQ(top.size(), 2u);  // [0,32) of A/B/D, and C

  ToolRun r = Ls({kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, top[0].key.ToHex() + "\n" + top[1].key.ToHex() + "\n");

  r = Ls({"--json", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["namespace"], kNs);
  EXPECT_TRUE(j["parent"].is_null());
  ASSERT_EQ(j["increments"].size(), top.size());
  for (size_t i = 0; i < top.size(); ++i) ExpectNodeJson(j["increments"][i], top[i]);
  // The shared [0,32) increment: 32 tokens, 32 KiB, hit by all four loads
  // that matched (3 of D, 1 of B).
  const PrefixNodeInfo& shared = top[0].children == 2 ? top[0] : top[1];
  EXPECT_EQ(shared.tokens, 32u);
  EXPECT_EQ(shared.bytes, 32u * 1024);
  EXPECT_EQ(shared.hits, 4u);

  r = Ls({"-l", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 3u) << r.out;
  EXPECT_EQ(lines[0],
            "KEY                               START  TOKENS     BYTES  HITS  OWNER  CLASS  TIER  PINS  CHILDREN"
            "                MTIME");
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(lines[i + 1].rfind(top[i].key.ToHex(), 0), 0u) << r.out;
    EXPECT_NE(lines[i + 1].find("32.0 KiB"), std::string::npos) << r.out;
    // HITS, then OWNER: the node owning the tensor (this one).
    EXPECT_NE(lines[i + 1].find(" " + std::to_string(top[i].hits) + "      " +
                                std::to_string(top[i].tensor.owner().value) + "  owned  dram"),
              std::string::npos)
        << r.out;
  }
  EXPECT_EQ(top[0].tensor.owner().value, client_->node_id());
}

// -t, -u, -c and --unused-for against the times ptstored keeps.
TEST_F(ToolsTest, SortsAndFiltersByTime) {
  // Ages: C unused for 3 hours, B's branch for 2, the rest in use now.
  auto all = Tree({}, true);
  ASSERT_EQ(all.size(), 5u);
  const uint64_t now = WallClockNs(), hour = 3600ull * 1000000000;
  auto key_of = [&](const std::vector<uint32_t>& t) {
    for (const auto& n : all) {
      if (n.start_token + n.tokens != t.size()) continue;
      auto inc = client_->GetIncrement(kNs, n.key);
      if (inc.ok() && std::equal(inc->tokens.begin(), inc->tokens.end(), t.begin() + n.start_token)) return n.key;
    }
    ADD_FAILURE() << "no increment ends these tokens";
    return ChainKey{};
  };
  const ChainKey c = key_of(c_), b = key_of(b_), d = key_of(d_);
  ASSERT_OK(client_->SetTimes(kNs, c, now - 3 * hour, now - 3 * hour));
  ASSERT_OK(client_->SetTimes(kNs, b, now - 2 * hour, 0));
  std::vector<uint8_t> dst(d_.size() * SegmentTestLayout().BytesPerToken());
  ASSERT_OK(client_->Load(kNs, d_, dst.data(), dst.size()));  // A's prefix and D: used now

  // --unused-for: what no one used for that long; with -R the top of each cold subtree.
  ToolRun r = Ls({"-R", "--unused-for", "90m", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Lines(r.out).size(), 2u) << r.out;
  EXPECT_NE(r.out.find(c.ToHex()), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(b.ToHex()), std::string::npos) << r.out;
  r = Ls({"-R", "--unused-for", "2.5h", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, c.ToHex() + "\n");
  r = Ls({"--unused-for", "1d", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "");
  r = Ls({"-R", "--json", "--unused-for", "3600", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["increments"].size(), 2u) << r.out;
  for (const auto& n : j["increments"]) EXPECT_LT(n["atime"].get<double>(), EpochSeconds(now - hour));
  // Namespaces: empty-ns was never used (its atime is its creation), tools-test now.
  r = Ls({"--unused-for", "0s"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "empty-ns\ntools-test\n");
  r = Ls({"--unused-for", "1h"});
  EXPECT_EQ(r.out, "");

  // -t: newest first (mtime); -tu by atime: D's prefix, then B, then C.
  r = Ls({"-tu", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_EQ(lines[1], c.ToHex()) << r.out;
  r = Ls({"-R", "-tu", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  lines = Lines(r.out);
  ASSERT_EQ(lines.size(), 5u) << r.out;
  EXPECT_EQ(lines.back(), c.ToHex()) << r.out;
  EXPECT_LT(r.out.find(d.ToHex()), r.out.find(b.ToHex())) << "siblings by atime: " << r.out;
  r = Ls({"-t", kNs});  // mtime: C was set 3 hours back
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Lines(r.out).back(), c.ToHex()) << r.out;
  // -l shows the chosen time.
  r = Ls({"-lu", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("ATIME"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(LocalTime(now - 3 * hour)), std::string::npos) << r.out;
  r = Ls({"-l", "--time", "ctime", kNs});
  EXPECT_NE(r.out.find("CTIME"), std::string::npos) << r.out;
  // A bad duration is a usage error naming it.
  r = Ls({"--unused-for", "soon", kNs});
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.err.find("'soon' is not a duration"), std::string::npos) << r.err;
}

TEST_F(ToolsTest, ListsChildrenOfAKey) {
  auto top = Tree();
  const PrefixNodeInfo& shared = top[0].children == 2 ? top[0] : top[1];
  auto kids = Tree(shared.key);
  ASSERT_EQ(kids.size(), 2u);

  ToolRun r = Ls({"--json", std::string(kNs) + "/" + shared.key.ToHex()});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["parent"], shared.key.ToHex());
  ASSERT_EQ(j["increments"].size(), kids.size());
  for (size_t i = 0; i < kids.size(); ++i) {
    ExpectNodeJson(j["increments"][i], kids[i]);
    EXPECT_EQ(kids[i].start_token, 32u);
    EXPECT_EQ(kids[i].parent, shared.key);
  }
  std::set<uint64_t> tokens = {kids[0].tokens, kids[1].tokens};
  EXPECT_EQ(tokens, (std::set<uint64_t>{32, 48}));

  // Trailing slash and upper-case hex are accepted.
  std::string upper = shared.key.ToHex();
  for (char& ch : upper) ch = static_cast<char>(toupper(ch));
  r = Ls({std::string(kNs) + "/" + upper + "/"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, kids[0].key.ToHex() + "\n" + kids[1].key.ToHex() + "\n");
}

TEST_F(ToolsTest, RecursiveTreeShape) {
  auto all = Tree({}, true);
  ASSERT_EQ(all.size(), 5u);  // [0,32), [32,64) A, [64,80) D, [32,80) B, C

  // Depth of each node from the parent links the client reports.
  std::map<ChainKey, size_t> depth;
  for (const auto& n : all) depth[n.key] = n.parent == ChainKey{} ? 0 : depth.at(n.parent) + 1;

  ToolRun r = Ls({"-R", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), all.size()) << r.out;
  size_t max_depth = 0;
  for (size_t i = 0; i < all.size(); ++i) {
    // Each line: 4 columns of tree glyphs per level below the top, then the key.
    const std::string& l = lines[i];
    ASSERT_GE(l.size(), 32u);
    EXPECT_EQ(l.substr(l.size() - 32), all[i].key.ToHex()) << r.out;
    EXPECT_EQ((l.size() - 32) / 4, depth.at(all[i].key)) << r.out;
    max_depth = std::max(max_depth, depth.at(all[i].key));
  }
  EXPECT_EQ(max_depth, 2u);
  EXPECT_EQ(lines[0].find(' '), std::string::npos);  // a top increment: no glyph
  // The glyphs are those of tree(1) in ASCII.
  EXPECT_NE(r.out.find("|-- "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("`-- "), std::string::npos) << r.out;

  // Long form: the same tree in the KEY column of the table.
  r = Ls({"-lR", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  lines = Lines(r.out);
  ASSERT_EQ(lines.size(), all.size() + 1) << r.out;
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_NE(lines[i + 1].find(all[i].key.ToHex()), std::string::npos) << r.out;
    EXPECT_NE(lines[i + 1].find(all[i].tokens == 16 ? "16.0 KiB" : all[i].tokens == 48 ? "48.0 KiB" : "32.0 KiB"),
              std::string::npos)
        << r.out;
  }

  // JSON: nested "subtree" arrays mirror the parent links.
  r = Ls({"-R", "--json", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_TRUE(j["recursive"].get<bool>());
  std::map<std::string, const PrefixNodeInfo*> by_key;
  for (const auto& n : all) by_key[n.key.ToHex()] = &n;
  size_t seen = 0;
  std::function<void(const json&, const std::string&)> walk = [&](const json& arr, const std::string& parent) {
    for (const auto& n : arr) {
      ++seen;
      const PrefixNodeInfo& want = *by_key.at(n["key"].get<std::string>());
      ExpectNodeJson(n, want);
      EXPECT_EQ(want.parent == ChainKey{} ? "" : want.parent.ToHex(), parent);
      EXPECT_EQ(n["subtree"].size(), want.children);
      walk(n["subtree"], n["key"].get<std::string>());
    }
  };
  walk(j["increments"], "");
  EXPECT_EQ(seen, all.size());

  // Below a key: only its descendants, hanging from it.
  const PrefixNodeInfo& shared = *std::find_if(all.begin(), all.end(), [](auto& n) { return n.children == 2; });
  r = Ls({"-R", std::string(kNs) + "/" + shared.key.ToHex()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(Lines(r.out).size(), 3u) << r.out;
  EXPECT_EQ(Lines(r.out)[0].size(), 32u) << r.out;  // a child of the key: no glyph

  // -R without a namespace: every namespace with its tree.
  r = Ls({"-R"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out.rfind("empty-ns:\n\ntools-test:\n", 0), 0u) << r.out;
  EXPECT_EQ(Lines(r.out).size(), 3u + all.size()) << r.out;
  r = Ls({"-R", "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  j = json::parse(r.out);
  ASSERT_EQ(j["namespaces"].size(), 2u);
  EXPECT_TRUE(j["namespaces"][0]["tree"].empty());
  EXPECT_EQ(j["namespaces"][1]["tree"].size(), 2u);
}

TEST_F(ToolsTest, UnicodeTreeInAUtf8Locale) {
  locale_t utf8 = newlocale(LC_CTYPE_MASK, "C.UTF-8", nullptr);
  if (utf8 == nullptr) GTEST_SKIP() << "no C.UTF-8 locale here";
  freelocale(utf8);
  ToolRun r = RunTool(kLs, {"-R", "-s", Socket(), kNs}, {{"LC_ALL", "C.UTF-8"}});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\u2514\u2500\u2500 "), std::string::npos) << r.out;
}

TEST_F(ToolsTest, NodeStats) {
  auto want = *client_->Stats();
  ToolRun r = Stat({"--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["node_id"].get<uint32_t>(), client_->node_id());
  const json& s = j["stats"];
  EXPECT_EQ(s["arena_bytes"].get<uint64_t>(), want.arena_bytes);
  EXPECT_EQ(s["used_bytes"].get<uint64_t>(), want.used_bytes);
  EXPECT_EQ(s["owned_bytes"].get<uint64_t>(), want.owned_bytes);
  EXPECT_EQ(s["tensors"].get<uint64_t>(), want.tensors);
  EXPECT_EQ(s["increments"].get<uint64_t>(), want.prefix_nodes);
  EXPECT_EQ(s["namespaces"].get<uint64_t>(), 2u);
  EXPECT_EQ(s["hits"].get<uint64_t>(), 4u);
  EXPECT_EQ(s["misses"].get<uint64_t>(), 1u);
  EXPECT_DOUBLE_EQ(s["hit_rate"].get<double>(), 0.8);
  EXPECT_EQ(s["hit_tokens"].get<uint64_t>(), want.hit_tokens);
  EXPECT_EQ(s["requested_tokens"].get<uint64_t>(), want.requested_tokens);
  EXPECT_EQ(s["saves"].get<uint64_t>(), want.saves);
  EXPECT_EQ(s["saved_bytes"].get<uint64_t>(), 160u * 1024);
  EXPECT_EQ(s["dedup_bytes"].get<uint64_t>(), want.dedup_bytes);
  EXPECT_GT(want.dedup_bytes, 0u);
  EXPECT_DOUBLE_EQ(s["dedup_ratio"].get<double>(),
                   double(want.dedup_bytes) / double(want.saved_bytes + want.dedup_bytes));
  EXPECT_EQ(s["active_leases"].get<uint64_t>(), 0u);
  EXPECT_FALSE(j.contains("namespace"));

  r = Stat({});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("arena size         64.0 MiB\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hit rate           80.0%\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("saved bytes        160.0 KiB\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("hits               4\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("misses             1\n"), std::string::npos) << r.out;
  // No SSD tier: no SSD section, but the counters are in the JSON (0).
  EXPECT_EQ(r.out.find("ssd"), std::string::npos) << r.out;
  EXPECT_EQ(s["ssd_capacity"].get<uint64_t>(), 0u);
  EXPECT_EQ(s["recovery_corrupt"].get<uint64_t>(), 0u);
  EXPECT_TRUE(s["ssd_compression_ratio"].is_null());
}

TEST_F(ToolsTest, NamespaceStats) {
  auto info = *client_->GetNamespace(kNs);
  auto all = Tree({}, true);
  ToolRun r = Stat({"--json", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  const json& n = j["namespace"];
  EXPECT_EQ(n["name"], kNs);
  EXPECT_EQ(n["bytes"].get<uint64_t>(), info.bytes);
  EXPECT_EQ(n["increments"].get<uint64_t>(), info.prefixes);
  EXPECT_EQ(n["layout"]["layers"], 2);
  EXPECT_EQ(n["layout"]["bytes_per_block"].get<uint64_t>(), SegmentTestLayout().BytesPerBlock());
  uint64_t hits = 0;
  for (const auto& x : all) hits += x.hits;
  EXPECT_EQ(n["tree"]["increments"].get<uint64_t>(), all.size());
  EXPECT_EQ(n["tree"]["tokens"].get<uint64_t>(), 160u);
  EXPECT_EQ(n["tree"]["hits"].get<uint64_t>(), hits);
  EXPECT_EQ(n["tree"]["longest_prefix_tokens"].get<uint64_t>(), 80u);
  EXPECT_EQ(n["tree"]["prefixes"].get<uint64_t>(), 3u);  // B, C and D end in leaves

  r = Stat({kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("namespace          tools-test\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("layout             " + SegmentTestLayout().ToString() + "\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stored bytes       160.0 KiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("mode               0750 (rwxr-x---)\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("stored prefixes    3 (increments without children)\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("owner              " + std::to_string(getuid()) + ":" + std::to_string(getgid()) + "\n"),
            std::string::npos)
      << r.out;
}

// ptstore-stat NAMESPACE --key KEY: one increment, as GetIncrement gives it.
TEST_F(ToolsTest, StatOfAKey) {
  auto all = Tree({}, true);
  // D's tail: [64,80), below A's [32,64), below the shared [0,32).
  auto leaf = std::find_if(all.begin(), all.end(), [](const PrefixNodeInfo& n) { return n.start_token == 64; });
  ASSERT_NE(leaf, all.end());
  auto want = client_->GetIncrement(kNs, leaf->key);
  ASSERT_OK(want);
  ASSERT_EQ(want->tokens, SequentialTokens(7000, 16));

  ToolRun r = Stat({"--json", kNs, "--key", leaf->key.ToHex()});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  EXPECT_EQ(j["node_id"].get<uint32_t>(), client_->node_id());
  EXPECT_EQ(j["namespace"]["name"], kNs);
  EXPECT_EQ(j["namespace"]["layout"]["bytes_per_token"].get<uint64_t>(), SegmentTestLayout().BytesPerToken());
  EXPECT_FALSE(j.contains("stats"));
  const json& i = j["increment"];
  ExpectNodeJson(i, want->node);
  EXPECT_EQ(i["start_token"].get<uint64_t>(), 64u);
  EXPECT_EQ(i["tokens"].get<uint64_t>(), 16u);
  EXPECT_EQ(i["prefix_tokens"].get<uint64_t>(), 80u);
  EXPECT_EQ(i["prefix_bytes"].get<uint64_t>(), 80u * 1024);
  EXPECT_EQ(i["token_ids"].get<std::vector<uint32_t>>(), want->tokens);
  EXPECT_EQ(i["hits"].get<uint64_t>(), 3u);  // the three loads of D

  r = Stat({kNs, "-k", leaf->key.ToHex()});
  ASSERT_EQ(r.rc, 0) << r.err;
  for (const std::string& line :
       {std::string("namespace          tools-test\n"), "key                " + leaf->key.ToHex() + "\n",
        "parent             " + leaf->parent.ToHex() + "\n",
        std::string("tokens             16 (tokens 64..79 of its prefix)\n"),
        std::string("bytes              16.0 KiB (16384)\n"),
        std::string("prefix             80 tokens, 80.0 KiB (this increment and its ancestors)\n"),
        std::string("hits               3\n"), "owner              node " + std::to_string(client_->node_id()) + "\n",
        std::string("class              owned\n"), std::string("tier               dram\n"),
        std::string("children           0\n"),
        std::string("token ids          7000 7001 7002 7003 7004 7005 7006 7007 7008 7009 7010 7011 7012 7013 7014 "
                    "7015\n")}) {
    EXPECT_NE(r.out.find(line), std::string::npos) << line << r.out;
  }
  EXPECT_EQ(r.out.find("arena"), std::string::npos) << r.out;  // the increment only

  // A top increment has no parent.
  auto top = std::find_if(all.begin(), all.end(), [](const PrefixNodeInfo& n) { return n.children == 2; });
  ASSERT_NE(top, all.end());
  r = Stat({kNs, "--key", top->key.ToHex()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("parent             none (a top increment)\n"), std::string::npos) << r.out;
  r = Stat({"--json", kNs, "--key", top->key.ToHex()});
  EXPECT_TRUE(json::parse(r.out)["increment"]["parent"].is_null());

  // An unknown key (exit 1), a malformed one or no namespace (exit 2).
  r = Stat({kNs, "--key", std::string(32, 'a')});
  EXPECT_EQ(r.rc, 1);
  EXPECT_EQ(r.out, "");
  EXPECT_EQ(r.err, "ptstore-stat: not_found: no increment named " + std::string(32, 'a') +
                       " in namespace 'tools-test'\n");
  r = Stat({"no-such-ns", "--key", leaf->key.ToHex()});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("'no-such-ns'"), std::string::npos) << r.err;
  r = Stat({kNs, "--key", "abc"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err, "ptstore-stat: --key: chain key 'abc' must be 32 hex digits (see --help)\n");
  r = Stat({"--key", leaf->key.ToHex()});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.rfind("ptstore-stat: --key needs a namespace", 0), 0u) << r.err;
}

TEST_F(ToolsTest, SocketFromEnvironment) {
  ToolRun r = RunTool(kLs, {}, {{"PTSTORE_SOCKET", Socket()}});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(r.out, "empty-ns\ntools-test\n");
  r = RunTool(kStat, {"--json"}, {{"PTSTORE_SOCKET", Socket()}});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_EQ(json::parse(r.out)["stats"]["namespaces"], 2);
  // -s wins over the environment.
  r = RunTool(kLs, {"-s", Socket()}, {{"PTSTORE_SOCKET", "/nonexistent/ptstored.sock"}});
  EXPECT_EQ(r.rc, 0) << r.err;
}

TEST_F(ToolsTest, UnknownNamespaceOrKey) {
  for (const std::string& tool : {kLs, kStat}) {
    ToolRun r = RunTool(tool, {"-s", Socket(), "no-such-ns"});
    EXPECT_EQ(r.rc, 1) << tool;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
    EXPECT_NE(r.err.find("not_found"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("'no-such-ns'"), std::string::npos) << r.err;
  }
  ToolRun r = Ls({std::string(kNs) + "/" + std::string(32, 'a')});
  EXPECT_EQ(r.rc, 1);
  EXPECT_NE(r.err.find("ptstore-ls: not_found: no increment named " + std::string(32, 'a')), std::string::npos)
      << r.err;
}

TEST_F(ToolsTest, UsageErrors) {
  for (const std::string& bad : {std::string(kNs) + "/xyz", std::string(kNs) + "/" + std::string(31, '0') + "g",
                                 std::string("bad name"), std::string(kNs) + "/" + std::string(32, '0') + "/x"}) {
    ToolRun r = Ls({bad});
    EXPECT_EQ(r.rc, 2) << bad;
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(Lines(r.err).size(), 1u) << r.err;
    EXPECT_EQ(r.err.rfind("ptstore-ls: '" + bad + "'", 0), 0u) << r.err;
  }
  ToolRun r = Ls({std::string(kNs) + "/xyz"});
  EXPECT_EQ(r.err, "ptstore-ls: '" + std::string(kNs) + "/xyz': chain key 'xyz' must be 32 hex digits (see --help)\n");
  r = Ls({"--no-such-flag"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.rfind("ptstore-ls: ", 0), 0u) << r.err;
  r = Stat({"a", "b"});
  EXPECT_EQ(r.rc, 2);
  EXPECT_EQ(r.err.rfind("ptstore-stat: ", 0), 0u) << r.err;
  r = Stat({".dot"});
  EXPECT_EQ(r.rc, 2) << r.err;
  r = RunTool(kLs, {"--help"});
  EXPECT_EQ(r.rc, 0);
  EXPECT_NE(r.out.find("Usage: ptstore-ls"), std::string::npos) << r.out;
}

// A node with an SSD tier and a 1 MiB arena: saves spill evicted tensors
// to SSD, and the tools show where each increment is.
TEST(ToolsSsdTest, TiersAndSsdCounters) {
  std::string ssd = testing::MakeTempDir("ptstore-tools-ssd");
  testing::Daemon daemon;
  testing::Daemon::Options o;
  o.arena_size = "1MiB";
  o.extra_args = {"--ssd-dir", ssd, "--ssd-capacity", "64MiB", "--ssd-compress"};
  ASSERT_OK(daemon.Start(o)) << daemon.ReadLog();
  ClientOptions co;
  co.socket_path = daemon.socket_path();
  auto c = Client::Connect(co);
  ASSERT_OK(c);
  Client& client = **c;
  ASSERT_OK(client.CreateNamespace(kNs, SegmentTestLayout(), "", 0750));
  // 32 prompts of 64 tokens (64 KiB each, compressible) through 1 MiB.
  for (uint32_t p = 0; p < 32; ++p) {
    std::vector<uint8_t> kv(64 * SegmentTestLayout().BytesPerToken());
    for (size_t i = 0; i < kv.size(); ++i) kv[i] = (i % 2) ? 0x3f : static_cast<uint8_t>((i * 7 + p) & 0x0f);
    auto r = client.Save(kNs, SequentialTokens(p * 1000, 64), kv.data(), kv.size());
    ASSERT_OK(r);
  }
  auto want = *client.Stats();
  ASSERT_GT(want.ssd_spills, 0u);
  ASSERT_GT(want.ssd_tensors, 0u);

  // ptstore-stat: the SSD section, and every counter in the JSON.
  ToolRun r = RunTool(kStat, {"-s", daemon.socket_path(), "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  json s = json::parse(r.out)["stats"];
  EXPECT_EQ(s["ssd_capacity"].get<uint64_t>(), 64u << 20);
  EXPECT_EQ(s["ssd_spills"].get<uint64_t>(), want.ssd_spills);
  EXPECT_EQ(s["ssd_spill_bytes"].get<uint64_t>(), want.ssd_spill_bytes);
  EXPECT_EQ(s["ssd_stored_bytes"].get<uint64_t>(), want.ssd_stored_bytes);
  EXPECT_LT(want.ssd_stored_bytes, want.ssd_spill_bytes);  // compressed
  EXPECT_DOUBLE_EQ(s["ssd_compression_ratio"].get<double>(),
                   double(want.ssd_spill_bytes) / double(want.ssd_stored_bytes));
  for (const char* k : {"ssd_file_bytes", "ssd_live_bytes", "ssd_segments", "ssd_tensors", "ssd_hits", "ssd_fills",
                        "ssd_fill_bytes", "ssd_spill_failures", "ssd_evictions", "ssd_read_errors", "ssd_compactions",
                        "recovered_tensors", "recovered_bytes", "recovery_corrupt", "recovery_dropped"}) {
    EXPECT_TRUE(s.contains(k)) << k;
  }
  EXPECT_GT(s["ssd_segments"].get<uint64_t>(), 0u);
  r = RunTool(kStat, {"-s", daemon.socket_path()});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("\n\nssd capacity       64.0 MiB\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nssd spills         " + std::to_string(want.ssd_spills) + " ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nssd compression    "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nrecovery dropped   0\n"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("arena size         1.0 MiB\n"), std::string::npos) << r.out;

  // ptstore-ls: the tier of each increment, as the client reports it.
  auto nodes = *client.ListTree(kNs, {}, true);
  std::map<std::string, std::string> tier_of;
  size_t on_ssd = 0;
  for (const auto& n : nodes) {
    tier_of[n.key.ToHex()] = TierName(n.tier);
    if (n.tier & kTierSsd) ++on_ssd;
  }
  EXPECT_GT(on_ssd, 0u);
  r = RunTool(kLs, {"-s", daemon.socket_path(), "--json", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  json j = json::parse(r.out);
  ASSERT_EQ(j["increments"].size(), nodes.size());
  for (const auto& n : j["increments"]) EXPECT_EQ(n["tier"], tier_of.at(n["key"].get<std::string>()));
  r = RunTool(kLs, {"-s", daemon.socket_path(), "-l", kNs});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto lines = Lines(r.out);
  ASSERT_EQ(lines.size(), nodes.size() + 1) << r.out;
  EXPECT_NE(lines[0].find("  CLASS  TIER"), std::string::npos) << r.out;
  for (size_t i = 1; i < lines.size(); ++i) {
    const std::string key = lines[i].substr(0, 32);
    EXPECT_NE(lines[i].find("  owned  " + tier_of.at(key) + " "), std::string::npos) << r.out;
  }
  EXPECT_NE(r.out.find("  ssd "), std::string::npos) << r.out;

  c->reset();
  EXPECT_EQ(daemon.Stop(), 0) << daemon.ReadLog();
  std::filesystem::remove_all(ssd);
}

TEST(ToolsTestNoServer, ClearMessageAndExit1) {
  std::string dir = testing::MakeTempDir("ptstore-tools-nosrv");
  std::string sock = dir + "/ptstored.sock";
  for (const std::string& tool : {kLs, kStat}) {
    std::string name = tool == kLs ? "ptstore-ls" : "ptstore-stat";
    ToolRun r = RunTool(tool, {"-s", sock});
    EXPECT_EQ(r.rc, 1);
    EXPECT_EQ(r.out, "");
    EXPECT_EQ(r.err, name + ": unavailable: connecting to ptstored at " + sock +
                         ": No such file or directory (is ptstored running?)\n");
    r = RunTool(tool, {}, {{"PTSTORE_SOCKET", sock}});
    EXPECT_EQ(r.rc, 1);
    EXPECT_NE(r.err.find("at " + sock + ":"), std::string::npos) << r.err;
  }
  // A usage error is found before connecting.
  ToolRun r = RunTool(kLs, {"-s", sock, "ns/zz"});
  EXPECT_EQ(r.rc, 2) << r.err;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ptstore

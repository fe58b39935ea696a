// The KV query API across a real 3-node cluster (storage/server/kv_query.h): POST
// /query and /query_by_hash on any node's metrics port answer a prompt's
// longest match on every member by tier (DRAM arena, SSD tier after
// spills), as each member's own listing says; a dead member costs its entry
// (named in "unanswered"), never an error or a hang; bad bodies get a 400
// naming the field and change nothing.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <map>

#include "ptstore/client.h"
#include "ptstore/keys.h"
#include "tests/cluster/kv_check.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/cluster.h"
#include "tests/testing/http_get.h"

namespace ptstore::testing {
namespace {

using Json = nlohmann::json;
using storage::testkv::Gen;
using storage::testkv::kBt;

struct Tiers {
  uint64_t held = 0, dram = 0, ssd = 0;
  bool operator==(const Tiers&) const = default;
};

// What node `c` holds of `prompt` by its own listing: the longest runs from
// the start held at all, wholly in DRAM, wholly on SSD.
Tiers ListedTiers(Client& c, const std::vector<uint32_t>& prompt) {
  const std::vector<ChainKey> keys = ChainKeys(RootKey(kNs, ""), prompt, kBt);
  auto nodes = c.ListTree(kNs, {}, /*recursive=*/true);
  EXPECT_TRUE(nodes.ok()) << nodes.status().ToString();
  // start token -> (tokens, tier) of the prompt's increments
  std::map<uint64_t, std::pair<uint64_t, uint8_t>> on_path;
  if (!nodes.ok()) return {};
  for (const PrefixNodeInfo& n : *nodes) {
    const uint64_t end = n.start_token + n.tokens;
    if (n.tokens == 0 || end / kBt > keys.size() || keys[end / kBt - 1] != n.key) continue;
    on_path[n.start_token] = {n.tokens, static_cast<uint8_t>(n.tier & (kTierDram | kTierSsd))};
  }
  Tiers t;
  bool held = true, dram = true, ssd = true;
  uint64_t at = 0;
  while (on_path.count(at)) {
    const auto [len, tier] = on_path[at];
    at += len;
    held = held && tier != 0;
    dram = dram && (tier & kTierDram);
    ssd = ssd && (tier & kTierSsd);
    if (held) t.held = at;
    if (dram) t.dram = at;
    if (ssd) t.ssd = at;
    if (!held) break;
  }
  return t;
}

Result<HttpReply> Post(uint16_t port, const std::string& path, const std::string& body,
                       const std::string& method = "POST") {
  return HttpExchange(port, method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: application/json\r\n" +
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
}

class KvQueryClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TestCluster::Options o;
    o.nodes = 3;
    o.arena_size = "2MiB";  // 8 prompts of 256 KiB: saves spill to SSD
    o.replicate_after = 1;  // a load through another node keeps a replica there
    o.extra_args = {"--ssd-capacity", "64MiB", "--metrics-port", "auto", "--no-prefault"};
    ssd_root_ = MakeTempDir("ptstore-kvq-ssd");
    ASSERT_FALSE(ssd_root_.empty());
    for (size_t i = 0; i < 3; ++i) o.node_args.push_back({"--ssd-dir", ssd_root_ + "/ssd" + std::to_string(i)});
    cluster_ = std::make_unique<TestCluster>(o);
    ASSERT_TRUE(cluster_->Start().ok());
    ASSERT_TRUE(cluster_->WaitConverged().ok());
    ConnectEach(*cluster_, &clients_);
    for (size_t i = 0; i < 3; ++i) {
      ports_.push_back(MetricsPortFromLog(cluster_->node(i)));
      ASSERT_NE(ports_.back(), 0) << "no metrics port in node " << i << "'s log";
    }
  }
  void TearDown() override {
    if (HasFailure() && cluster_) PrintLogs(*cluster_);
    cluster_.reset();
    if (!ssd_root_.empty()) std::filesystem::remove_all(ssd_root_);
  }
  Json Query(size_t via, const Json& body, const std::string& path = "/query") {
    auto r = Post(ports_[via], path, body.dump());
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    EXPECT_EQ(r->code, 200) << r->body;
    return Json::parse(r->body, nullptr, false);
  }
  // The tiers the answer gives node `i`, in its Mooncake and Dynamo shapes
  // alike (absent: nothing).
  static Tiers Answered(Json j, size_t i) {  // a copy: operator[] may add what is missing
    const std::string name = "node-" + std::to_string(i);
    for (const char* k : {"instances", "scores", "data"}) {
      if (!j.is_object() || !j.contains(k) || !j.at(k).is_object()) {
        ADD_FAILURE() << "no \"" << k << "\" object in " << j.dump();
        return {};
      }
    }
    if (!j["instances"].contains(name)) {
      EXPECT_FALSE(j["scores"].contains(name)) << j.dump();
      EXPECT_FALSE(j["data"].contains(name)) << j.dump();
      return {};
    }
    Json& m = j["instances"][name];
    Tiers t{m["longest_matched"].get<uint64_t>(), m["cpu"].get<uint64_t>(), m["disk"].get<uint64_t>()};
    EXPECT_EQ(m["gpu"], 0);
    EXPECT_EQ(m["dp"]["0"], t.held);
    EXPECT_EQ(m["rank_matches"]["0"]["cpu"], t.dram);
    EXPECT_EQ(m["rank_matches"]["0"]["disk"], t.ssd);
    EXPECT_EQ(j["scores"][name]["0"], t.held) << "Dynamo's scores, in tokens";
    EXPECT_EQ(j["data"][name]["matched_tokens"], t.held);
    EXPECT_EQ(j["data"][name]["L2"], t.dram);
    EXPECT_EQ(j["data"][name]["L3"], t.ssd);
    return t;
  }

  std::unique_ptr<TestCluster> cluster_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<uint16_t> ports_;
  std::string ssd_root_;
};

TEST_F(KvQueryClusterTest, EveryMemberByTierDeadMemberAndBadBodies) {
  // 1024 tokens = 256 KiB each; node 0 saves 12 (3 MiB: its 2 MiB arena
  // spills some to SSD), node 1 loads one of those (keeps a replica).
  std::vector<std::vector<uint32_t>> prompts;
  for (int i = 0; i < 12; ++i) {
    prompts.push_back(Gen(9000 + i, 1024));
    SaveKv(*clients_[0], prompts.back());
  }
  // The document asked about: one the arena spilled (GDSF chooses which).
  size_t pick = prompts.size();
  for (size_t i = 0; i < prompts.size() && pick == prompts.size(); ++i) {
    if (ListedTiers(*clients_[0], prompts[i]).ssd == prompts[i].size()) pick = i;
  }
  ASSERT_LT(pick, prompts.size()) << "no prompt spilled to SSD";
  const std::vector<uint32_t>& doc = prompts[pick];
  ASSERT_EQ(LoadAndCheck(*clients_[1], doc), doc.size());
  std::vector<uint32_t> asked = doc;
  for (uint32_t t : Gen(77, 4 * kBt + 3)) asked.push_back(t);  // a longer prompt: its match is the doc

  const Tiers want0 = ListedTiers(*clients_[0], doc), want1 = ListedTiers(*clients_[1], doc);
  ASSERT_EQ(want0.held, doc.size());
  ASSERT_GT(want0.ssd, 0u) << "the arena spilled the first prompt to SSD";
  ASSERT_EQ(want1.held, doc.size()) << "node 1 kept a replica";
  const Json tokens_body = {{"model", kNs}, {"token_ids", asked}, {"block_size", kBt}, {"lora_name", nullptr}};
  for (size_t via = 0; via < 3; ++via) {
    Json j = Query(via, tokens_body);
    EXPECT_EQ(j["model"], kNs);
    EXPECT_EQ(j["block_size"], kBt);
    EXPECT_EQ(j["local"], via);
    EXPECT_EQ(j["cluster"], true);
    EXPECT_EQ(j["matched_tokens"], doc.size()) << "asked through node " << via;
    EXPECT_EQ(Answered(j, 0), want0) << j.dump();
    EXPECT_EQ(Answered(j, 1), want1) << j.dump();
    EXPECT_EQ(Answered(j, 2), Tiers{}) << "node 2 holds nothing: no entry";
    EXPECT_EQ(j["unanswered"], Json::array());
    ASSERT_EQ(j["frequencies"].size(), doc.size() / kBt);
    EXPECT_EQ(j["frequencies"][0], 2);
  }

  // Dynamo's field names; an instance filter.
  Json j = Query(2, {{"model_name", kNs}, {"token_ids", asked}, {"instance_id", "node-1"}});
  EXPECT_EQ(Answered(j, 1), want1);
  EXPECT_FALSE(j["instances"].contains("node-0")) << j.dump();
  j = Query(2, {{"model_name", kNs}, {"token_ids", asked}, {"instance_id", 0}});
  EXPECT_EQ(Answered(j, 0), want0);
  EXPECT_FALSE(j["instances"].contains("node-1")) << j.dump();

  // By block hash: the int form (low 64 bits, also as Dynamo's negative
  // i64) and the whole chain keys give the same answer; a wrong third hash
  // ends the match at two blocks.
  const std::vector<ChainKey> keys = ChainKeys(RootKey(kNs, ""), doc, kBt);
  Json ints = Json::array(), hex = Json::array(), i64 = Json::array();
  for (const ChainKey& k : keys) {
    ints.push_back(k.lo);
    i64.push_back(static_cast<int64_t>(k.lo));
    hex.push_back(k.ToHex());
  }
  for (const Json& hashes : {ints, i64, hex}) {
    for (size_t via : {0u, 2u}) {
      j = Query(via, {{"model", kNs}, {"block_hashes", hashes}}, "/query_by_hash");
      EXPECT_EQ(Answered(j, 0), want0) << j.dump();
      EXPECT_EQ(Answered(j, 1), want1) << j.dump();
    }
  }
  Json broken = ints;
  broken[2] = keys[2].lo ^ 1;
  j = Query(2, {{"model", kNs}, {"seq_hashes", broken}}, "/query_by_hash");
  EXPECT_EQ(Answered(j, 0).held, 2 * kBt) << j.dump();
  j = Query(2, {{"model", kNs}, {"block_hashes", {12345}}}, "/query_by_hash");
  EXPECT_EQ(j["instances"], Json::object()) << "unknown hashes are a miss, not an error";

  // Bad bodies: 400 naming the field (404 for an unknown namespace, 405 for
  // another method); nothing changes.
  auto before = clients_[0]->ListTree(kNs, {}, true);
  ASSERT_TRUE(before.ok());
  const std::vector<std::tuple<std::string, std::string, int, std::string>> bad = {
      {"/query", "not json", 400, ""},
      {"/query", "[1, 2]", 400, ""},
      {"/query", R"({"token_ids": [1, 2, 3, 4]})", 400, "model"},
      {"/query", R"({"model": "kv", "token_ids": [1, -2]})", 400, "token_ids"},
      {"/query", R"({"model": "kv", "token_ids": "1 2 3"})", 400, "token_ids"},
      {"/query", R"({"model": "kv", "token_ids": [1], "block_size": 16})", 400, "block_size"},
      {"/query", R"({"model": "kv", "token_ids": [1], "colour": "red"})", 400, "colour"},
      {"/query", R"({"model": "kv", "model_name": "other", "token_ids": [1]})", 400, "model_name"},
      {"/query", R"({"model": "kv", "token_ids": [1], "lora_name": "adapter-x"})", 400, "lora_name"},
      {"/query", R"({"model": "kv", "token_ids": [1], "instance_id": "seven"})", 400, "instance_id"},
      {"/query", R"({"model": "nope", "token_ids": [1, 2, 3, 4]})", 404, "model"},
      {"/query_by_hash", R"({"model": "kv", "token_ids": [1]})", 400, "token_ids"},
      {"/query_by_hash", R"({"model": "kv", "block_hashes": [1, "00"]})", 400, "block_hashes"},
      {"/query_by_hash", R"({"model": "kv", "block_hashes": [1], "seq_hashes": [1]})", 400, "seq_hashes"},
      {"/query_by_hash", R"({"model": "kv", "block_hashes": [1.5]})", 400, "block_hashes"},
      {"/query_by_hash", R"({"model": "kv", "block_hashes": [1], "block_size": 0})", 400, "block_size"},
  };
  for (const auto& [path, body, code, field] : bad) {
    auto r = Post(ports_[0], path, body);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->code, code) << path << " " << body << ": " << r->body;
    const Json e = Json::parse(r->body, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << r->body;
    EXPECT_FALSE(e["error"].get<std::string>().empty());
    if (!field.empty()) {
      EXPECT_EQ(e["field"], field) << path << " " << body << ": " << r->body;
    }
  }
  auto get = Post(ports_[0], "/query", "", "GET");
  ASSERT_TRUE(get.ok());
  EXPECT_EQ(get->code, 405);
  EXPECT_EQ(get->headers["allow"], "POST");
  auto after = clients_[0]->ListTree(kNs, {}, true);
  ASSERT_TRUE(after.ok());
  ASSERT_EQ(after->size(), before->size());
  for (size_t i = 0; i < before->size(); ++i) {
    EXPECT_EQ((*after)[i].hits, (*before)[i].hits) << "a query is no hit";
    EXPECT_EQ((*after)[i].times.atime_ns, (*before)[i].times.atime_ns) << "a query is no use";
  }

  // Node 1 dies: asked at once (not yet known dead) and once it is known
  // dead, the answer comes (within Post's deadline: no hang), without node
  // 1 and naming it.
  cluster_->Kill(1);
  for (int round = 0; round < 2; ++round) {
    if (round == 1) {
      ASSERT_TRUE(cluster_->WaitState(0, 1, MemberState::kDead).ok());
    }
    j = Query(0, tokens_body);
    EXPECT_EQ(Answered(j, 0), want0) << j.dump();
    EXPECT_EQ(Answered(j, 1), Tiers{}) << j.dump();
    EXPECT_EQ(j["unanswered"], Json::array({"node-1"})) << j.dump();
    j = Query(2, {{"model", kNs}, {"block_hashes", ints}}, "/query_by_hash");
    EXPECT_EQ(Answered(j, 0), want0) << j.dump();
    EXPECT_EQ(j["unanswered"], Json::array({"node-1"})) << j.dump();
  }
}

}  // namespace
}  // namespace ptstore::testing

// The KV query API across a real 3-node cluster (storage/server/kv_query.h): POST
// /query and /query_by_hash on any node's metrics port answer a prompt's
// longest match on every member by tier (DRAM arena, SSD tier after
// spills), cumulative as upstream counts them and as each member's own
// listing says, in the upstream wire shapes (Mooncake's conductor in
// msgpack, Dynamo's standalone indexer in JSON); a dead member costs its
// entry (named in "unanswered"), never an error or a hang; bad bodies get a
// 400 naming the field and change nothing.
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
using storage::testkv::RandomTokens;
using storage::testkv::kBt;

// A member's counts as upstream's walk gives them (Mooncake
// dev/conductor@19ffa6e4 mooncake-conductor/src/prefixindex/prefix_indexer.cpp
// L440-476): cpu the run from the start in DRAM, disk that run and then on
// through the run on SSD after it.
struct Tiers {
  uint64_t cpu = 0, disk = 0;
  bool operator==(const Tiers&) const = default;
};

// What node `c` holds of `prompt` by its own listing: the run from the
// start held at all (any mix of tiers), and the cumulative counts.
struct Listed {
  uint64_t held = 0;
  uint64_t ssd = 0;  // the run wholly on SSD (in DRAM too or not)
  Tiers tiers;
};
Listed ListedTiers(Client& c, const std::vector<uint32_t>& prompt) {
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
  Listed t;
  for (uint64_t at = 0; on_path.count(at) && on_path[at].second != 0; at += on_path[at].first) {
    t.held = at + on_path[at].first;
  }
  for (uint64_t at = 0; on_path.count(at) && (on_path[at].second & kTierSsd); at += on_path[at].first) {
    t.ssd = at + on_path[at].first;
  }
  uint64_t at = 0;
  for (; on_path.count(at) && (on_path[at].second & kTierDram); at += on_path[at].first) t.tiers.cpu = at + on_path[at].first;
  t.tiers.disk = t.tiers.cpu;
  for (; on_path.count(at) && (on_path[at].second & kTierSsd); at += on_path[at].first) t.tiers.disk = at + on_path[at].first;
  return t;
}

Result<HttpReply> Post(uint16_t port, const std::string& path, const std::string& body,
                       const std::string& method = "POST", const std::string& type = "application/json") {
  return HttpExchange(port, method + " " + path + " HTTP/1.1\r\nHost: localhost\r\nContent-Type: " + type + "\r\n" +
                                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
}

// A body in msgpack, as Mooncake's conductor clients send it.
std::string Msgpack(const Json& j) {
  const std::vector<uint8_t> b = Json::to_msgpack(j);
  return std::string(b.begin(), b.end());
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
    EXPECT_EQ(r->headers["content-type"], "application/json");
    return Json::parse(r->body, nullptr, false);
  }
  // The same asked in msgpack: the answer is msgpack.
  Json QueryMsgpack(size_t via, const Json& body, const std::string& path = "/query", int code = 200) {
    auto r = Post(ports_[via], path, Msgpack(body), "POST", "application/msgpack");
    EXPECT_TRUE(r.ok()) << r.status().ToString();
    if (!r.ok()) return {};
    EXPECT_EQ(r->code, code);
    EXPECT_EQ(r->headers["content-type"], "application/msgpack");
    return Json::from_msgpack(r->body, true, false);
  }
  // The tiers the answer gives node `i`, checked field by field against the
  // upstream shapes (absent from "instances": not asked or no answer).
  //  - instances.<id>: Mooncake's PackCacheHitResult, kvcache-ai/Mooncake
  //    dev/conductor@19ffa6e4 mooncake-conductor/src/kvevent/event_manager.cpp
  //    L666-697: {longest_matched, dp:{"<rank>":int}, rank_matches:{"<rank>":
  //    {gpu,cpu,disk}}, gpu, cpu, disk}, longest_matched = disk, every asked
  //    instance listed; Dynamo's MooncakeOverlapSummary, ai-dynamo/dynamo
  //    lib/kv-router/src/services/overlap.rs@5ea3d18e: the same less
  //    rank_matches. dp and gpu are GPU tokens upstream: 0 here.
  //  - scores.<id>.<rank>: Dynamo's ScoreResponse, lib/kv-router/src/services/
  //    indexer/server.rs@47022ee4 (HashMap<String, HashMap<String, u32>>,
  //    worker id and dp rank in decimal), only workers with a hit;
  //    tree_sizes the same keys (standalone_indexer/server.rs@bc258351).
  //  - data.<id>: the first design's draft, kept with the same counts.
  static Tiers Answered(Json j, size_t i) {  // a copy: operator[] may add what is missing
    const std::string key = std::to_string(i);
    for (const char* k : {"instances", "scores", "tree_sizes", "data"}) {
      if (!j.is_object() || !j.contains(k) || !j.at(k).is_object()) {
        ADD_FAILURE() << "no \"" << k << "\" object in " << j.dump();
        return {};
      }
    }
    EXPECT_FALSE(j["instances"].contains("node-" + key)) << "keys are bare decimal ids: " << j.dump();
    if (!j["instances"].contains(key)) {
      EXPECT_FALSE(j["scores"].contains(key)) << j.dump();
      EXPECT_FALSE(j["data"].contains(key)) << j.dump();
      return {};
    }
    Json& m = j["instances"][key];
    EXPECT_EQ(m.size(), 6u) << m.dump();
    for (const char* k : {"longest_matched", "gpu", "cpu", "disk"}) {
      EXPECT_TRUE(m[k].is_number_unsigned()) << k << " in " << m.dump();
    }
    const Tiers t{m["cpu"].get<uint64_t>(), m["disk"].get<uint64_t>()};
    EXPECT_EQ(m["gpu"], 0);
    EXPECT_LE(m["gpu"].get<uint64_t>(), t.cpu) << "gpu <= cpu <= disk";
    EXPECT_LE(t.cpu, t.disk) << "gpu <= cpu <= disk";
    EXPECT_EQ(m["longest_matched"], t.disk);
    EXPECT_EQ(m["dp"], Json({{"0", 0}})) << "dp is GPU tokens per rank";
    EXPECT_EQ(m["rank_matches"], Json({{"0", {{"gpu", 0}, {"cpu", t.cpu}, {"disk", t.disk}}}}));
    if (t.disk == 0) {
      EXPECT_FALSE(j["scores"].contains(key)) << "Dynamo names the workers that overlap: " << j.dump();
      EXPECT_FALSE(j["tree_sizes"].contains(key)) << j.dump();
      EXPECT_FALSE(j["data"].contains(key)) << j.dump();
      return t;
    }
    EXPECT_EQ(j["scores"][key], Json({{"0", t.disk}})) << "Dynamo's scores, in tokens";
    EXPECT_TRUE(j["scores"][key]["0"].is_number_unsigned());
    EXPECT_EQ(j["tree_sizes"][key], Json({{"0", t.disk / kBt}})) << "in blocks";
    EXPECT_EQ(j["data"][key], Json({{"matched_tokens", t.disk}, {"L2", t.cpu}, {"L3", t.disk}}));
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
    prompts.push_back(RandomTokens(9000 + i, 1024));
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
  for (uint32_t t : RandomTokens(77, 4 * kBt + 3)) asked.push_back(t);  // a longer prompt: its match is the doc

  const Listed listed0 = ListedTiers(*clients_[0], doc), listed1 = ListedTiers(*clients_[1], doc);
  const Tiers want0 = listed0.tiers, want1 = listed1.tiers;
  ASSERT_EQ(listed0.held, doc.size());
  ASSERT_GT(listed0.ssd, 0u) << "the arena spilled the first prompt to SSD";
  ASSERT_EQ(want0.disk, doc.size()) << "on SSD to its end, so the walk reaches it";
  ASSERT_EQ(listed1.held, doc.size()) << "node 1 kept a replica";
  ASSERT_EQ(want1.disk, doc.size()) << "node 1 kept a replica";
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
    EXPECT_EQ(Answered(j, 2), Tiers{}) << "node 2 holds nothing";
    EXPECT_TRUE(j["instances"].contains("2")) << "every member answering is listed, as Mooncake: " << j.dump();
    EXPECT_EQ(j["unanswered"], Json::array());
    ASSERT_EQ(j["frequencies"].size(), doc.size() / kBt);
    EXPECT_EQ(j["frequencies"][0], 2);
    EXPECT_EQ(j["routing_group"], "default");
    EXPECT_EQ(j["tenant_id"], "default");

    // Mooncake's conductor client: msgpack, token_ids as an int array or a
    // bin of little-endian int32 (event_manager.cpp L378-383, L400-601). The
    // same answer, in msgpack.
    Json bin_body = tokens_body;
    std::vector<uint8_t> bin;
    for (uint32_t t : asked) {
      for (int b = 0; b < 4; ++b) bin.push_back(static_cast<uint8_t>(t >> (8 * b)));
    }
    bin_body["token_ids"] = Json::binary(bin);
    for (const Json& body : {tokens_body, bin_body}) {
      const Json m = QueryMsgpack(via, body);
      EXPECT_EQ(m, j) << m.dump();
      EXPECT_EQ(Answered(m, 0), want0) << m.dump();
    }
  }

  // A prompt node 0 holds on SSD and not all in DRAM (its arena spilled
  // it): cpu stops where DRAM does, disk goes on to its end.
  size_t cold = prompts.size();
  for (size_t i = 0; i < prompts.size() && cold == prompts.size(); ++i) {
    const Tiers t = ListedTiers(*clients_[0], prompts[i]).tiers;
    if (i != pick && t.cpu < t.disk && t.disk == prompts[i].size()) cold = i;
  }
  ASSERT_LT(cold, prompts.size()) << "no prompt left DRAM for SSD";
  const Tiers want_cold = ListedTiers(*clients_[0], prompts[cold]).tiers;
  for (size_t via = 0; via < 3; ++via) {
    const Json c = QueryMsgpack(via, {{"model", kNs}, {"token_ids", prompts[cold]}, {"block_size", kBt}});
    EXPECT_EQ(Answered(c, 0), want_cold) << c.dump();
    EXPECT_LT(c["instances"]["0"]["cpu"].get<uint64_t>(), c["instances"]["0"]["disk"].get<uint64_t>()) << c.dump();
    EXPECT_EQ(c["instances"]["0"]["longest_matched"], prompts[cold].size()) << c.dump();
  }

  // Dynamo's current request (server.rs@47022ee4 QueryRequest: model_name,
  // routing_group, tenant_id accepted, lora_name, cache_salt).
  Json j = Query(1, {{"model_name", kNs}, {"token_ids", asked}, {"routing_group", "rg-1"}, {"tenant_id", "t"},
                {"lora_name", nullptr}, {"cache_salt", "s"}});
  EXPECT_EQ(j["routing_group"], "rg-1");
  EXPECT_EQ(j["tenant_id"], "t");
  EXPECT_EQ(Answered(j, 0), want0) << j.dump();
  EXPECT_EQ(Answered(j, 1), want1) << j.dump();
  // Mooncake: an unknown context is 200 with no instances, in msgpack.
  EXPECT_EQ(QueryMsgpack(0, {{"model", "nope"}, {"token_ids", asked}, {"block_size", kBt}}),
            Json({{"instances", Json::object()}}));
  EXPECT_EQ(QueryMsgpack(0, {{"model", kNs}, {"token_ids", asked}, {"block_size", kBt + 1}}),
            Json({{"instances", Json::object()}}));
  EXPECT_EQ(QueryMsgpack(0, {{"model", kNs}, {"token_ids", asked}, {"instance_id", "prefill-a"}}),
            Json({{"instances", Json::object()}}))
      << "Mooncake: an instance it does not know has no instances";
  const Json bad_mp = QueryMsgpack(0, {{"model", kNs}, {"token_ids", asked}, {"colour", 1}}, "/query", 400);
  EXPECT_EQ(bad_mp["reason"], "unknown_field") << bad_mp.dump();
  EXPECT_EQ(bad_mp["field"], "colour") << bad_mp.dump();

  // Dynamo's field names; an instance filter.
  // instance_id: the bare id (Mooncake's instance_id is a string), the
  // older "node-<id>", or a number.
  j = Query(2, {{"model_name", kNs}, {"token_ids", asked}, {"instance_id", "node-1"}});
  EXPECT_EQ(Answered(j, 1), want1);
  EXPECT_FALSE(j["instances"].contains("0")) << j.dump();
  EXPECT_EQ(j["instances"].size(), 1u) << j.dump();
  j = Query(2, {{"model_name", kNs}, {"token_ids", asked}, {"instance_id", "1"}});
  EXPECT_EQ(Answered(j, 1), want1);
  EXPECT_EQ(j["instances"].size(), 1u) << j.dump();
  j = Query(2, {{"model_name", kNs}, {"token_ids", asked}, {"instance_id", 0}});
  EXPECT_EQ(Answered(j, 0), want0);
  EXPECT_FALSE(j["instances"].contains("1")) << j.dump();

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
  EXPECT_EQ(Answered(j, 0).disk, 2 * kBt) << j.dump();
  j = Query(2, {{"model", kNs}, {"block_hashes", {12345}}}, "/query_by_hash");
  // Unknown hashes are a miss, not an error: every member listed with no
  // hit (as Mooncake lists its instances), none in Dynamo's maps.
  EXPECT_EQ(j["instances"].size(), 3u) << j.dump();
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(Answered(j, i), Tiers{}) << "unknown hashes are a miss, not an error";
  EXPECT_EQ(j["scores"], Json::object()) << j.dump();
  EXPECT_EQ(j["frequencies"], Json::array()) << j.dump();

  // Bad bodies: 400 naming the field (404 for an unknown namespace, 405 for
  // another method); nothing changes.
  auto before = clients_[0]->ListTree(kNs, {}, true);
  ASSERT_TRUE(before.ok());
  std::vector<std::tuple<std::string, std::string, int, std::string>> bad = {
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
  bad.push_back({"/query_by_hash", R"({"model": "kv", "block_hashes": [1], "cache_salt": "s"})", 400, "cache_salt"});
  bad.push_back({"/query", R"({"model": "kv", "token_ids": [1], "routing_group": 7})", 400, "routing_group"});
  for (const auto& [path, body, code, field] : bad) {
    auto r = Post(ports_[0], path, body);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    EXPECT_EQ(r->code, code) << path << " " << body << ": " << r->body;
    const Json e = Json::parse(r->body, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << r->body;
    EXPECT_FALSE(e["error"].get<std::string>().empty());
    ASSERT_TRUE(e.contains("reason") && e["reason"].is_string()) << "Mooncake's reason code: " << r->body;
    EXPECT_FALSE(e["reason"].get<std::string>().empty());
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
    EXPECT_FALSE(j["instances"].contains("1")) << "no answer, no entry: " << j.dump();
    EXPECT_TRUE(j["instances"].contains("2")) << j.dump();
    EXPECT_EQ(j["unanswered"], Json::array({"1"})) << j.dump();
    j = Query(2, {{"model", kNs}, {"block_hashes", ints}}, "/query_by_hash");
    EXPECT_EQ(Answered(j, 0), want0) << j.dump();
    EXPECT_EQ(j["unanswered"], Json::array({"1"})) << j.dump();
  }
}

}  // namespace
}  // namespace ptstore::testing

#include "storage/server/kv_query.h"

#include <nlohmann/json.hpp>

#include "storage/server/kv_query_ask.h"

namespace ptstore::storage {

namespace {

using Json = nlohmann::json;

// The answer in the request's encoding: msgpack for a msgpack request (as
// Mooncake's conductor answers), JSON otherwise.
core::HttpResponse Reply(int status, const Json& j, bool msgpack) {
  if (!msgpack) return core::HttpResponse::Json(status, j.dump() + "\n");
  core::HttpResponse r;
  r.status = status;
  r.content_type = "application/msgpack";
  const std::vector<uint8_t> bytes = Json::to_msgpack(j);
  r.body.assign(bytes.begin(), bytes.end());
  return r;
}

// 400 and the like: {"error": what, "reason": Mooncake's code, "field": which}.
core::HttpResponse Refuse(const KvAskError& e, bool msgpack) {
  Json j{{"error", e.message}, {"reason", e.reason}};
  if (!e.field.empty()) j["field"] = e.field;
  return Reply(e.status, j, msgpack);
}

core::HttpResponse FromStatus(const Status& s, bool msgpack, const std::string& field = "") {
  const bool missing = s.code() == Code::kNotFound;
  return Refuse(KvAskError{missing ? 404 : 400, s.message(), missing ? "not_found" : "invalid_value", field}, msgpack);
}

// The answer's maps, from each member's cumulative counts (see kv_query.h).
Json Answer(const KvAsk& a, const Cluster::ClusterTiers& tiers, uint32_t bt, int dp_rank) {
  const std::string rank = std::to_string(dp_rank);
  auto kept = [&a](uint32_t id) { return !a.instance || *a.instance == id; };
  Json instances = Json::object(), scores = Json::object(), tree_sizes = Json::object(), data = Json::object();
  uint64_t longest = 0;
  for (const Cluster::MemberTiers& m : tiers.members) {
    if (!kept(m.node)) continue;
    const std::string key = InstanceKey(m.node);
    const uint64_t cpu = m.cpu_tokens, disk = m.disk_tokens;
    // Mooncake lists every member it asked, hits or not; gpu and dp (GPU
    // tokens upstream) are 0: PTStore holds no GPU memory.
    instances[key] = {{"longest_matched", disk},
                      {"gpu", 0},
                      {"cpu", cpu},
                      {"disk", disk},
                      {"dp", {{rank, 0}}},
                      {"rank_matches", {{rank, {{"gpu", 0}, {"cpu", cpu}, {"disk", disk}}}}}};
    if (disk == 0) continue;  // Dynamo's maps name the workers that overlap
    scores[key] = {{rank, disk}};
    tree_sizes[key] = {{rank, disk / bt}};
    data[key] = {{"matched_tokens", disk}, {"L2", cpu}, {"L3", disk}};
    longest = std::max(longest, disk);
  }
  Json frequencies = Json::array();
  for (uint64_t b = 0; b < longest / bt; ++b) {
    uint64_t n = 0;
    for (const Cluster::MemberTiers& m : tiers.members) n += kept(m.node) && m.disk_tokens > b * bt;
    frequencies.push_back(n);
  }
  Json unanswered = Json::array();
  for (uint32_t id : tiers.unanswered) {
    if (kept(id)) unanswered.push_back(InstanceKey(id));
  }
  return {{"instances", std::move(instances)}, {"scores", std::move(scores)},
          {"frequencies", std::move(frequencies)}, {"tree_sizes", std::move(tree_sizes)},
          {"data", std::move(data)}, {"unanswered", std::move(unanswered)}};
}

}  // namespace

core::HttpResponse KvQuery::Handle(const core::HttpRequest& req) const {
  const bool by_hash = req.path == "/query_by_hash";
  KvAsk a;
  const Json body = DecodeKvBody(req, &a.msgpack);
  if (req.method != "POST") {
    core::HttpResponse r = Refuse({405, req.path + " takes POST with a JSON or msgpack body", "method_not_allowed", ""}, a.msgpack);
    r.headers.emplace_back("Allow", "POST");
    return r;
  }
  if (std::optional<KvAskError> bad = ParseKvAsk(body, by_hash, &a)) return Refuse(*bad, a.msgpack);
  // Mooncake's conductor answers a context (model, lora_name, block_size)
  // it does not know with 200 and no instances; its clients speak msgpack,
  // so msgpack gets that. JSON keeps its 404/400 naming the field (Dynamo's
  // indexer answers an unknown model 404).
  const Json nothing = {{"instances", Json::object()}};
  if (a.no_instance) return Reply(200, nothing, true);
  Result<NamespaceInfo> info = store_->GetNamespace(a.ns);
  if (!info.ok()) {
    if (a.msgpack && info.status().code() == Code::kNotFound) return Reply(200, nothing, true);
    return FromStatus(info.status(), a.msgpack, "model");
  }
  const uint32_t bt = info->layout.block_tokens;
  if (a.block_size && *a.block_size != bt) {
    if (a.msgpack) return Reply(200, nothing, true);
    return Refuse({400,
                   "\"block_size\" is " + std::to_string(*a.block_size) + " but namespace '" + a.ns +
                       "' has blocks of " + std::to_string(bt) + " tokens",
                   "invalid_value", "block_size"},
                  false);
  }
  if (a.lora_name && *a.lora_name != a.ns) {
    if (a.msgpack) return Reply(200, nothing, true);
    return Refuse({400,
                   "\"lora_name\" '" + *a.lora_name + "' is not namespace '" + a.ns +
                       "': a namespace names one model and adapter (events carry it as lora_name)",
                   "invalid_value", "lora_name"},
                  false);
  }
  if (by_hash) {
    Result<std::vector<uint32_t>> t = cluster_ != nullptr ? cluster_->TokensOfHashes(a.ns, a.hashes, a.low64)
                                                          : store_->TokensOfHashes(a.ns, a.hashes, a.low64);
    if (!t.ok()) return FromStatus(t.status(), a.msgpack);
    a.tokens = std::move(*t);
  }
  Result<Cluster::ClusterTiers> tiers = cluster_ != nullptr ? cluster_->QueryTiers(a.ns, a.tokens)
                                                            : QueryTiersLocal(store_, a.ns, a.tokens);
  if (!tiers.ok()) return FromStatus(tiers.status(), a.msgpack);

  Json out = {{"model", a.ns},
              {"block_size", bt},
              {"tenant_id", a.tenant},
              {"routing_group", a.routing_group},
              {"local", store_->options().node_id},
              {"cluster", cluster_ != nullptr},
              {"matched_tokens", tiers->matched_tokens}};
  out.update(Answer(a, *tiers, bt, dp_rank_));
  return Reply(200, out, a.msgpack);
}

}  // namespace ptstore::storage

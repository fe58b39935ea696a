#include "storage/server/kv_query.h"

#include <nlohmann/json.hpp>
#include <cstdlib>
#include <optional>
#include <set>

namespace ptstore::storage {

namespace {

using Json = nlohmann::json;

core::HttpResponse JsonError(int status, const std::string& message, const std::string& field = "") {
  Json j{{"error", message}};
  if (!field.empty()) j["field"] = field;
  return core::HttpResponse::Json(status, j.dump() + "\n");
}

std::string NodeName(uint32_t id) { return "node-" + std::to_string(id); }

// What a request asks, once its body is checked.
struct Ask {
  std::string ns;
  std::string tenant = "default";
  std::optional<uint64_t> block_size;
  std::optional<std::string> lora_name;
  std::optional<uint32_t> instance;
  std::vector<uint32_t> tokens;  // /query
  std::vector<ChainKey> hashes;  // /query_by_hash
  bool low64 = true;
};

// An error response, or nothing when `body` is a good request.
std::optional<core::HttpResponse> Parse(const std::string& text, bool by_hash, Ask* a) {
  Json body = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return JsonError(400, "the body is not a JSON object");
  static const std::set<std::string> kCommon = {"model",     "model_name",  "block_size", "lora_name",
                                                "lora_id",   "tenant_id",   "instance_id", "cache_salt"};
  static const std::set<std::string> kHashes = {"block_hashes", "seq_hashes", "block_hash"};
  for (const auto& [k, v] : body.items()) {
    if (kCommon.count(k) || (by_hash ? kHashes.count(k) : k == "token_ids")) continue;
    return JsonError(400, "unknown field \"" + k + "\" (" + (by_hash ? "/query_by_hash" : "/query") + " takes " +
                              (by_hash ? "block_hashes" : "token_ids") + ", model and the fields of docs/kv-events.md)",
                     k);
  }
  for (const char* name : {"model", "model_name"}) {
    if (!body.contains(name)) continue;
    if (!body[name].is_string() || body[name].get<std::string>().empty()) {
      return JsonError(400, std::string("\"") + name + "\" (the namespace) must be a non-empty string", name);
    }
    const std::string ns = body[name].get<std::string>();
    if (!a->ns.empty() && a->ns != ns) return JsonError(400, "\"model\" and \"model_name\" name different namespaces", name);
    a->ns = ns;
  }
  if (a->ns.empty()) return JsonError(400, "\"model\" (the namespace) must be a non-empty string", "model");
  if (body.contains("block_size")) {
    const Json& b = body["block_size"];
    if (!b.is_number_unsigned() || b.get<uint64_t>() == 0) {
      return JsonError(400, "\"block_size\" must be a positive integer", "block_size");
    }
    a->block_size = b.get<uint64_t>();
  }
  if (body.contains("lora_name") && !body["lora_name"].is_null()) {
    if (!body["lora_name"].is_string()) return JsonError(400, "\"lora_name\" must be a string or null", "lora_name");
    if (!body["lora_name"].get<std::string>().empty()) a->lora_name = body["lora_name"].get<std::string>();
  }
  if (body.contains("lora_id") && !body["lora_id"].is_null() && !body["lora_id"].is_number_integer()) {
    return JsonError(400, "\"lora_id\" must be an integer or null", "lora_id");
  }
  if (body.contains("cache_salt") && !body["cache_salt"].is_null() && !body["cache_salt"].is_string()) {
    return JsonError(400, "\"cache_salt\" must be a string or null", "cache_salt");
  }
  if (body.contains("tenant_id")) {
    if (!body["tenant_id"].is_string()) return JsonError(400, "\"tenant_id\" must be a string", "tenant_id");
    if (!body["tenant_id"].get<std::string>().empty()) a->tenant = body["tenant_id"].get<std::string>();
  }
  if (body.contains("instance_id") && !body["instance_id"].is_null()) {
    const Json& i = body["instance_id"];
    if (i.is_number_unsigned() && i.get<uint64_t>() <= UINT32_MAX) {
      a->instance = i.get<uint32_t>();  // Dynamo's numeric instance ids: the node id
    } else {
      const std::string s = i.is_string() ? i.get<std::string>() : "";
      char* end = nullptr;
      const unsigned long id = s.rfind("node-", 0) == 0 && s.size() > 5 ? std::strtoul(s.c_str() + 5, &end, 10) : 0;
      if (end == nullptr || *end != '\0' || id > UINT32_MAX) {
        return JsonError(400, "\"instance_id\" must name a member as \"node-<id>\" or its id", "instance_id");
      }
      a->instance = static_cast<uint32_t>(id);
    }
  }
  if (!by_hash) {
    if (!body.contains("token_ids") || !body["token_ids"].is_array()) {
      return JsonError(400, "\"token_ids\" must be an array of token ids", "token_ids");
    }
    a->tokens.reserve(body["token_ids"].size());
    for (const Json& t : body["token_ids"]) {
      if (!t.is_number_unsigned() || t.get<uint64_t>() > UINT32_MAX) {
        return JsonError(400, "\"token_ids\" must hold integers in [0, 2^32)", "token_ids");
      }
      a->tokens.push_back(t.get<uint32_t>());
    }
    return std::nullopt;
  }
  const char* field = nullptr;
  for (const char* name : {"block_hashes", "seq_hashes", "block_hash"}) {
    if (!body.contains(name)) continue;
    if (field != nullptr) return JsonError(400, std::string("give one of \"") + field + "\" and \"" + name + "\"", name);
    field = name;
  }
  if (field == nullptr || !body[field].is_array()) {
    return JsonError(400, "\"block_hashes\" must be an array of block hashes", field ? field : "block_hashes");
  }
  bool ints = false, keys = false;
  for (const Json& h : body[field]) {
    if (h.is_number_unsigned()) {
      a->hashes.push_back(ChainKey{0, h.get<uint64_t>()});
      ints = true;
    } else if (h.is_number_integer()) {
      a->hashes.push_back(ChainKey{0, static_cast<uint64_t>(h.get<int64_t>())});  // Dynamo's i64
      ints = true;
    } else if (h.is_string()) {
      Result<ChainKey> k = ChainKey::FromHex(h.get<std::string>());
      if (!k.ok() || h.get<std::string>().size() != 32) {
        return JsonError(400, std::string("\"") + field + "\" strings must be chain keys of 32 hex digits", field);
      }
      a->hashes.push_back(*k);
      keys = true;
    } else {
      return JsonError(400, std::string("\"") + field + "\" must hold 64-bit integers or 32-hex-digit chain keys",
                       field);
    }
  }
  if (ints && keys) {
    return JsonError(400, std::string("\"") + field + "\" mixes integers and chain keys: give one form", field);
  }
  a->low64 = !keys;
  return std::nullopt;
}

}  // namespace

core::HttpResponse KvQuery::Handle(const core::HttpRequest& req) const {
  const bool by_hash = req.path == "/query_by_hash";
  if (req.method != "POST") {
    core::HttpResponse r = JsonError(405, req.path + " takes POST with a JSON body");
    r.headers.emplace_back("Allow", "POST");
    return r;
  }
  Ask a;
  if (std::optional<core::HttpResponse> bad = Parse(req.body, by_hash, &a)) return std::move(*bad);
  Result<NamespaceInfo> info = store_->GetNamespace(a.ns);
  if (!info.ok()) {
    return JsonError(info.status().code() == Code::kNotFound ? 404 : 400, info.status().message(), "model");
  }
  const uint32_t bt = info->layout.block_tokens;
  if (a.block_size && *a.block_size != bt) {
    return JsonError(400,
                     "\"block_size\" is " + std::to_string(*a.block_size) + " but namespace '" + a.ns + "' has blocks of " +
                         std::to_string(bt) + " tokens",
                     "block_size");
  }
  if (a.lora_name && *a.lora_name != a.ns) {
    return JsonError(400,
                     "\"lora_name\" '" + *a.lora_name + "' is not namespace '" + a.ns +
                         "': a namespace names one model and adapter (events carry it as lora_name)",
                     "lora_name");
  }
  if (by_hash) {
    Result<std::vector<uint32_t>> t = cluster_ != nullptr ? cluster_->TokensOfHashes(a.ns, a.hashes, a.low64)
                                                          : store_->TokensOfHashes(a.ns, a.hashes, a.low64);
    if (!t.ok()) return JsonError(t.status().code() == Code::kNotFound ? 404 : 400, t.status().message());
    a.tokens = std::move(*t);
  }

  const uint32_t self = store_->options().node_id;
  Cluster::ClusterTiers tiers;
  if (cluster_ != nullptr) {
    Result<Cluster::ClusterTiers> r = cluster_->QueryTiers(a.ns, a.tokens);
    if (!r.ok()) return JsonError(r.status().code() == Code::kNotFound ? 404 : 400, r.status().message());
    tiers = std::move(*r);
  } else {
    Result<Store::TierMatch> local = store_->MatchTiers(a.ns, a.tokens);
    if (!local.ok()) return JsonError(local.status().code() == Code::kNotFound ? 404 : 400, local.status().message());
    tiers.matched_tokens = local->matched_tokens;
    tiers.members.push_back({self, local->held_tokens, local->dram_tokens, local->ssd_tokens});
  }

  const std::string rank = std::to_string(dp_rank_);
  Json instances = Json::object(), scores = Json::object(), data = Json::object(), unanswered = Json::array();
  uint64_t longest = 0;
  for (const Cluster::MemberTiers& m : tiers.members) {
    if (m.held_tokens == 0 || (a.instance && *a.instance != m.node)) continue;
    const std::string name = NodeName(m.node);
    instances[name] = {{"longest_matched", m.held_tokens},
                       {"gpu", 0},
                       {"cpu", m.dram_tokens},
                       {"disk", m.ssd_tokens},
                       {"dp", {{rank, m.held_tokens}}},
                       {"rank_matches", {{rank, {{"gpu", 0}, {"cpu", m.dram_tokens}, {"disk", m.ssd_tokens}}}}}};
    scores[name] = {{rank, m.held_tokens}};
    data[name] = {{"matched_tokens", m.held_tokens}, {"L2", m.dram_tokens}, {"L3", m.ssd_tokens}};
    longest = std::max(longest, m.held_tokens);
  }
  Json frequencies = Json::array();
  for (uint64_t b = 0; b < longest / bt; ++b) {
    uint64_t n = 0;
    for (const Cluster::MemberTiers& m : tiers.members) {
      if (m.held_tokens > b * bt && !(a.instance && *a.instance != m.node)) n++;
    }
    frequencies.push_back(n);
  }
  for (uint32_t id : tiers.unanswered) {
    if (!(a.instance && *a.instance != id)) unanswered.push_back(NodeName(id));
  }
  Json out = {{"model", a.ns},
              {"block_size", bt},
              {"tenant_id", a.tenant},
              {"local", self},
              {"cluster", cluster_ != nullptr},
              {"matched_tokens", tiers.matched_tokens},
              {"instances", std::move(instances)},
              {"scores", std::move(scores)},
              {"frequencies", std::move(frequencies)},
              {"data", std::move(data)},
              {"unanswered", std::move(unanswered)}};
  return core::HttpResponse::Json(200, out.dump() + "\n");
}

}  // namespace ptstore::storage

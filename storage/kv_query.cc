#include "storage/kv_query.h"

#include <nlohmann/json.hpp>
#include <set>

namespace ptstore::storage {

namespace {

using Json = nlohmann::json;

core::HttpResponse JsonError(int status, const std::string& message) {
  return core::HttpResponse::Json(status, Json{{"error", message}}.dump() + "\n");
}

}  // namespace

core::HttpResponse KvQuery::Handle(const core::HttpRequest& req) const {
  if (req.method != "POST") {
    core::HttpResponse r = JsonError(405, "/query takes POST with a JSON body");
    r.headers.emplace_back("Allow", "POST");
    return r;
  }
  Json body = Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
  if (!body.is_object()) return JsonError(400, "the body is not a JSON object");
  if (!body.contains("model") || !body["model"].is_string() || body["model"].get<std::string>().empty()) {
    return JsonError(400, "\"model\" (the namespace) must be a non-empty string");
  }
  if (!body.contains("token_ids") || !body["token_ids"].is_array()) {
    return JsonError(400, "\"token_ids\" must be an array of token ids");
  }
  std::vector<uint32_t> tokens;
  tokens.reserve(body["token_ids"].size());
  for (const Json& t : body["token_ids"]) {
    if (!t.is_number_unsigned() || t.get<uint64_t>() > UINT32_MAX) {
      return JsonError(400, "\"token_ids\" must hold integers in [0, 2^32)");
    }
    tokens.push_back(t.get<uint32_t>());
  }
  const std::string ns = body["model"].get<std::string>();
  Result<Store::TierMatch> local = store_->MatchTiers(ns, tokens);
  if (!local.ok()) {
    return JsonError(local.status().code() == Code::kNotFound ? 404 : 400, local.status().message());
  }
  const uint32_t self = store_->options().node_id;
  Json data = Json::object();
  if (cluster_ != nullptr) {
    Result<PrefixLocation> loc = cluster_->LocatePrefix(ns, tokens);
    if (loc.ok()) {
      std::set<uint32_t> nodes;
      for (const PrefixSpan& s : loc->spans) nodes.insert(s.nodes.begin(), s.nodes.end());
      for (uint32_t n : nodes) {
        if (n == self) continue;
        const uint64_t held = loc->HeldBy(n);
        if (held > 0) data["node-" + std::to_string(n)] = {{"matched_tokens", held}};
      }
    }
  }
  if (local->held_tokens > 0) {
    data["node-" + std::to_string(self)] = {
        {"matched_tokens", local->held_tokens}, {"L2", local->dram_tokens}, {"L3", local->ssd_tokens}};
  }
  Json out = {{"model", ns},
              {"block_size", local->block_tokens},
              {"data", std::move(data)},
              {"local", self},
              {"cluster", cluster_ != nullptr}};
  return core::HttpResponse::Json(200, out.dump() + "\n");
}

}  // namespace ptstore::storage

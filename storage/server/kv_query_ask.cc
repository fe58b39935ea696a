#include "storage/server/kv_query_ask.h"

#include <cctype>
#include <cstdlib>
#include <set>

namespace ptstore::storage {

namespace {

using Json = nlohmann::json;

KvAskError Bad(std::string message, std::string reason, std::string field = "") {
  return KvAskError{400, std::move(message), std::move(reason), std::move(field)};
}

bool IsMsgpack(const core::HttpRequest& req) {
  const std::string* ct = req.Header("content-type");
  if (ct == nullptr) return false;
  std::string type = ct->substr(0, ct->find(';'));
  while (!type.empty() && std::isspace(static_cast<unsigned char>(type.back()))) type.pop_back();
  for (char& c : type) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return type == "application/msgpack" || type == "application/x-msgpack";
}

// A member's id from "instance_id": a number, its decimal string ("7", the
// key of the answer's maps) or the older "node-7".
std::optional<uint32_t> InstanceOf(const Json& i) {
  if (i.is_number_unsigned()) {
    if (i.get<uint64_t>() > UINT32_MAX) return std::nullopt;
    return i.get<uint32_t>();
  }
  if (!i.is_string()) return std::nullopt;
  std::string s = i.get<std::string>();
  if (s.rfind("node-", 0) == 0) s = s.substr(5);
  if (s.empty() || s.size() > 10 || s.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const unsigned long long id = std::strtoull(s.c_str(), nullptr, 10);
  if (id > UINT32_MAX) return std::nullopt;
  return static_cast<uint32_t>(id);
}

// "token_ids": an array of ints, or (msgpack) a bin of little-endian int32,
// as Mooncake's clients send it.
std::optional<KvAskError> ParseTokens(const Json& t, std::vector<uint32_t>* out) {
  if (t.is_binary()) {
    const std::vector<uint8_t>& b = t.get_binary();
    if (b.size() % 4 != 0) return Bad("\"token_ids\" as bin must be little-endian int32s (4 bytes each)", "invalid_value", "token_ids");
    for (size_t i = 0; i < b.size(); i += 4) {
      const uint32_t v = uint32_t{b[i]} | uint32_t{b[i + 1]} << 8 | uint32_t{b[i + 2]} << 16 | uint32_t{b[i + 3]} << 24;
      if (v > INT32_MAX) return Bad("\"token_ids\" must hold token ids >= 0", "out_of_range", "token_ids");
      out->push_back(v);
    }
    return std::nullopt;
  }
  if (!t.is_array()) return Bad("\"token_ids\" must be an array of token ids", "invalid_type", "token_ids");
  out->reserve(t.size());
  for (const Json& v : t) {
    if (!v.is_number_unsigned() || v.get<uint64_t>() > UINT32_MAX) {
      return Bad("\"token_ids\" must hold integers in [0, 2^32)", "out_of_range", "token_ids");
    }
    out->push_back(v.get<uint32_t>());
  }
  return std::nullopt;
}

// "block_hashes" | "seq_hashes" | "block_hash": ints (the int form, also
// as Dynamo's negative i64) or 32-hex-digit strings (whole chain keys).
std::optional<KvAskError> ParseHashes(const Json& body, KvAsk* a) {
  const char* field = nullptr;
  for (const char* name : {"block_hashes", "seq_hashes", "block_hash"}) {
    if (!body.contains(name)) continue;
    if (field != nullptr) return Bad(std::string("give one of \"") + field + "\" and \"" + name + "\"", "invalid_value", name);
    field = name;
  }
  if (field == nullptr) return Bad("\"block_hashes\" (an array of block hashes) is required", "missing", "block_hashes");
  if (!body[field].is_array()) return Bad(std::string("\"") + field + "\" must be an array of block hashes", "invalid_type", field);
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
        return Bad(std::string("\"") + field + "\" strings must be chain keys of 32 hex digits", "invalid_value", field);
      }
      a->hashes.push_back(*k);
      keys = true;
    } else {
      return Bad(std::string("\"") + field + "\" must hold 64-bit integers or 32-hex-digit chain keys", "invalid_type",
                 field);
    }
  }
  if (ints && keys) return Bad(std::string("\"") + field + "\" mixes integers and chain keys: give one form", "invalid_value", field);
  a->low64 = !keys;
  return std::nullopt;
}

// The string fields: the namespace, lora_name, tenant_id, routing_group,
// cache_salt.
std::optional<KvAskError> ParseNames(const Json& body, bool by_hash, KvAsk* a) {
  for (const char* name : {"model", "model_name"}) {
    if (!body.contains(name)) continue;
    if (!body[name].is_string() || body[name].get<std::string>().empty()) {
      return Bad(std::string("\"") + name + "\" (the namespace) must be a non-empty string", "invalid_type", name);
    }
    const std::string ns = body[name].get<std::string>();
    if (!a->ns.empty() && a->ns != ns) return Bad("\"model\" and \"model_name\" name different namespaces", "invalid_value", name);
    a->ns = ns;
  }
  if (a->ns.empty()) return Bad("\"model\" (the namespace) must be a non-empty string", "missing", "model");
  if (body.contains("lora_name") && !body["lora_name"].is_null()) {
    if (!body["lora_name"].is_string()) return Bad("\"lora_name\" must be a string or null", "invalid_type", "lora_name");
    if (!body["lora_name"].get<std::string>().empty()) a->lora_name = body["lora_name"].get<std::string>();
  }
  for (const auto& [name, out] : {std::pair{"tenant_id", &a->tenant}, std::pair{"routing_group", &a->routing_group}}) {
    if (!body.contains(name)) continue;
    if (!body[name].is_string()) return Bad(std::string("\"") + name + "\" must be a string", "invalid_type", name);
    if (!body[name].get<std::string>().empty()) *out = body[name].get<std::string>();
  }
  if (body.contains("cache_salt") && !body["cache_salt"].is_null()) {
    if (!body["cache_salt"].is_string()) return Bad("\"cache_salt\" must be a string or null", "invalid_type", "cache_salt");
    // As Dynamo's /query_by_hash: the hashes were taken with the stream's
    // own seed, a salt cannot change them.
    if (by_hash) return Bad("\"cache_salt\" must be null on /query_by_hash (the hashes already carry the seed)", "unsupported", "cache_salt");
  }
  return std::nullopt;
}

}  // namespace

Json DecodeKvBody(const core::HttpRequest& req, bool* msgpack) {
  *msgpack = IsMsgpack(req);
  if (*msgpack) return Json::from_msgpack(req.body, /*strict=*/true, /*allow_exceptions=*/false);
  return Json::parse(req.body, nullptr, /*allow_exceptions=*/false);
}

std::optional<KvAskError> ParseKvAsk(const Json& body, bool by_hash, KvAsk* a) {
  if (!body.is_object()) {
    return Bad(std::string("the body is not a ") + (a->msgpack ? "msgpack map" : "JSON object"), "invalid_json");
  }
  static const std::set<std::string> kCommon = {"model",     "model_name", "block_size",    "lora_name", "lora_id",
                                                "tenant_id", "instance_id", "routing_group", "cache_salt"};
  static const std::set<std::string> kHashes = {"block_hashes", "seq_hashes", "block_hash"};
  for (const auto& [k, v] : body.items()) {
    if (kCommon.count(k) || (by_hash ? kHashes.count(k) : k == "token_ids")) continue;
    return Bad("unknown field \"" + k + "\" (" + (by_hash ? "/query_by_hash" : "/query") + " takes " +
                   (by_hash ? "block_hashes" : "token_ids") + ", model and the fields of docs/kv-events.md)",
               "unknown_field", k);
  }
  if (std::optional<KvAskError> e = ParseNames(body, by_hash, a)) return e;
  if (body.contains("block_size")) {
    const Json& b = body["block_size"];
    if (!b.is_number_unsigned() || b.get<uint64_t>() == 0) {
      return Bad("\"block_size\" must be a positive integer", "out_of_range", "block_size");
    }
    a->block_size = b.get<uint64_t>();
  }
  if (body.contains("lora_id") && !body["lora_id"].is_null() && !body["lora_id"].is_number_integer()) {
    return Bad("\"lora_id\" must be an integer or null", "invalid_type", "lora_id");
  }
  if (body.contains("instance_id") && !body["instance_id"].is_null()) {
    a->instance = InstanceOf(body["instance_id"]);
    // Mooncake's instance_id is any string, and one it does not know has
    // no instances: so for its (msgpack) clients; JSON names the field.
    a->no_instance = !a->instance && a->msgpack && body["instance_id"].is_string();
    if (!a->instance && !a->no_instance) {
      return Bad("\"instance_id\" must name a member by its id (\"7\", 7 or \"node-7\")", "invalid_value", "instance_id");
    }
  }
  if (by_hash) return ParseHashes(body, a);
  if (!body.contains("token_ids")) return Bad("\"token_ids\" (an array of token ids) is required", "missing", "token_ids");
  return ParseTokens(body["token_ids"], &a->tokens);
}

}  // namespace ptstore::storage

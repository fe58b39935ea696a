// What a KV query asks (storage/server/kv_query.h, docs/kv-events.md "Query
// API"), decoded and checked from its body: JSON, or msgpack when the
// request says `Content-Type: application/msgpack` (Mooncake's conductor
// speaks nothing else). Field names are the union of Mooncake's and
// Dynamo's requests; every field is checked, and what is not one of them
// is refused, naming it.
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/http_message.h"
#include "ptstore/keys.h"

namespace ptstore::storage {

struct KvAsk {
  bool msgpack = false;  // the body was msgpack: so is the answer
  std::string ns;        // "model" (Mooncake) or "model_name" (Dynamo)
  std::string tenant = "default";         // Mooncake's tenant_id and Dynamo's older one: echoed
  std::string routing_group = "default";  // Dynamo's: echoed
  std::optional<uint64_t> block_size;
  std::optional<std::string> lora_name;  // null and "" are none
  std::optional<uint32_t> instance;      // "instance_id": keep that member only
  bool no_instance = false;              // msgpack: an instance_id naming no node id (Mooncake: no instances)
  std::vector<uint32_t> tokens;          // /query
  std::vector<ChainKey> hashes;          // /query_by_hash
  bool low64 = true;                     // hashes are the int form (low 64 bits of chain keys)
};

// A refused request: the status, what was wrong, Mooncake's `reason` code
// ("invalid_json", "unknown_field", "missing", "invalid_type",
// "invalid_value", "out_of_range", "unsupported"...) and the field.
struct KvAskError {
  int status = 400;
  std::string message;
  std::string reason;
  std::string field;
};

// The body of `req` as a document: JSON, or msgpack by its Content-Type
// (application/msgpack or application/x-msgpack). Discarded (is_discarded())
// when it does not decode.
nlohmann::json DecodeKvBody(const core::HttpRequest& req, bool* msgpack);

// Fills `a` from `body`, or says what is wrong. `by_hash`: /query_by_hash.
std::optional<KvAskError> ParseKvAsk(const nlohmann::json& body, bool by_hash, KvAsk* a);

// The key of a member in every map of the answer, and the instance_id a
// router names it by: its node id in decimal ("7"), as Dynamo keys its
// workers (WorkerId u64, to_string) and as a Mooncake instance_id string.
inline std::string InstanceKey(uint32_t node) { return std::to_string(node); }

}  // namespace ptstore::storage

#include "fs/xattrs.h"

namespace ptstore::fs {

uint64_t ReplicaCount(const IncrementLocation& where) {
  uint64_t n = 0;
  for (uint32_t node : where.nodes) n += node != where.owner;
  return n;
}

std::vector<std::pair<std::string, std::string>> IncrementXattrs(const PrefixNodeInfo& n,
                                                                 const IncrementLocation* where) {
  const std::string p = kXattrPrefix;
  return {
      {p + "tokens", std::to_string(n.tokens)},
      {p + "bytes", std::to_string(n.bytes)},
      {p + "start_token", std::to_string(n.start_token)},
      {p + "owner", std::to_string(n.tensor.owner().value)},
      {p + "tier", TierName(n.tier)},
      {p + "hits", std::to_string(n.hits)},
      {p + "replicas", where ? std::to_string(ReplicaCount(*where)) : ""},
      {p + "chain_key", n.key.ToHex()},
      {p + "cache_class", CacheClassName(n.cache_class)},
  };
}

std::vector<std::pair<std::string, std::string>> NamespaceXattrs(const NamespaceInfo& ns) {
  const std::string p = kXattrPrefix;
  return {
      {p + "layout", ns.layout.ToString()},
      {p + "bytes", std::to_string(ns.bytes)},
      {p + "prefixes", std::to_string(ns.prefixes)},
  };
}

std::optional<std::string> FindXattr(const std::vector<std::pair<std::string, std::string>>& attrs,
                                     const std::string& name) {
  for (const auto& [k, v] : attrs) {
    if (k == name) return v;
  }
  return std::nullopt;
}

std::string XattrList(const std::vector<std::pair<std::string, std::string>>& attrs) {
  std::string out;
  for (const auto& [k, v] : attrs) {
    out += k;
    out.push_back('\0');
  }
  return out;
}

}  // namespace ptstore::fs

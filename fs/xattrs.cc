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

std::vector<std::pair<std::string, std::string>> NamespaceXattrs(const NamespaceInfo& ns,
                                                                 const NamespaceQuota* quota) {
  const std::string p = kXattrPrefix;
  std::vector<std::pair<std::string, std::string>> out = {
      {p + "layout", ns.layout.ToString()},
      {p + "bytes", std::to_string(ns.bytes)},
      {p + "prefixes", std::to_string(ns.prefixes)},
  };
  if (quota != nullptr) {
    out.push_back({p + "quota.dram", std::to_string(quota->dram_quota)});
    out.push_back({p + "quota.ssd", std::to_string(quota->ssd_quota)});
    out.push_back({p + "used.dram", std::to_string(quota->dram_bytes)});
    out.push_back({p + "used.ssd", std::to_string(quota->ssd_bytes)});
  }
  return out;
}

std::optional<QuotaTier> QuotaXattrTier(const std::string& name) {
  const std::string prefix = kQuotaXattrPrefix;
  if (name.rfind(prefix, 0) != 0) return std::nullopt;
  auto tier = ParseQuotaTier(name.substr(prefix.size()));
  if (!tier.ok()) return std::nullopt;
  return *tier;
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

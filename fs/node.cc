#include "fs/node.h"

#include <functional>

namespace ptstore::fs {

std::string NodeRef::ToString() const {
  switch (kind) {
    case NodeKind::kRoot: return "/";
    case NodeKind::kNamespace: return "/" + ns;
    case NodeKind::kLayoutFile: return "/" + ns + "/" + kLayoutName;
    case NodeKind::kIncrement: return "/" + ns + "/.../" + key.ToHex();
    case NodeKind::kKvFile: return "/" + ns + "/.../" + key.ToHex() + "/" + kKvName;
    case NodeKind::kTokensFile: return "/" + ns + "/.../" + key.ToHex() + "/" + kTokensName;
  }
  return "?";
}

size_t NodeRefHash::operator()(const NodeRef& r) const {
  uint64_t h = std::hash<std::string>()(r.ns);
  h ^= ChainKeyHash()(r.key) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
  h ^= static_cast<uint64_t>(r.kind) * 0xff51afd7ed558ccdULL;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ULL;
  h ^= h >> 33;
  return static_cast<size_t>(h);
}

}  // namespace ptstore::fs

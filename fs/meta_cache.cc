#include "fs/meta_cache.h"

namespace ptstore::fs {

void MetaCache::SetEnabled(bool enabled) {
  core::MutexLock lock(mu_);
  enabled_ = enabled;
  ns_.clear();
  all_.reset();
  ++gen_;
}

bool MetaCache::enabled() const {
  core::MutexLock lock(mu_);
  return enabled_;
}

uint64_t MetaCache::generation() const {
  core::MutexLock lock(mu_);
  return gen_;
}

std::optional<NamespaceInfo> MetaCache::Namespace(const std::string& ns) const {
  core::MutexLock lock(mu_);
  auto it = ns_.find(ns);
  if (it == ns_.end()) return std::nullopt;
  return it->second.info;
}

std::optional<std::vector<NamespaceInfo>> MetaCache::Namespaces() const {
  core::MutexLock lock(mu_);
  return all_;
}

std::optional<PrefixNodeInfo> MetaCache::Increment(const std::string& ns, const ChainKey& key) const {
  core::MutexLock lock(mu_);
  auto it = ns_.find(ns);
  if (it == ns_.end()) return std::nullopt;
  auto n = it->second.nodes.find(key);
  if (n == it->second.nodes.end()) return std::nullopt;
  return n->second;
}

std::optional<std::vector<PrefixNodeInfo>> MetaCache::Children(const std::string& ns, const ChainKey& parent) const {
  core::MutexLock lock(mu_);
  auto it = ns_.find(ns);
  if (it == ns_.end()) return std::nullopt;
  const NsEntry& e = it->second;
  auto c = e.children.find(parent);
  if (c == e.children.end()) return std::nullopt;
  std::vector<PrefixNodeInfo> out;
  out.reserve(c->second.size());
  for (const ChainKey& k : c->second) {
    auto n = e.nodes.find(k);
    if (n == e.nodes.end()) return std::nullopt;  // its times moved: ask again
    out.push_back(n->second);
  }
  return out;
}

std::optional<ChainKey> MetaCache::ParentOf(const std::string& ns, const ChainKey& key) const {
  core::MutexLock lock(mu_);
  auto it = ns_.find(ns);
  if (it == ns_.end()) return std::nullopt;
  auto p = it->second.parent_of.find(key);
  if (p == it->second.parent_of.end()) return std::nullopt;
  return p->second;
}

void MetaCache::PutNamespace(uint64_t gen, const NamespaceInfo& info) {
  core::MutexLock lock(mu_);
  if (Fresh(gen)) ns_[info.name].info = info;
}

void MetaCache::PutNamespaces(uint64_t gen, const std::vector<NamespaceInfo>& all) {
  core::MutexLock lock(mu_);
  if (!Fresh(gen)) return;
  all_ = all;
  for (const NamespaceInfo& n : all) ns_[n.name].info = n;
}

void MetaCache::PutIncrement(uint64_t gen, const std::string& ns, const PrefixNodeInfo& node) {
  core::MutexLock lock(mu_);
  if (!Fresh(gen)) return;
  NsEntry& e = ns_[ns];
  e.nodes[node.key] = node;
  e.parent_of[node.key] = node.parent;
}

void MetaCache::PutListing(uint64_t gen, const std::string& ns, const ChainKey& parent,
                           const std::vector<PrefixNodeInfo>& nodes, bool recursive) {
  core::MutexLock lock(mu_);
  if (!Fresh(gen)) return;
  NsEntry& e = ns_[ns];
  std::unordered_map<ChainKey, std::vector<ChainKey>, ChainKeyHash> lists;
  lists[parent];  // an empty listing is a listing
  for (const PrefixNodeInfo& n : nodes) {
    e.nodes[n.key] = n;
    e.parent_of[n.key] = n.parent;
    lists[n.parent].push_back(n.key);
    // In a whole subtree every node's children are listed, none or some.
    if (recursive) lists[n.key];
  }
  for (auto& [p, keys] : lists) e.children[p] = std::move(keys);
}

void MetaCache::DropNode(NsEntry& e, const ChainKey& key) {
  e.nodes.erase(key);
}

void MetaCache::Apply(const TreeChange& c) {
  core::MutexLock lock(mu_);
  ++gen_;
  all_.reset();  // the root's times are the newest of every namespace's
  if (c.kind == ChangeKind::kNamespace) {
    ns_.erase(c.ns);
    return;
  }
  auto it = ns_.find(c.ns);
  if (it == ns_.end()) return;
  NsEntry& e = it->second;
  e.info.reset();  // its times, bytes and prefixes
  switch (c.kind) {
    case ChangeKind::kAdded:
      e.children.erase(c.parent);
      DropNode(e, c.parent);  // its number of children
      break;
    case ChangeKind::kRemoved: {
      e.children.erase(c.parent);
      DropNode(e, c.parent);
      DropNode(e, c.key);
      e.children.erase(c.key);
      auto p = e.parent_of.find(c.key);
      if (p != e.parent_of.end() && p->second == c.parent) e.parent_of.erase(p);
      break;
    }
    case ChangeKind::kTimes: {
      // The key and its ancestors: a use of it is a use of its prefix.
      ChainKey k = c.key;
      for (size_t guard = 0; k != ChainKey{} && guard < (1u << 20); ++guard) {
        DropNode(e, k);
        auto p = e.parent_of.find(k);
        if (p == e.parent_of.end()) break;
        k = p->second;
      }
      break;
    }
    case ChangeKind::kNamespace:
      break;
  }
}

void MetaCache::DropNamespace(const std::string& ns) {
  core::MutexLock lock(mu_);
  ++gen_;
  all_.reset();
  ns_.erase(ns);
}

void MetaCache::Clear() {
  core::MutexLock lock(mu_);
  ++gen_;
  all_.reset();
  ns_.clear();
}

size_t MetaCache::increments() const {
  core::MutexLock lock(mu_);
  size_t n = 0;
  for (const auto& [name, e] : ns_) n += e.nodes.size();
  return n;
}

}  // namespace ptstore::fs

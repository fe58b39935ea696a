// Listing the index (store.h): the increments under a node, one increment
// by its key (pinned if asked), and the times of increments (ptstore(7)
// "Times"): uses, touches, and the change log of each namespace's tree.
#include <algorithm>

#include "storage/cache/store.h"

namespace ptstore::storage {

void Store::WatchTreeLocked(Namespace* ns) {
  ns->tree->SetOnChange([this, name = ns->info.name](ChangeKind kind, const ChainKey& key, const ChainKey& parent) {
    changes_.Append(kind, name, key, parent);
  });
}

void Store::TouchLocked(Namespace* ns, const Match& m, uint64_t now) {
  bool used = false;
  for (const MatchStep& s : m.path) {
    RadixNode* n = s.node;
    if (n->times.atime_ns >= now) continue;
    n->times.atime_ns = now;
    NoteTimesChangedLocked(n->tensor);
    used = true;
  }
  if (used) {
    const RadixNode* last = m.path.back().node;
    changes_.Append(ChangeKind::kTimes, ns->info.name, last->key, last->parent->key);
  }
  if (!m.path.empty()) ns->info.times.atime_ns = std::max(ns->info.times.atime_ns, now);
}

bool Store::RaiseAncestorsAtimeLocked(RadixNode* n, uint64_t atime_ns) {
  bool raised = false;
  for (RadixNode* a = n->parent; a != nullptr && a->tensor != nullptr; a = a->parent) {
    if (a->times.atime_ns >= atime_ns) continue;
    a->times.atime_ns = atime_ns;
    NoteTimesChangedLocked(a->tensor);
    raised = true;
  }
  return raised;
}

void Store::NoteTimesChangedLocked(Tensor* t) {
  if (t->on_ssd() || t->stub_on_ssd()) times_dirty_.insert(t->id.value);
}

Times Store::TensorTimesLocked(const Tensor& t) const {
  Times out;
  for (const RadixNode* n : t.nodes) out.Merge(n->times);
  return out;
}

Result<std::vector<PrefixNodeInfo>> Store::ListTree(const std::string& ns_name, const ChainKey& parent,
                                                    bool recursive) const {
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  const RadixNode* start = ns->tree->root();
  if (parent != ChainKey{}) {
    start = ns->tree->FindByKey(parent);
    if (start == nullptr) {
      return NotFound("no increment named " + parent.ToHex() + " in namespace '" + ns_name + "'");
    }
  }
  const uint32_t bt = ns->info.layout.block_tokens;
  // All of it under mu_ (a consistent answer), so kept lean: no allocation
  // per node (one stack, children pushed in reverse key order in place).
  std::vector<PrefixNodeInfo> out;
  if (recursive && start == ns->tree->root()) out.reserve(ns->tree->node_count());  // a subtree: as it grows
  std::vector<const RadixNode*> stack;
  auto push_children = [&stack](const RadixNode* n) {
    const size_t first = stack.size();
    for (const auto& [k, child] : n->children) stack.push_back(child.get());
    std::sort(stack.begin() + first, stack.end(), [](auto* a, auto* b) { return b->key < a->key; });
  };
  push_children(start);
  while (!stack.empty()) {
    const RadixNode* n = stack.back();
    stack.pop_back();
    out.push_back(NodeInfoLocked(n, bt));
    if (recursive) push_children(n);
  }
  return out;
}

PrefixNodeInfo Store::NodeInfoLocked(const RadixNode* n, uint32_t bt) const {
  PrefixNodeInfo info;
  info.key = n->key;
  info.parent = n->parent->tensor ? n->parent->key : ChainKey{};
  info.start_token = n->start_block * bt;
  info.tokens = n->tokens.size();
  info.bytes = n->length;
  info.hits = n->hits;
  info.tensor = n->tensor->id;
  info.cache_class = n->tensor->cache_class;
  info.children = static_cast<uint32_t>(n->children.size());
  info.pins = n->tensor->pins();
  info.tier = static_cast<uint8_t>((n->tensor->in_dram() ? kTierDram : 0) | (n->tensor->on_ssd() ? kTierSsd : 0) |
                                   (n->tensor->remote() ? kTierRemote : 0));
  info.times = n->times;
  return info;
}

Result<IncrementResult> Store::Increment(const std::string& ns_name, const ChainKey& key, bool pin,
                                         bool whole_prefix, uint64_t session, uint64_t lease_ms) {
  IncrementResult r;
  std::vector<uint32_t> prefix;  // every token up to the increment's end
  {
    core::MutexLock lk(mu_);
    PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
    const RadixNode* n = ns->tree->FindByKey(key);
    if (n == nullptr) return NotFound("no increment named " + key.ToHex() + " in namespace '" + ns_name + "'");
    r.node = NodeInfoLocked(n, ns->info.layout.block_tokens);
    r.tokens = n->tokens;
    if (!pin) return r;
    std::vector<const RadixNode*> path;
    for (const RadixNode* a = n; a->tensor != nullptr; a = a->parent) path.push_back(a);
    for (auto it = path.rbegin(); it != path.rend(); ++it) {
      prefix.insert(prefix.end(), (*it)->tokens.begin(), (*it)->tokens.end());
    }
  }
  // Pin takes the mutex again and reads SSD-only parts back.
  PTS_ASSIGN_OR_RETURN(PrefixResult p, Pin(ns_name, prefix, session, lease_ms));
  if (p.matched_tokens < prefix.size()) {
    if (p.lease_id) Release(p.lease_id, session).IgnoreError();
    core::MutexLock lk(mu_);
    Result<Namespace*> ns = FindLocked(ns_name);
    if (!ns.ok() || (*ns)->tree->FindByKey(key) == nullptr) {
      return NotFound("increment " + key.ToHex() + " of namespace '" + ns_name + "' was removed");
    }
    return ResourceExhausted("the prefix of increment " + key.ToHex() + " (" + std::to_string(prefix.size()) +
                             " tokens) does not fit in the arena at once");
  }
  r.lease_id = p.lease_id;
  r.extents = std::move(p.extents);
  if (!whole_prefix) {
    // Only the increment's own bytes: the last node.bytes of the prefix.
    uint64_t skip = 0;
    for (const Extent& x : r.extents) skip += x.length;
    skip -= r.node.bytes;
    std::vector<Extent> own;
    for (Extent x : r.extents) {
      if (skip >= x.length) {
        skip -= x.length;
        continue;
      }
      x.offset += skip;
      x.arena_offset += skip;
      x.length -= skip;
      skip = 0;
      own.push_back(x);
    }
    r.extents = std::move(own);
  }
  return r;
}

Result<PrefixNodeInfo> Store::SetTimes(const std::string& ns_name, const ChainKey& key, uint64_t atime_ns,
                                       uint64_t mtime_ns) {
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  RadixNode* n = ns->tree->FindByKey(key);
  if (n == nullptr) return NotFound("no increment named " + key.ToHex() + " in namespace '" + ns_name + "'");
  const uint64_t now = WallClockNs();
  if (atime_ns != 0) {
    n->times.atime_ns = atime_ns;
    RaiseAncestorsAtimeLocked(n, atime_ns);  // a use of it is a use of its prefix
  }
  if (mtime_ns != 0) n->times.mtime_ns = mtime_ns;
  n->times.ctime_ns = now;
  NoteTimesChangedLocked(n->tensor);
  ns->info.times.Merge(n->times);
  changes_.Append(ChangeKind::kTimes, ns_name, key, n->parent->key);
  return NodeInfoLocked(n, ns->info.layout.block_tokens);
}

}  // namespace ptstore::storage

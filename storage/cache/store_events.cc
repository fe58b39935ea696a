// The Store's KV events (storage/cache/kv_event.h, docs/kv-events.md): what this
// node holds, block by block and medium by medium, as routers see it.
//
// Invariant (while a sink is set): every radix node's `announced` bits are
// the media its blocks were last published in, and HeldMediaLocked of its
// tensor is what they should be. Every place that changes a tensor's media
// (a save, a spill, a fill, a freed DRAM copy, a dropped SSD copy, a fetched
// replica kept) calls SyncTensorEventsLocked; a node that leaves the index
// is published as removed in every medium it was announced in
// (OnNodeRemovedLocked); a split hands its bits to the upper half (the same
// blocks). So a subscriber that applies the events in order holds exactly
// what this node holds, in every namespace the sink publishes: one it does
// not (`quiet`, KvEventSink::Publishes) makes no event at all.
#include "storage/cache/store.h"

namespace ptstore::storage {

namespace {
constexpr uint8_t kCpuBit = static_cast<uint8_t>(KvMedium::kCpu);
constexpr uint8_t kStorageBit = static_cast<uint8_t>(KvMedium::kStorage);
}  // namespace

uint8_t Store::HeldMediaLocked(const Tensor& t) const {
  if (!t.in_index()) return 0;
  uint8_t m = 0;
  // A replica fetched for one load (transient) is not kept: not announced.
  if (t.in_dram() && !t.transient()) m |= kCpuBit;
  if (t.on_ssd()) m |= kStorageBit;
  return m;
}

void Store::EmitNodeEventLocked(const RadixNode* n, KvEventKind kind, KvMedium medium, bool force) {
  const Namespace* ns = n->tensor->ns;
  KvEvent e;
  e.kind = kind;
  e.medium = medium;
  e.ns = ns->info.name;
  e.group = KvNamespaceGroup(e.ns);
  const bool top = n->parent == nullptr || n->parent->tensor == nullptr;  // below the root
  e.prev = top ? ns->root_key : n->parent->key;
  e.has_parent = !top;
  e.salted = !ns->salt.empty();
  e.block_tokens = ns->tree->block_tokens();
  e.spec = KvCacheSpecOf(ns->info.layout);
  e.tokens = events_->RecycledTokens();
  e.tokens.assign(n->tokens.begin(), n->tokens.end());
  events_->Publish(std::move(e), force);
}

void Store::SyncNodeEventsLocked(RadixNode* n, uint8_t held, bool force) {
  if (n->tensor->ns->quiet) return;  // never announced: `announced` stays 0
  const uint8_t was = n->announced;
  if (was == held) return;
  for (uint8_t bit : {kCpuBit, kStorageBit}) {
    if ((was & bit) && !(held & bit)) EmitNodeEventLocked(n, KvEventKind::kRemoved, static_cast<KvMedium>(bit), force);
  }
  for (uint8_t bit : {kCpuBit, kStorageBit}) {
    if (!(was & bit) && (held & bit)) EmitNodeEventLocked(n, KvEventKind::kStored, static_cast<KvMedium>(bit), force);
  }
  n->announced = held;
}

void Store::SyncTensorEventsLocked(Tensor* t) {
  if (events_ == nullptr) return;
  const uint8_t held = HeldMediaLocked(*t);
  for (RadixNode* n : t->nodes) SyncNodeEventsLocked(n, held, false);
}

void Store::NodeLeavesEventsLocked(RadixNode* n) {
  if (events_ != nullptr) SyncNodeEventsLocked(n, 0, false);
  n->announced = 0;
}

void Store::AnnounceLocked(bool force) {
  if (events_ == nullptr) return;
  KvEvent cleared;
  cleared.kind = KvEventKind::kCleared;
  events_->Publish(std::move(cleared), true);
  for (auto& [name, ns] : namespaces_) {
    if (ns->quiet) continue;
    std::vector<RadixNode*> stack;
    for (auto& [k, c] : ns->tree->root()->children) stack.push_back(c.get());
    while (!stack.empty()) {
      RadixNode* n = stack.back();
      stack.pop_back();
      n->announced = 0;
      SyncNodeEventsLocked(n, HeldMediaLocked(*n->tensor), force);
      for (auto& [k, c] : n->children) stack.push_back(c.get());
    }
  }
}

void Store::SetEventSink(KvEventSink* sink) {
  core::MutexLock lk(mu_);
  events_ = sink;
  for (auto& [name, ns] : namespaces_) ns->quiet = sink != nullptr && !sink->Publishes(name);
  AnnounceLocked(true);
}

void Store::AnnounceEvents() {
  core::MutexLock lk(mu_);
  AnnounceLocked(true);
}

Result<uint8_t> Store::HeldMedia(const std::string& ns_name, std::span<const uint32_t> tokens, uint64_t from_block) {
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  const Match m = WalkLocked(*ns, tokens);
  if (m.blocks != tokens.size() / ns->info.layout.block_tokens || m.blocks <= from_block) return uint8_t{0};
  uint8_t media = kCpuBit | kStorageBit;
  uint64_t at = 0;
  for (const MatchStep& st : m.path) {
    const bool needed = at + st.blocks > from_block;
    at += st.blocks;
    if (needed) media &= HeldMediaLocked(*st.node->tensor);
  }
  return media;
}

Result<std::vector<uint32_t>> Store::TokensOfHashes(const std::string& ns_name, std::span<const ChainKey> hashes,
                                                    bool low64) const {
  core::MutexLock lk(mu_);
  PTS_ASSIGN_OR_RETURN(Namespace * ns, FindLocked(ns_name));
  const uint32_t bt = ns->tree->block_tokens();
  auto same = [low64](const ChainKey& a, const ChainKey& b) { return low64 ? a.lo == b.lo : a == b; };
  std::vector<uint32_t> out;
  const RadixNode* at = ns->tree->root();
  size_t d = 0;  // blocks matched
  while (d < hashes.size()) {
    // The child whose first block is hashes[d]: by its key, or (the int
    // form) by a scan of the children's keys, which hashes nothing.
    const RadixNode* next = nullptr;
    if (!low64) {
      auto it = at->children.find(hashes[d]);
      if (it != at->children.end()) next = it->second.get();
    } else {
      for (const auto& [k, c] : at->children) {
        if (k.lo == hashes[d].lo) {
          next = c.get();
          break;
        }
      }
    }
    if (next == nullptr) break;
    // Every block of it must match (a hash list need not be one chain: the
    // match ends at the first that differs), each key from the one before.
    const size_t blocks = next->tokens.size() / bt;
    const std::span<const uint32_t> toks(next->tokens);
    ChainKey k = next->first_key;
    size_t i = 0;
    for (;;) {
      out.insert(out.end(), toks.begin() + i * bt, toks.begin() + (i + 1) * bt);
      ++d;
      if (++i == blocks || d == hashes.size()) break;
      k = NextKey(k, toks.subspan(i * bt, bt));
      if (!same(k, hashes[d])) break;
    }
    if (i < blocks) break;  // the run ends inside `next`
    at = next;
  }
  return out;
}

}  // namespace ptstore::storage

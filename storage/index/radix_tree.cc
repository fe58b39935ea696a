#include "storage/index/radix_tree.h"

#include <algorithm>
#include <cstring>

namespace ptstore::storage {

RadixTree::RadixTree(uint32_t block_tokens, uint64_t block_bytes)
    : block_tokens_(block_tokens), block_bytes_(block_bytes) {}

// The walk of Longest and Walk: `key_of(node, block)` is the chain key of
// `block`, the first block below `node` (the root or a node matched whole).
template <typename KeyOf>
Match RadixTree::WalkBy(std::span<const uint32_t> tokens, uint64_t total, KeyOf&& key_of) const {
  Match m;
  const RadixNode* node = &root_;
  while (m.blocks < total) {
    auto it = node->children.find(key_of(node, m.blocks));
    if (it == node->children.end()) break;
    RadixNode* child = it->second.get();
    const uint64_t child_blocks = blocks_of(child);
    const uint64_t limit = std::min(child_blocks, total - m.blocks);
    // Compare token ids block by block: the key only chose the candidate.
    uint64_t same = 0;
    while (same < limit &&
           std::memcmp(child->tokens.data() + same * block_tokens_,
                       tokens.data() + (m.blocks + same) * block_tokens_, size_t{block_tokens_} * 4) == 0) {
      ++same;
    }
    if (same == 0) break;  // a key collision: a miss, never a wrong answer
    m.path.push_back(MatchStep{child, same});
    m.blocks += same;
    if (same < child_blocks) {
      m.partial_last = true;
      break;
    }
    node = child;
  }
  return m;
}

Match RadixTree::Longest(std::span<const uint32_t> tokens, std::span<const ChainKey> keys) const {
  return WalkBy(tokens, keys.size(), [&](const RadixNode*, uint64_t block) { return keys[block]; });
}

Match RadixTree::Walk(std::span<const uint32_t> tokens, const ChainKey& root_key) const {
  // Every block above `node` was compared token by token, so the key it
  // keeps (its last block's) is the prompt's own chain key there.
  return WalkBy(tokens, tokens.size() / block_tokens_, [&](const RadixNode* node, uint64_t block) {
    return NextKey(node == &root_ ? root_key : node->key, tokens.subspan(block * block_tokens_, block_tokens_));
  });
}

RadixNode* RadixTree::Split(RadixNode* node, uint64_t blocks, const ChainKey& upper_key, uint64_t ctime_ns) {
  RadixNode* parent = node->parent;
  auto self = std::move(parent->children[node->first_key]);

  auto upper = std::make_unique<RadixNode>();
  upper->parent = parent;
  upper->first_key = node->first_key;
  upper->key = upper_key;
  upper->start_block = node->start_block;
  upper->tokens.assign(node->tokens.begin(), node->tokens.begin() + blocks * block_tokens_);
  upper->tensor = node->tensor;
  upper->offset = node->offset;
  upper->length = blocks * block_bytes_;
  upper->hits = node->hits;  // every hit on the lower part passed through it
  node->times.ctime_ns = std::max(node->times.ctime_ns, ctime_ns);
  upper->times = node->times;  // stored together; every use of the lower part used it
  upper->announced = node->announced;  // the same blocks: nothing to tell routers

  node->tokens.erase(node->tokens.begin(), node->tokens.begin() + blocks * block_tokens_);
  node->start_block += blocks;
  node->offset += upper->length;
  node->length -= upper->length;
  node->first_key = NextKey(upper_key, std::span<const uint32_t>(node->tokens.data(), block_tokens_));
  node->parent = upper.get();

  RadixNode* up = upper.get();
  up->children.emplace(node->first_key, std::move(self));
  parent->children[up->first_key] = std::move(upper);
  by_key_[up->key] = up;
  // Keep the tensor's node chain in prefix order.
  auto& chain = up->tensor->nodes;
  chain.insert(std::find(chain.begin(), chain.end(), node), up);
  Changed(ChangeKind::kRemoved, node, parent);
  Changed(ChangeKind::kAdded, up, parent);
  Changed(ChangeKind::kAdded, node, up);
  return up;
}

RadixNode* RadixTree::Insert(const Match& m, std::span<const uint32_t> tokens, std::span<const ChainKey> keys,
                             Tensor* tensor, const Times& times) {
  RadixNode* parent = &root_;
  if (!m.path.empty()) {
    const MatchStep& last = m.path.back();
    parent = m.partial_last ? Split(last.node, last.blocks, keys[m.blocks - 1], times.ctime_ns) : last.node;
  }
  // The slot is taken only if another increment's first block has the same
  // chain key but other tokens (Longest compared them): a hash collision.
  // There is nowhere to file this one; refuse rather than corrupt the index.
  if (parent->children.count(keys[m.blocks]) != 0) return nullptr;
  auto node = std::make_unique<RadixNode>();
  node->parent = parent;
  node->first_key = keys[m.blocks];
  node->key = keys.back();
  node->start_block = m.blocks;
  node->tokens.assign(tokens.begin() + m.blocks * block_tokens_, tokens.begin() + keys.size() * block_tokens_);
  node->tensor = tensor;
  node->offset = 0;
  node->length = (keys.size() - m.blocks) * block_bytes_;
  node->times = times;
  RadixNode* raw = node.get();
  parent->children.emplace(raw->first_key, std::move(node));
  by_key_[raw->key] = raw;
  tensor->nodes.push_back(raw);
  if (parent->tensor != nullptr) parent->tensor->foreign_children++;
  Changed(ChangeKind::kAdded, raw, parent);
  return raw;
}

void RadixTree::RemoveSubtree(RadixNode* node, const std::function<void(RadixNode*)>& on_removed) {
  RadixNode* parent = node->parent;
  auto it = parent->children.find(node->first_key);
  if (it == parent->children.end() || it->second.get() != node) return;
  std::unique_ptr<RadixNode> owned = std::move(it->second);
  parent->children.erase(it);
  if (parent->tensor != nullptr && parent->tensor != node->tensor) parent->tensor->foreign_children--;

  // Post-order walk without recursion (trees can be thousands deep).
  std::vector<std::pair<RadixNode*, bool>> stack{{node, false}};
  while (!stack.empty()) {
    auto [n, expanded] = stack.back();
    if (!expanded) {
      stack.back().second = true;
      for (auto& [k, c] : n->children) stack.push_back({c.get(), false});
      continue;
    }
    stack.pop_back();
    if (n != node && n->parent->tensor != nullptr && n->parent->tensor != n->tensor) {
      n->parent->tensor->foreign_children--;
    }
    on_removed(n);
    Changed(ChangeKind::kRemoved, n, n->parent);
    auto bk = by_key_.find(n->key);
    if (bk != by_key_.end() && bk->second == n) by_key_.erase(bk);
    // Its children were handled (and emptied) before it: destroying them
    // now is shallow, so no destructor recurses once per level.
    n->children.clear();
  }
  // `owned` (now childless) is destroyed here.
}

RadixNode* RadixTree::FindByKey(const ChainKey& key) const {
  auto it = by_key_.find(key);
  return it == by_key_.end() ? nullptr : it->second;
}

}  // namespace ptstore::storage

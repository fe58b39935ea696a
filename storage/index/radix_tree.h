// The radix index of one namespace: a trie of increments keyed by chain keys.
//
// Each node is a run of whole blocks: its token ids and the (tensor, offset,
// length) slice that holds their KV. A node's children are found by the chain
// key of their first block, and every step of a match also compares the token
// ids, so a hash collision can only shorten a match. A new prefix that
// branches inside a node splits the node's metadata in two; the bytes stay
// where they are.
//
// Thread safety: none; the Store serialises all access under its mutex.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <unordered_map>
#include <vector>

#include "ptstore/keys.h"
#include "ptstore/types.h"
#include "storage/index/tensor.h"

namespace ptstore::storage {

struct RadixNode {
  RadixNode* parent = nullptr;
  ChainKey first_key;              // key of the first block: its name in parent->children
  ChainKey key;                    // key of the last block: its name in paths
  uint64_t start_block = 0;        // depth of its first block
  std::vector<uint32_t> tokens;    // blocks() * block_tokens token ids
  Tensor* tensor = nullptr;        // nullptr only for the root
  uint64_t offset = 0;             // byte offset of its first block in tensor
  uint64_t length = 0;             // bytes
  uint64_t hits = 0;
  Times times;                     // ptstore(7) "Times"; an ancestor's atime >= its descendants'
  uint8_t announced = 0;           // KvMedium bits its blocks were published in (storage/cache/store_events.cc)
  std::unordered_map<ChainKey, std::unique_ptr<RadixNode>, ChainKeyHash> children;
};

// One step of a match: `blocks` blocks matched at the start of `node`.
struct MatchStep {
  RadixNode* node;
  uint64_t blocks;
};

struct Match {
  std::vector<MatchStep> path;  // root excluded
  uint64_t blocks = 0;          // total whole blocks matched
  // True when the match ends strictly inside the last node (a split point).
  bool partial_last = false;
};

class RadixTree {
 public:
  explicit RadixTree(uint32_t block_tokens, uint64_t block_bytes);
  RadixTree(const RadixTree&) = delete;
  RadixTree& operator=(const RadixTree&) = delete;

  // Longest match of `tokens` (whole blocks only; keys[i] is the chain key of
  // block i, as ChainKeys computes).
  Match Longest(std::span<const uint32_t> tokens, std::span<const ChainKey> keys) const;
  // The same match, hashing only as far as the walk goes: a child is found
  // by the chain key of its first block, which is NextKey of the key of the
  // node above (the last block it matched, whose key it keeps) and that
  // block's tokens. One hash per step: a miss costs one hash, and a hit as
  // many as the increments it walks, whatever the prompt's length.
  // `root_key`: the namespace's; `tokens`: whole blocks only.
  Match Walk(std::span<const uint32_t> tokens, const ChainKey& root_key) const;

  // Inserts the blocks [m.blocks, keys.size()) of `tokens`, whose bytes are
  // all of `tensor` from offset 0, below the end of match `m` (splitting the
  // last node when the match ends inside it). REQUIRES: m is a current match
  // of these tokens and keys.size() > m.blocks. Returns the new node, or
  // nullptr when another child already holds the first new block's key (a
  // chain-key collision with different tokens): the caller then stores
  // nothing, which costs a miss, never a wrong answer. The new node gets
  // `times`; a node split for it gets times.ctime_ns as its ctime.
  RadixNode* Insert(const Match& m, std::span<const uint32_t> tokens, std::span<const ChainKey> keys,
                    Tensor* tensor, const Times& times);

  // Detaches the subtree rooted at `node` (not the root) and calls
  // `on_removed` for each of its nodes, children before parents, before
  // destroying them.
  void RemoveSubtree(RadixNode* node, const std::function<void(RadixNode*)>& on_removed);

  RadixNode* root() { return &root_; }
  RadixNode* FindByKey(const ChainKey& key) const;
  size_t node_count() const { return by_key_.size(); }
  uint64_t blocks_of(const RadixNode* n) const { return n->tokens.size() / block_tokens_; }
  uint32_t block_tokens() const { return block_tokens_; }
  uint64_t block_bytes() const { return block_bytes_; }

  // Splits `node` after `blocks` blocks (0 < blocks < blocks_of(node));
  // returns the new upper node, which takes node's place under its parent;
  // `node` keeps the rest. `upper_key` is the key of the upper node's last
  // block. Both halves keep node's times, with ctime at least `ctime_ns`.
  RadixNode* Split(RadixNode* node, uint64_t blocks, const ChainKey& upper_key, uint64_t ctime_ns);

 // Called for every change of the tree's shape: kAdded for each node
  // Insert or Split makes, kRemoved for each node RemoveSubtree takes away
  // (children first) and for the node a Split moves below its new upper
  // half (then kAdded below it). `parent` is the parent's key (zero: the
  // root). nullptr: nobody listens.
  using ChangeFn = std::function<void(ChangeKind, const ChainKey& key, const ChainKey& parent)>;
  void SetOnChange(ChangeFn fn) { on_change_ = std::move(fn); }

 private:
  template <typename KeyOf>
  Match WalkBy(std::span<const uint32_t> tokens, uint64_t total, KeyOf&& key_of) const;
  void Changed(ChangeKind kind, const RadixNode* n, const RadixNode* parent) const {
    if (on_change_) on_change_(kind, n->key, parent == &root_ ? ChainKey{} : parent->key);
  }

  ChangeFn on_change_;
  uint32_t block_tokens_;
  uint64_t block_bytes_;
  RadixNode root_;
  std::unordered_map<ChainKey, RadixNode*, ChainKeyHash> by_key_;
};

}  // namespace ptstore::storage

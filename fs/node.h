// What an inode of a PTStore mount is: the root, a namespace, a namespace's
// .layout file, an increment (by chain key), or one of an increment's files.
//
// A NodeRef is a value naming a place in the tree, independent of inode
// numbers; the tree view (tree.h) resolves it against the store each time.
#pragma once

#include <cstdint>
#include <string>

#include "ptstore/keys.h"

namespace ptstore::fs {

enum class NodeKind : uint8_t {
  kRoot = 1,       // "/": one directory per namespace
  kNamespace = 2,  // "/<ns>": .layout and the top-level increments
  kLayoutFile = 3, // "/<ns>/.layout"
  kIncrement = 4,  // ".../<key>": kv, tokens and the continuations
  kKvFile = 5,     // ".../<key>/kv"
  kTokensFile = 6, // ".../<key>/tokens"
};

// File names inside the tree (ptstore(7)).
inline constexpr const char* kLayoutName = ".layout";
inline constexpr const char* kKvName = "kv";
inline constexpr const char* kTokensName = "tokens";

struct NodeRef {
  NodeKind kind = NodeKind::kRoot;
  std::string ns;  // empty for the root
  ChainKey key;    // the increment (kIncrement, kKvFile, kTokensFile); zero otherwise

  bool IsDir() const { return kind == NodeKind::kRoot || kind == NodeKind::kNamespace || kind == NodeKind::kIncrement; }
  bool operator==(const NodeRef&) const = default;
  // "/ns/<key>/kv"-like text for logs (the key only, not the whole path).
  std::string ToString() const;
};

struct NodeRefHash {
  size_t operator()(const NodeRef& r) const;
};

}  // namespace ptstore::fs

// Who owns which blocks of a prompt, and a namespace as another node must
// create it: the values the node's Store and its cluster both speak in
// (storage/cache/remote.h). No wire format here: core/peer_messages.h
// carries them between nodes, so the Store's API does not depend on the
// node-to-node messages.
#pragma once

#include <cstdint>
#include <string>

#include "ptstore/types.h"

namespace ptstore::core {

// Blocks [previous range's end_block, end_block) are owned by `owner`.
struct OwnedRange {
  uint64_t end_block = 0;
  uint32_t owner = 0;
  bool operator==(const OwnedRange&) const = default;
};

// A namespace as another node must create it to file this node's data
// (salt included: it decides the chain keys).
struct NamespaceDef {
  NamespaceInfo info;
  std::string salt;
};

}  // namespace ptstore::core

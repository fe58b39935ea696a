// The scheduler's view of where prefixes are, from the store's own index.
//
// With a cluster, one node answers for all (Client::LocatePrefix: the shard
// of the prompt's root and every node's holdings); the index asks its nodes
// in turn and moves on to the next when one fails or does not know the
// namespace. Without a cluster (every
// node a store of its own: node-local reuse), it asks every node and merges
// their answers into one PrefixLocation whose spans name, for each length,
// the nodes that hold at least that much.
//
// Thread safety: Locate may be called from many threads (Clients are).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "ptstore/client.h"
#include "sched/scheduler.h"

namespace ptstore::sched {

class StoreIndex : public PrefixIndex {
 public:
  struct Node {
    uint32_t id = 0;
    std::shared_ptr<Client> client;
  };
  // `cluster`: the nodes form one cluster (ask one); else independent stores.
  StoreIndex(std::vector<Node> nodes, bool cluster);

  // A miss is matched_tokens == 0. Fails only when no node answers.
  Result<PrefixLocation> Locate(const std::string& ns, std::span<const uint32_t> tokens) override;

 private:
  std::vector<Node> nodes_;
  const bool cluster_;
  std::atomic<size_t> next_{0};
};

// Merges per-node answers of independent stores (each naming only itself)
// into one location: for each distinct held length, the nodes holding at
// least that much. Nodes whose answer holds nothing are left out.
PrefixLocation MergeIndependent(const std::vector<std::pair<uint32_t, uint64_t>>& held_by_node);

}  // namespace ptstore::sched

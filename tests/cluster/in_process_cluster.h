// A whole PTStore cluster inside one test process: N real Stores, each with
// a real storage::Cluster, linked by a LoopbackNet (faults injected at the
// transport: storage/cluster/loopback_transport.h), by the real TCP
// transport or by the real RMA transport (libfabric's tcp provider) on
// loopback ports. Each node is a storage::Node over its Store
// and Cluster, so saves, loads and removals take the same steps around the
// store as a ptstored session's (storage/server/node.h).
//
// Layout and bytes: tests/storage/kv_fixture.h (every load checkable byte
// for byte). Timings are short (heartbeats of 50 ms, RPC deadlines of
// 300 ms) so that deaths and partitions are seen within a second.
//
// Thread safety: Load, Save and Remove may be called from many threads at
// once; Start, Kill, Restart and the destructor from one.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/membership.h"
#include "ptstore/status.h"
#include "storage/cluster/cluster.h"
#include "storage/cluster/loopback_transport.h"
#include "storage/server/node.h"
#include "storage/cache/store.h"

namespace ptstore::testing {

class InProcessCluster {
 public:
  enum class Link { kLoopback, kTcp, kRma };  // kRma: libfabric's tcp provider, one-sided reads
  struct Options {
    size_t nodes = 3;
    Link link = Link::kLoopback;
    uint32_t replicate_after = 100;  // replicas only where a test asks
    int rpc_timeout_ms = 300;
    int heartbeat_ms = 50;
  };
  static constexpr const char* kNs = "ns";

  explicit InProcessCluster(Options options);
  ~InProcessCluster();  // every node stopped (clusters first, then stores)

  // Starts every node (namespace kNs created on each).
  Status Start();
  // Until every running node sees every other running node alive (and
  // `dead` ones dead), or 5 s: DeadlineExceeded naming who sees whom how.
  Status WaitConverged(const std::vector<uint32_t>& dead = {});

  storage::Store& store(uint32_t i) { return nodes_[i]->store(); }
  storage::Cluster& cluster(uint32_t i) { return *nodes_[i]->cluster(); }
  storage::LoopbackNet& net() { return net_; }
  bool running(uint32_t i) const { return nodes_[i] != nullptr; }

  // The session's save: the KV of every whole block of `tokens`.
  Result<SaveResult> Save(uint32_t node, const std::vector<uint32_t>& tokens);
  // The session's load by copy; on OK, the tokens loaded, whose bytes are
  // checked here: wrong bytes are a DataLoss error naming the node.
  Result<uint64_t> Load(uint32_t node, const std::vector<uint32_t>& tokens);
  // The session's removal of `tokens`' last increment and all below it.
  Result<RemoveResult> Remove(uint32_t node, const std::vector<uint32_t>& tokens);

  // The node's process is gone: killed on the net (loopback), then its
  // Node (Cluster and Store) destroyed (its DRAM lost).
  void Kill(uint32_t node);
  // A node started again (a new incarnation, an empty arena).
  Status Restart(uint32_t node);

 private:
  Status StartNode(uint32_t i);

  const Options options_;
  storage::LoopbackNet net_;  // outlives every node
  core::Membership membership_;
  std::vector<std::unique_ptr<storage::Node>> nodes_;  // null: not running
};

}  // namespace ptstore::testing

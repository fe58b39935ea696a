// The clusters bench_cluster's sections run: real ptstored processes on
// loopback (the tests' harness, tests/testing/cluster.h) with their
// Prometheus endpoints on, and the counters of those endpoints the
// benchmark follows.
//
// Thread safety: a NodeMetrics may be read from any thread (each read is
// its own HTTP request); a cluster is started and stopped from one thread
// (clients of its nodes may run in several).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "bench/bench_cluster_options.h"
#include "ptstore/status.h"
#include "tests/testing/cluster.h"
#include "tests/testing/daemon.h"
#include "tests/testing/prometheus_text.h"

namespace ptstore::bench::cluster_bench {

using ptstore::testing::TestCluster;

// The node holding the index shard of a prompt's root with every node
// alive: the same function the nodes use (storage/cluster/cluster.cc ShardFor).
uint32_t ShardOfPrompt(const std::string& ns, std::span<const uint32_t> tokens, uint32_t block_tokens,
                       size_t nodes);

// A node's Prometheus endpoint (started with --metrics-port auto: its log
// says where).
class NodeMetrics {
 public:
  static Result<NodeMetrics> Find(const ptstore::testing::Daemon& d);
  Result<ptstore::testing::PromExposition> Scrape() const;
  // One value (0 when absent).
  Result<double> Value(const std::string& name, const std::map<std::string, std::string>& labels = {}) const;

 private:
  uint16_t port_ = 0;
};

// The counters of a node's metrics the benchmark follows.
struct ClusterMetrics {
  double shard_lookups = 0, local_shard = 0, metadata_hits = 0, announces = 0, fetch_requests = 0;
  double fetch_failures = 0, bytes_tcp = 0, bytes_rma = 0, fetch_sum_s = 0, fetch_count = 0;
  double lookup_sum_s = 0, lookup_count = 0;
  static Result<ClusterMetrics> Read(const NodeMetrics& m);
  ClusterMetrics operator-(const ClusterMetrics& b) const;
};

// Stops the nodes and removes their directories (the harness keeps a
// daemon's directory for post-mortems).
struct ClusterDeleter {
  void operator()(TestCluster* c) const;
};
using ClusterPtr = std::unique_ptr<TestCluster, ClusterDeleter>;

// A cluster of `nodes` real ptstored (metrics on, o's heartbeat, RPC
// timeout and node log level), converged. `path`: tcp, tcp-v1 (nodes of
// peer protocol 1), rma (libfabric's tcp provider, the daemon's default) or
// rma-<provider>.
Result<ClusterPtr> StartCluster(const Options& o, size_t nodes, const std::string& arena, const std::string& path,
                                uint32_t replicate_after, int negative_ttl_ms = -1);

// The last 3000 bytes of every node's log, for a failure's report.
std::string NodeLogs(TestCluster& c);

}  // namespace ptstore::bench::cluster_bench

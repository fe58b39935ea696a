#include "bench/bench_cluster_nodes.h"

#include <cmath>
#include <filesystem>
#include <numeric>
#include <vector>

#include "core/rendezvous.h"
#include "ptstore/keys.h"
#include "tests/testing/http_get.h"

namespace ptstore::bench::cluster_bench {
namespace {

// The ids 0..n-1.
std::vector<uint32_t> Ids(size_t n) {
  std::vector<uint32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0u);
  return ids;
}

}  // namespace

uint32_t ShardOfPrompt(const std::string& ns, std::span<const uint32_t> tokens, uint32_t block_tokens,
                       size_t nodes) {
  const ChainKey root = NextKey(RootKey(ns, ""), tokens.first(block_tokens));
  const std::vector<uint32_t> ids = Ids(nodes);
  return core::ShardOf(root, ids);
}

Result<NodeMetrics> NodeMetrics::Find(const ptstore::testing::Daemon& d) {
  const std::string log = d.ReadLog();
  const std::string mark = "metrics on http://";
  const size_t at = log.find(mark);
  if (at == std::string::npos) return NotFound("no metrics address in the log of " + d.log_path());
  const size_t colon = log.find(':', at + mark.size());
  const size_t slash = log.find('/', at + mark.size());
  if (colon == std::string::npos || slash == std::string::npos || slash < colon) {
    return ProtocolError("cannot parse the metrics address in " + d.log_path());
  }
  NodeMetrics m;
  m.port_ = static_cast<uint16_t>(std::stoi(log.substr(colon + 1, slash - colon - 1)));
  return m;
}

Result<ptstore::testing::PromExposition> NodeMetrics::Scrape() const {
  PTS_ASSIGN_OR_RETURN(ptstore::testing::HttpReply r, ptstore::testing::HttpGet(port_, "/metrics"));
  if (r.code != 200) return Unavailable("metrics: HTTP " + std::to_string(r.code));
  return ptstore::testing::ParsePromText(r.body);
}

Result<double> NodeMetrics::Value(const std::string& name, const std::map<std::string, std::string>& labels) const {
  PTS_ASSIGN_OR_RETURN(auto e, Scrape());
  const double v = e.Value(name, labels);
  return std::isnan(v) ? 0.0 : v;
}

Result<ClusterMetrics> ClusterMetrics::Read(const NodeMetrics& m) {
  PTS_ASSIGN_OR_RETURN(auto e, m.Scrape());
  auto v = [&](const std::string& name, const std::map<std::string, std::string>& labels = {}) {
    const double x = e.Value(name, labels);
    return std::isnan(x) ? 0.0 : x;
  };
  ClusterMetrics c;
  c.shard_lookups = v("ptstore_shard_lookups_total");
  c.local_shard = v("ptstore_local_shard_requests_total");
  c.metadata_hits = v("ptstore_metadata_cache_hits_total");
  c.announces = v("ptstore_announces_total");
  c.fetch_requests = v("ptstore_fetch_requests_total");
  c.fetch_failures = v("ptstore_fetch_failures_total");
  c.bytes_tcp = v("ptstore_fetched_bytes_total", {{"path", "tcp"}});
  c.bytes_rma = v("ptstore_fetched_bytes_total", {{"path", "rma"}});
  c.fetch_sum_s = v("ptstore_rpc_latency_seconds_sum", {{"rpc", "fetch"}});
  c.fetch_count = v("ptstore_rpc_latency_seconds_count", {{"rpc", "fetch"}});
  c.lookup_sum_s = v("ptstore_rpc_latency_seconds_sum", {{"rpc", "shard_lookup"}});
  c.lookup_count = v("ptstore_rpc_latency_seconds_count", {{"rpc", "shard_lookup"}});
  return c;
}

ClusterMetrics ClusterMetrics::operator-(const ClusterMetrics& b) const {
  ClusterMetrics d;
  d.shard_lookups = shard_lookups - b.shard_lookups;
  d.local_shard = local_shard - b.local_shard;
  d.metadata_hits = metadata_hits - b.metadata_hits;
  d.announces = announces - b.announces;
  d.fetch_requests = fetch_requests - b.fetch_requests;
  d.fetch_failures = fetch_failures - b.fetch_failures;
  d.bytes_tcp = bytes_tcp - b.bytes_tcp;
  d.bytes_rma = bytes_rma - b.bytes_rma;
  d.fetch_sum_s = fetch_sum_s - b.fetch_sum_s;
  d.fetch_count = fetch_count - b.fetch_count;
  d.lookup_sum_s = lookup_sum_s - b.lookup_sum_s;
  d.lookup_count = lookup_count - b.lookup_count;
  return d;
}

void ClusterDeleter::operator()(TestCluster* c) const {
  std::vector<std::string> dirs;
  for (size_t i = 0; i < c->size(); ++i) dirs.push_back(c->node(i).dir());
  delete c;
  for (const std::string& d : dirs) {
    std::error_code ec;
    if (!d.empty()) std::filesystem::remove_all(d, ec);
  }
}

Result<ClusterPtr> StartCluster(const Options& o, size_t nodes, const std::string& arena, const std::string& path,
                                uint32_t replicate_after, int negative_ttl_ms) {
  TestCluster::Options co;
  co.negative_ttl_ms = negative_ttl_ms;
  co.nodes = nodes;
  co.arena_size = arena;
  co.data_path = path.rfind("rma", 0) == 0 ? "rma" : "tcp";
  // tcp-v1: both nodes the ptstored-peer-v1 build, peer protocol 1, frames
  // without MACs (the baseline of the MACs' cost).
  if (path == "tcp-v1") co.binaries = std::vector<std::string>(nodes, PTSTORE_PTSTORED_PEER_V1_PATH);
  co.replicate_after = replicate_after;
  co.heartbeat_ms = o.heartbeat_ms;
  co.rpc_timeout_ms = o.rpc_timeout_ms;
  co.extra_args = {"--metrics-port", "auto", "--log-level", o.node_log_level};
  if (path.rfind("rma-", 0) == 0) {
    co.extra_args.insert(co.extra_args.end(), {"--fabric-provider", path.substr(4)});
    // A provider may name an endpoint by its node's address (shm does):
    // node i at 127.0.0.(i + 1), port 7400 (the harness's fixed port for
    // separate hosts).
    for (size_t i = 0; i < nodes; ++i) co.hosts.push_back("127.0.0." + std::to_string(i + 1));
  }
  ClusterPtr c(new TestCluster(co));
  PTS_RETURN_IF_ERROR(c->Start());
  PTS_RETURN_IF_ERROR(c->WaitConverged(20000));
  return c;
}

std::string NodeLogs(TestCluster& c) {
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    std::string log = c.node(i).ReadLog();
    if (log.size() > 3000) log = "..." + log.substr(log.size() - 3000);
    out += "--- node " + std::to_string(i) + " log ---\n" + log;
  }
  return out;
}

}  // namespace ptstore::bench::cluster_bench

// The metrics of one ptstored node in the Prometheus text format (served on
// /metrics by storage/server/metrics_http.h; the families are listed in
// ptstored(8), METRICS).
//
// Each Append* writes a fixed set of families, all named ptstore_*, into a
// core::PromWriter, so one exposition is put together from several sources
// and later ones (the cluster: RPC latencies, bytes moved by path, peers'
// states) are appended the same way without touching these:
//
//   core::PromWriter w;
//   AppendNodeMetrics(w, node);
//   AppendStoreMetrics(w, store->Stats());
//   AppendNamespaceMetrics(w, store->ListNamespaces());
//   AppendClusterMetrics(w, ...);   // some day
//   return w.Take();
//
// Every family is always present (zeros on a node without an SSD tier), so
// that dashboards and alerts see a stable set. The node is identified by the
// ptstore_node_info{node="...",version="..."} gauge, whose value is 1; the
// other samples carry no node label (Prometheus adds the scrape target's).
//
// Thread safety: pure functions of their arguments.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/prometheus.h"
#include "ptstore/quota.h"
#include "ptstore/types.h"

namespace ptstore::storage {

// What the daemon knows about itself beyond the store's counters.
struct NodeMetrics {
  uint32_t node_id = 0;
  std::string version;           // "0.1.0"
  double start_time = 0;         // when the process started, seconds since the Unix epoch
  uint64_t sessions_open = 0;    // client sessions open on the unix socket
  uint64_t sessions_total = 0;   // client sessions accepted since start
  uint64_t sessions_refused = 0; // connections refused at accept (session caps)
};

// ptstore_node_info, ptstore_start_time_seconds, ptstore_sessions,
// ptstore_sessions_total.
void AppendNodeMetrics(core::PromWriter& w, const NodeMetrics& node);
// Every counter and gauge of StoreStats: arena and cache bytes by class,
// hits and misses, tokens, saves, evictions, leases, the SSD tier (spills,
// fills, hits, ...) and what recovery found at start.
void AppendStoreMetrics(core::PromWriter& w, const StoreStats& s);
// ptstore_namespace_bytes and ptstore_namespace_prefix_nodes, labelled by
// namespace (one series per model: few).
void AppendNamespaceMetrics(core::PromWriter& w, const std::vector<NamespaceInfo>& namespaces);

// ptstore_namespace_quota_bytes{namespace,tier}, ptstore_namespace_used_bytes
// {namespace,tier} (tier "dram" or "ssd"), ptstore_namespace_quota_evictions_total
// {namespace,tier} and ptstore_namespace_cut_saves_total{namespace}.
void AppendNamespaceQuotaMetrics(core::PromWriter& w, const std::vector<NamespaceQuota>& quotas);

// The node's whole exposition: node, store and namespace families.
std::string RenderStoreMetrics(const StoreStats& s, const NodeMetrics& node,
                               const std::vector<NamespaceInfo>& namespaces = {});

}  // namespace ptstore::storage

#include "storage/server/metrics.h"

#include "core/logging.h"

namespace ptstore::storage {

namespace {

using core::MetricType;

// One family with one unlabelled sample, read from a StoreStats field.
struct Field {
  const char* name;
  MetricType type;
  const char* help;
  uint64_t StoreStats::*value;
};

// Order: DRAM arena, requests, saves, eviction, leases, SSD tier, recovery,
// other nodes.
constexpr Field kStoreFields[] = {
    {"ptstore_arena_capacity_bytes", MetricType::kGauge, "Capacity of the DRAM arena.", &StoreStats::arena_bytes},
    {"ptstore_arena_used_bytes", MetricType::kGauge, "Bytes of the DRAM arena allocated to tensors.",
     &StoreStats::used_bytes},
    {"ptstore_arena_pinned_bytes", MetricType::kGauge, "Bytes of the DRAM arena pinned by readers' leases.",
     &StoreStats::pinned_bytes},
    {"ptstore_tensors", MetricType::kGauge, "Tensors in the DRAM arena.", &StoreStats::tensors},
    {"ptstore_prefix_nodes", MetricType::kGauge, "Increments (radix tree nodes) in all namespaces.",
     &StoreStats::prefix_nodes},
    {"ptstore_namespaces", MetricType::kGauge, "Namespaces (models) on this node.", &StoreStats::namespaces},
    {"ptstore_lookups_total", MetricType::kCounter, "Prefix lookups (without pinning).", &StoreStats::lookups},
    {"ptstore_hits_total", MetricType::kCounter, "Lookups and loads that matched at least one block.",
     &StoreStats::hits},
    {"ptstore_misses_total", MetricType::kCounter, "Lookups and loads that matched no block.", &StoreStats::misses},
    {"ptstore_requested_tokens_total", MetricType::kCounter,
     "Whole-block tokens asked for by lookups and loads.", &StoreStats::requested_tokens},
    {"ptstore_hit_tokens_total", MetricType::kCounter, "Tokens of lookups and loads found in the store.",
     &StoreStats::hit_tokens},
    {"ptstore_saves_total", MetricType::kCounter, "Prompts saved.", &StoreStats::saves},
    {"ptstore_saved_bytes_total", MetricType::kCounter, "Bytes written into the arena by saves.",
     &StoreStats::saved_bytes},
    {"ptstore_dedup_bytes_total", MetricType::kCounter,
     "Bytes of saved prompts' whole blocks that were stored already (not written again).",
     &StoreStats::dedup_bytes},
    {"ptstore_evictions_total", MetricType::kCounter, "Tensors evicted from the DRAM arena.", &StoreStats::evictions},
    {"ptstore_evicted_bytes_total", MetricType::kCounter, "Bytes of the tensors evicted from the DRAM arena.",
     &StoreStats::evicted_bytes},
    {"ptstore_active_leases", MetricType::kGauge, "Pins (leases) held by readers.", &StoreStats::active_leases},
    {"ptstore_expired_leases_total", MetricType::kCounter, "Leases dropped because they expired.",
     &StoreStats::expired_leases},
    {"ptstore_ssd_capacity_bytes", MetricType::kGauge, "Bytes the SSD tier's segment files may take (0: no SSD tier).",
     &StoreStats::ssd_capacity},
    {"ptstore_ssd_file_bytes", MetricType::kGauge, "Bytes the SSD tier's segment files take.",
     &StoreStats::ssd_file_bytes},
    {"ptstore_ssd_live_bytes", MetricType::kGauge, "Bytes of live records in the SSD tier's segment files.",
     &StoreStats::ssd_live_bytes},
    {"ptstore_ssd_segments", MetricType::kGauge, "Segment files of the SSD tier.", &StoreStats::ssd_segments},
    {"ptstore_ssd_tensors", MetricType::kGauge, "Tensors with a copy on SSD.", &StoreStats::ssd_tensors},
    {"ptstore_ssd_hits_total", MetricType::kCounter, "Pins and loads that read part of their prefix back from SSD.",
     &StoreStats::ssd_hits},
    {"ptstore_ssd_fills_total", MetricType::kCounter, "Tensors read back from SSD into DRAM.",
     &StoreStats::ssd_fills},
    {"ptstore_ssd_fill_bytes_total", MetricType::kCounter, "Bytes read back from SSD into DRAM, after decompression.",
     &StoreStats::ssd_fill_bytes},
    {"ptstore_ssd_spills_total", MetricType::kCounter, "Owned tensors written to SSD on eviction.",
     &StoreStats::ssd_spills},
    {"ptstore_ssd_spill_bytes_total", MetricType::kCounter, "Bytes of the spilled tensors, before compression.",
     &StoreStats::ssd_spill_bytes},
    {"ptstore_ssd_stored_bytes_total", MetricType::kCounter, "Bytes the spills took on SSD, after compression.",
     &StoreStats::ssd_stored_bytes},
    {"ptstore_ssd_spill_failures_total", MetricType::kCounter,
     "Spills that failed (SSD full, I/O error): the tensor was dropped instead.", &StoreStats::ssd_spill_failures},
    {"ptstore_ssd_evictions_total", MetricType::kCounter, "SSD copies dropped to stay under the SSD capacity.",
     &StoreStats::ssd_evictions},
    {"ptstore_ssd_read_errors_total", MetricType::kCounter,
     "SSD reads that failed or did not match their checksum.", &StoreStats::ssd_read_errors},
    {"ptstore_ssd_compactions_total", MetricType::kCounter, "Sparse SSD segments rewritten.",
     &StoreStats::ssd_compactions},
    {"ptstore_recovered_tensors_total", MetricType::kCounter, "Tensors indexed again from SSD at start.",
     &StoreStats::recovered_tensors},
    {"ptstore_recovered_bytes_total", MetricType::kCounter, "Bytes of the tensors indexed again from SSD at start.",
     &StoreStats::recovered_bytes},
    {"ptstore_recovery_corrupt_records_total", MetricType::kCounter,
     "SSD records skipped at start: bad checksums, torn writes.", &StoreStats::recovery_corrupt},
    {"ptstore_recovery_dropped_records_total", MetricType::kCounter,
     "Valid SSD records not indexed at start: orphans, duplicates.", &StoreStats::recovery_dropped},
    {"ptstore_remote_tensors", MetricType::kGauge, "Increments other nodes own that this node's index knows.",
     &StoreStats::remote_tensors},
    {"ptstore_remote_hits_total", MetricType::kCounter, "Pins and loads that fetched part of their prefix from other nodes.",
     &StoreStats::remote_hits},
    {"ptstore_remote_fetches_total", MetricType::kCounter, "Increments fetched from the nodes that own them.",
     &StoreStats::remote_fetches},
    {"ptstore_remote_fetch_bytes_total", MetricType::kCounter, "Bytes fetched from other nodes.",
     &StoreStats::remote_fetch_bytes},
    {"ptstore_remote_fetch_failures_total", MetricType::kCounter,
     "Fetches from other nodes that failed (owner dead or gone, deadline): served as misses.",
     &StoreStats::remote_fetch_failures},
    {"ptstore_replicas_kept_total", MetricType::kCounter, "Fetched increments kept as replicas because they are hot.",
     &StoreStats::replicas_kept},
    {"ptstore_peer_served_bytes_total", MetricType::kCounter, "Bytes of this node's owned data served to other nodes.",
     &StoreStats::peer_served_bytes},
    {"ptstore_dram_hits_total", MetricType::kCounter,
     "Pins and loads served from DRAM alone (no SSD read, no fetch from another node).", &StoreStats::dram_hits},
};

}  // namespace

void AppendNodeMetrics(core::PromWriter& w, const NodeMetrics& node) {
  w.Family("ptstore_node_info", MetricType::kGauge, "This node: its cluster node id and ptstored version (value 1).");
  w.Sample(1, {{"node", std::to_string(node.node_id)}, {"version", node.version}});
  w.Gauge("ptstore_start_time_seconds", "When ptstored started, in seconds since the Unix epoch.", node.start_time);
  w.Gauge("ptstore_sessions", "Client sessions open on the unix socket.", node.sessions_open);
  w.Counter("ptstore_sessions_total", "Client sessions accepted on the unix socket.", node.sessions_total);
  w.Counter("ptstore_sessions_refused_total",
            "Connections refused at accept: server.max_sessions or a uid's server.max_sessions_per_uid reached.",
            node.sessions_refused);
}

void AppendStoreMetrics(core::PromWriter& w, const StoreStats& s) {
  for (const Field& f : kStoreFields) {
    w.Family(f.name, f.type, f.help);
    w.Sample(s.*f.value);
    if (f.value == &StoreStats::arena_bytes) {
      // Right after the arena's capacity: what each cache class holds.
      w.Family("ptstore_cache_bytes", MetricType::kGauge, "Bytes in the DRAM arena by cache class.");
      w.Sample(s.owned_bytes, {{"class", "owned"}});
      w.Sample(s.replica_bytes, {{"class", "replica"}});
    }
  }
}

void AppendNamespaceMetrics(core::PromWriter& w, const std::vector<NamespaceInfo>& namespaces) {
  w.Family("ptstore_namespace_bytes", MetricType::kGauge, "Bytes stored on this node by namespace.");
  for (const NamespaceInfo& n : namespaces) w.Sample(n.bytes, {{"namespace", n.name}});
  w.Family("ptstore_namespace_prefix_nodes", MetricType::kGauge, "Increments (radix tree nodes) by namespace.");
  for (const NamespaceInfo& n : namespaces) w.Sample(n.prefixes, {{"namespace", n.name}});
}

void AppendNamespaceQuotaMetrics(core::PromWriter& w, const std::vector<NamespaceQuota>& quotas) {
  w.Family("ptstore_namespace_quota_bytes", MetricType::kGauge,
           "A namespace's quota on this node by tier (dram, ssd); 0: no limit.");
  for (const NamespaceQuota& q : quotas) {
    w.Sample(q.dram_quota, {{"namespace", q.ns}, {"tier", "dram"}});
    w.Sample(q.ssd_quota, {{"namespace", q.ns}, {"tier", "ssd"}});
  }
  w.Family("ptstore_namespace_used_bytes", MetricType::kGauge,
           "What a namespace's increments take on this node by tier (dram: arena bytes, ssd: record bytes), "
           "counted against its quota.");
  for (const NamespaceQuota& q : quotas) {
    w.Sample(q.dram_bytes, {{"namespace", q.ns}, {"tier", "dram"}});
    w.Sample(q.ssd_bytes, {{"namespace", q.ns}, {"tier", "ssd"}});
  }
  w.Family("ptstore_namespace_quota_evictions_total", MetricType::kCounter,
           "A namespace's increments evicted from DRAM (tier dram) or dropped from SSD (tier ssd) to keep it "
           "under its quota.");
  for (const NamespaceQuota& q : quotas) {
    w.Sample(q.dram_evictions, {{"namespace", q.ns}, {"tier", "dram"}});
    w.Sample(q.ssd_evictions, {{"namespace", q.ns}, {"tier", "ssd"}});
  }
  w.Family("ptstore_namespace_cut_saves_total", MetricType::kCounter,
           "Saves into a namespace that stored less than asked (or nothing) because of its DRAM quota.");
  for (const NamespaceQuota& q : quotas) w.Sample(q.cut_saves, {{"namespace", q.ns}});
}

std::string RenderStoreMetrics(const StoreStats& s, const NodeMetrics& node,
                               const std::vector<NamespaceInfo>& namespaces) {
  core::PromWriter w;
  AppendNodeMetrics(w, node);
  AppendStoreMetrics(w, s);
  AppendNamespaceMetrics(w, namespaces);
  if (!w.status().ok()) PTS_ERROR("metrics", w.status().ToString());  // a bug in the tables above
  return w.Take();
}

}  // namespace ptstore::storage

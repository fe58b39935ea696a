#include "storage/cluster/cluster_metrics.h"

namespace ptstore::storage {

void AppendClusterMetrics(core::PromWriter& w, const Cluster& cluster) {
  using core::MetricType;
  const ClusterCounters& c = cluster.counters();
  w.Counter("ptstore_shard_lookups_total", "Lookups sent to another node's index shard.", c.shard_lookups.load());
  w.Counter("ptstore_shard_lookup_failures_total", "Shard lookups that failed (a miss).",
            c.shard_lookup_failures.load());
  w.Counter("ptstore_metadata_cache_hits_total",
            "Prompts this node's index matched whole, so no shard was asked.", c.metadata_hits.load());
  w.Counter("ptstore_local_shard_requests_total", "Prompts whose index shard is this node.", c.local_shard.load());
  w.Counter("ptstore_announces_total", "Announcements of owned increments sent to shards.", c.announces.load());
  w.Counter("ptstore_removals_sent_total", "Removals this node sent to the other members.", c.removals_sent.load());
  w.Counter("ptstore_removals_applied_total", "Removals from other nodes applied here.", c.removals_applied.load());
  w.Counter("ptstore_fetch_requests_total", "Fetch requests sent to owners (one per owner per load).",
            c.fetch_requests.load());
  w.Counter("ptstore_fetch_failures_total", "Fetch requests that failed (the load was cut short: a miss).",
            c.fetch_failures.load());
  w.Counter("ptstore_fetch_retries_total",
            "Fetch requests made again on another connection: the first failed its frame MACs, or was found "
            "closed after idling in the pool.",
            c.fetch_retries.load());
  w.Family("ptstore_fetched_bytes_total", MetricType::kCounter, "Bytes fetched from other nodes, by data path.");
  w.Sample(c.bytes_tcp.load(), {{"path", "tcp"}});
  w.Sample(c.bytes_rma.load(), {{"path", "rma"}});
  if (c.bytes_loopback.load() > 0) w.Sample(c.bytes_loopback.load(), {{"path", "loopback"}});
  w.Counter("ptstore_peer_auth_failures_total", "Connections from or to peers refused by the cluster secret check.",
            c.auth_failures.load());
  w.Counter("ptstore_peer_version_refusals_total",
            "Connections from or to peers refused for want of a common peer-protocol version (or one with frame "
            "MACs under require_integrity).",
            c.wire.version_refusals.load());
  w.Counter("ptstore_peer_integrity_failures_total",
            "Node-to-node frames or bulk runs whose MAC did not match (altered, replayed, reordered or injected): "
            "each closed its connection.",
            c.wire.integrity_failures.load());
  w.Family("ptstore_peer_sessions_total", MetricType::kCounter,
           "Node-to-node connections authenticated (in and out), by the peer-protocol version agreed; version 2 "
           "and later carry frame MACs.");
  for (size_t v = 1; v <= rdma::kPeerProtocolMax && v < rdma::WireCounters::kVersions; ++v) {
    w.Sample(c.wire.sessions[v].load(), {{"version", std::to_string(v)}});
  }
  w.Family("ptstore_rpc_latency_seconds", MetricType::kHistogram, "Latency of node-to-node RPCs by kind.");
  w.Histogram(c.lookup_latency.Snapshot(), {{"rpc", "shard_lookup"}});
  w.Histogram(c.fetch_latency.Snapshot(), {{"rpc", "fetch"}});
  w.Histogram(c.ping_latency.Snapshot(), {{"rpc", "ping"}});
  w.Family("ptstore_cluster_reloads_total", MetricType::kCounter,
           "Reloads of the cluster file (SIGHUP): applied, or refused with the membership unchanged.");
  w.Sample(c.reloads.load(), {{"result", "applied"}});
  w.Sample(c.reloads_refused.load(), {{"result", "refused"}});
  w.Gauge("ptstore_cluster_members", "Members in the cluster file as last applied (this node included).",
          static_cast<uint64_t>(cluster.member_count()));
  const core::ClusterStatusReply st = cluster.MemberStatus();
  w.Family("ptstore_member_up", MetricType::kGauge, "1 when this node sees the member alive (or is it), else 0.");
  for (const auto& m : st.members) {
    const bool up = m.state == MemberState::kSelf || m.state == MemberState::kAlive || m.state == MemberState::kSuspect;
    w.Sample(up ? 1 : 0, {{"node", std::to_string(m.id)}, {"state", core::MemberStateName(m.state)}});
  }
  w.Family("ptstore_member_owned_bytes", MetricType::kGauge, "Owned bytes of each member (from its last ping).");
  for (const auto& m : st.members) w.Sample(m.owned_bytes, {{"node", std::to_string(m.id)}});
}

void AppendEtcdMetrics(core::PromWriter& w, const EtcdMembershipCounters& c) {
  w.Gauge("ptstore_etcd_reachable", "1 when this node's last call to etcd succeeded, else 0.",
          uint64_t{c.reachable.load() ? 1u : 0u});
  w.Counter("ptstore_etcd_membership_updates_total", "Member lists from etcd handed to the cluster.",
            c.updates.load());
  w.Counter("ptstore_etcd_registrations_total", "Puts of this node's entry (1 at start, 1 per lease that expired).",
            c.registrations.load());
  w.Counter("ptstore_etcd_failures_total", "Calls to etcd that failed (unreachable, no leader, a broken watch).",
            c.failures.load());
  w.Counter("ptstore_etcd_bad_entries_total", "Entries under the prefix skipped as not a member's.",
            c.bad_entries.load());
}

}  // namespace ptstore::storage

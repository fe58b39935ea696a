// The cluster layer's metrics (storage/cluster/cluster.h) in the Prometheus text
// format: RPCs and their latencies, bytes moved by data path, member state.
#pragma once

#include "core/prometheus.h"
#include "storage/cluster/cluster.h"
#include "storage/cluster/etcd_membership.h"

namespace ptstore::storage {

void AppendClusterMetrics(core::PromWriter& w, const Cluster& cluster);
// Membership in etcd (storage/cluster/etcd_membership.h): reachability and counts.
void AppendEtcdMetrics(core::PromWriter& w, const EtcdMembershipCounters& c);

}  // namespace ptstore::storage

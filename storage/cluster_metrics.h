// The cluster layer's metrics (storage/cluster.h) in the Prometheus text
// format: RPCs and their latencies, bytes moved by data path, member state.
#pragma once

#include "core/prometheus.h"
#include "storage/cluster.h"

namespace ptstore::storage {

void AppendClusterMetrics(core::PromWriter& w, const Cluster& cluster);

}  // namespace ptstore::storage

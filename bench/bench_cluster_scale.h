// Section 5 of bench_cluster (its header comment): weak scaling of a
// shared-document workload over cluster sizes, the same work per node:
// every node saves its documents, then asks questions about documents drawn
// by Zipf popularity over all of them (Lookup, Load, check the bytes,
// "compute" the rest, Save the whole prompt).
#pragma once

#include "bench/bench_cluster_options.h"
#include "bench/bench_cluster_util.h"
#include "ptstore/status.h"

namespace ptstore::bench::cluster_bench {

// One run per o.scale_nodes: prints where the tokens came from (own DRAM,
// a local replica, a remote fetch, missing), the bytes moved between
// nodes, shard RPCs and throughput (unless --json); fills `out` when given.
// Fails on a wrong byte, a failed request, or nodes that fetched other
// than what their peers served.
Status RunScale(const Options& o, json* out);

}  // namespace ptstore::bench::cluster_bench

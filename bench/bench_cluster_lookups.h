// Section 4 of bench_cluster (its header comment): Client::Lookup latency
// on node 1 of a 3-node cluster, of prompts node 0 saved, split by the
// shard of their root: node 1 itself or another node (first lookup: one RPC
// to the shard; again: node 1's metadata cache; a prompt longer than what
// is stored: one RPC every time).
#pragma once

#include "bench/bench_cluster_options.h"
#include "bench/bench_cluster_util.h"
#include "ptstore/status.h"

namespace ptstore::bench::cluster_bench {

// Prints its table (unless --json) and fills `out` when given. Fails when
// a lookup matches less than what was stored, or when node 1's shard RPCs
// disagree with the split (the local classes must send none, the remote
// first and longer lookups one each).
Status RunLookups(const Options& o, json* out);

}  // namespace ptstore::bench::cluster_bench

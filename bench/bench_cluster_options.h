// bench_cluster's options (bench/bench_cluster.cc parses them; its header
// comment says what each section measures) and the namespace every section
// saves its prompts in.
//
// Thread safety: read-only once parsed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ptstore::bench::cluster_bench {

struct Options {
  uint64_t tokens = 8192;
  int reps = 15;
  std::vector<std::string> paths = {"tcp", "tcp-v1", "rma"};
  bool redis = true;
  std::string redis_server = "redis-server";
  uint64_t redis_value = 1 << 20;
  int redis_depth = 16;
  bool lookups = true;
  uint32_t lookup_prompts = 96;     // stored prompts (half local shard, half remote)
  uint32_t lookup_tokens = 2048;
  uint32_t lookup_samples = 2000;   // per class, repeated classes
  bool scale = true;
  std::vector<uint32_t> scale_nodes = {2, 4, 8};
  std::string scale_arena = "256MiB";
  std::string scale_path = "tcp";
  uint32_t scale_docs = 4;          // per node
  uint32_t scale_requests = 96;     // per node
  uint32_t min_doc = 256, max_doc = 1024;
  uint32_t min_question = 16, max_question = 48;
  double zipf = 1.0;
  uint32_t replicate_after = 2;     // in the scaling runs
  bool quick = false, json = false, verbose = false;
  // Heartbeats of the clusters: the daemon's defaults (the harness's are
  // short, for failure tests; a 1 GiB transfer on 2 busy cores must not look
  // like a dead node), shorter in --quick (small transfers; faster start).
  int heartbeat_ms = 500;
  int rpc_timeout_ms = 1000;
  // The nodes' --log-level (--node-log-level; the metrics address is logged
  // at info).
  std::string node_log_level = "info";
};

inline constexpr char kNs[] = "bench";

}  // namespace ptstore::bench::cluster_bench

// bench_cluster: the cluster layer (storage/cluster/cluster.h) with real ptstored
// processes on loopback ports (the tests' harness, tests/testing/cluster.h),
// against baselines measured in the same run (issue 4's benchmarks):
//
//  1. Remote load of a --tokens prefix (default 8192: 1 GiB, Mistral-7B
//     geometry). Node A saves it; a client of node B loads it into its own
//     buffer with Client::Load, and with Pin + CopyTo + Release. Replication
//     is off (--replicate-after 0), so every load is a transient fetch from A
//     (checked: node B's remote_fetch_bytes grows by the prefix each time,
//     and its metrics count the bytes on the data path asked for).
//     Baseline: raw loopback TCP of the same bytes in this process (a
//     listener and a connected socket; one thread sends the bytes from
//     memory on a 1-byte request, the other receives them into a buffer), 1
//     and 2 connections. Target: load >= 0.8 x raw TCP (1 connection).
//  2. The same bytes through Redis: the benchmark starts its own
//     redis-server (free port, no persistence, temporary directory), SETs
//     them as 1 MiB values and GETs them all back with hiredis into a buffer
//     (1 client one GET at a time, 1 client pipelined, 2 clients pipelined).
//     Target: remote load >= 1.5 x the best Redis row.
//  3. RMA vs TCP stream. One 2-node cluster per data path (--paths: tcp;
//     rma, libfabric's tcp provider; rma-<provider>, e.g. rma-shm), all
//     running at once, so that every repetition runs every method of every
//     path and every baseline (in a rotating order). Ratios are given of the
//     medians and "paired" (the median of each repetition's own ratio; the
//     verdicts use it), with the CPU time each method cost (this process and
//     the servers that worked for it).
//  4. Lookup latency on a 3-node cluster: Client::Lookup on node 1 of
//     prompts node 0 saved, split by the shard of their root (rendezvous
//     hashing over the live node ids, as storage/cluster/cluster.cc ShardFor):
//     node 1 itself, or another node (first lookup: one RPC to the shard;
//     again: node 1's metadata cache; a prompt longer than what is stored:
//     one RPC every time). Node 1's metrics must agree with the split.
//  5. Weak scaling (2, 4, 8 nodes): a shared-document workload, the same
//     work per node: every node saves --scale-docs documents, then asks
//     --scale-requests questions (a document drawn by Zipf popularity over
//     all documents + a new question suffix): Lookup, Load, check the bytes,
//     "compute" the rest, Save the whole prompt. It reports where the tokens
//     came from (own DRAM, a local replica, a remote fetch, missing), the
//     bytes moved between nodes, shard RPCs and throughput, per cluster size.
//
// Every loaded byte is checked against its source (the KV generator of
// bench/workload.h); a wrong byte, a load that is not the kind it must be
// or a failed request exits non-zero. Times are never asserted: the program
// prints ratios. The nodes' directories are removed at the end.
//
// The sections' code: bench_cluster_loads.cc and bench_cluster_load_report.cc
// (1-3), bench_cluster_baselines.cc (raw TCP, Redis), bench_cluster_lookups.cc
// (4), bench_cluster_scale.cc (5); the clusters and their metrics in
// bench_cluster_nodes.cc; the options in bench_cluster_options.h.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/bench_cluster_loads.h"
#include "bench/bench_cluster_lookups.h"
#include "bench/bench_cluster_options.h"
#include "bench/bench_cluster_scale.h"
#include "bench/bench_cluster_util.h"
#include "bench/bench_util.h"
#include "core/command_line.h"

namespace ptstore::bench::cluster_bench {
namespace {

Status Run(const Options& o) {
  json out;
  if (!o.json) {
    std::printf("bench_cluster: remote loads, lookups and scaling of a PTStore cluster of real ptstored processes "
                "on loopback%s\nmachine: %s\n",
                o.quick ? " (--quick)" : "", MachineDescription().c_str());
  }
  std::vector<PathResult> paths;
  if (!o.paths.empty()) PTS_RETURN_IF_ERROR(RunLoads(o, o.json ? &out["load"] : nullptr, &paths));
  if (o.lookups) PTS_RETURN_IF_ERROR(RunLookups(o, o.json ? &out["lookup"] : nullptr));
  if (o.scale) PTS_RETURN_IF_ERROR(RunScale(o, o.json ? &out["scale"] : nullptr));
  if (o.json) {
    std::printf("%s\n", out.dump(2).c_str());
    return Status::OK();
  }
  if (!paths.empty()) {
    std::printf("\nsummary (targets of issue 4):\n");
    std::printf("  (paired ratios: Client::Load, Pin + CopyTo)\n");
    for (const PathResult& r : paths) {
      std::printf("  %s: remote load / raw TCP = %.2f, %.2f (>= 0.8: %s)", r.path.c_str(), r.load_vs_tcp,
                  r.pin_vs_tcp, std::min(r.load_vs_tcp, r.pin_vs_tcp) >= 0.8 ? "met" : "MISSED");
      if (r.has_redis) {
        std::printf("; / best Redis = %.2f, %.2f (>= 1.5: %s)", r.load_vs_redis, r.pin_vs_redis,
                    std::min(r.load_vs_redis, r.pin_vs_redis) >= 1.5 ? "met" : "MISSED");
      }
      std::printf("\n");
    }
  }
  std::printf("OK: every loaded byte matched its source.\n");
  return Status::OK();
}

}  // namespace

// The command line of bench_cluster (its flags: --help), then Run.
int Main(int argc, char** argv) {
  CLI::App app{"bench_cluster: a PTStore cluster on loopback vs raw TCP and Redis (issue 4)"};
  Options o;
  std::string paths = "tcp,tcp-v1,rma", nodes = "2,4,8";
  bool no_redis = false, no_lookups = false, no_scale = false, no_loads = false;
  app.add_option("--tokens", o.tokens, "prefix length of the remote load (Mistral geometry: 128 KiB per token)");
  app.add_option("--reps", o.reps, "repetitions of the remote-load methods")->check(CLI::Range(1, 100));
  app.add_option("--paths", paths,
                 "data paths to measure, comma-separated: tcp, tcp-v1 (the TCP stream between nodes of peer "
                 "protocol 1: no frame MACs), rma (libfabric tcp provider), rma-<provider> (e.g. rma-shm)");
  app.add_flag("--no-loads", no_loads, "skip the remote-load comparison (sections 1-3)");
  app.add_flag("--no-redis", no_redis, "skip the Redis baseline");
  app.add_option("--redis-server", o.redis_server, "redis-server binary");
  app.add_option("--redis-depth", o.redis_depth, "GETs in flight per pipelined Redis client")->check(CLI::Range(2, 4096));
  app.add_flag("--no-lookups", no_lookups, "skip the lookup latencies (section 4)");
  app.add_option("--lookup-prompts", o.lookup_prompts, "stored prompts for the lookups");
  app.add_option("--lookup-tokens", o.lookup_tokens, "tokens per looked-up prompt");
  app.add_option("--lookup-samples", o.lookup_samples, "lookups per repeated class");
  app.add_flag("--no-scale", no_scale, "skip the weak-scaling runs (section 5)");
  app.add_option("--scale-nodes", nodes, "cluster sizes of the scaling runs, comma-separated");
  app.add_option("--scale-arena", o.scale_arena, "arena of each node in the scaling runs");
  app.add_option("--scale-path", o.scale_path, "data path of the scaling runs");
  app.add_option("--scale-docs", o.scale_docs, "documents per node");
  app.add_option("--scale-requests", o.scale_requests, "requests per node");
  app.add_option("--zipf", o.zipf, "Zipf exponent of the documents' popularity");
  app.add_option("--replicate-after", o.replicate_after, "the scaling runs' ptstored --replicate-after");
  app.add_flag("--quick", o.quick, "small sizes, for the test suite (a few seconds)");
  app.add_flag("--json", o.json, "print JSON");
  app.add_flag("--verbose", o.verbose, "print the nodes' logs when something fails");
  app.add_option("--node-log-level", o.node_log_level, "the nodes' --log-level (debug, info)");
  if (std::optional<int> rc = core::ParseCommandLine(app, argc, argv)) return *rc;
  auto split = [](const std::string& s) {
    std::vector<std::string> v;
    std::stringstream ss(s);
    std::string x;
    while (std::getline(ss, x, ',')) {
      if (!x.empty()) v.push_back(x);
    }
    return v;
  };
  o.paths = no_loads ? std::vector<std::string>{} : split(paths);
  for (const std::string& p : o.paths) {
    if (p != "tcp" && p != "tcp-v1" && p.rfind("rma", 0) != 0) {
      std::fprintf(stderr, "bench_cluster: --paths takes tcp, tcp-v1, rma and rma-<libfabric provider>, not %s\n",
                   p.c_str());
      return 2;
    }
  }
  o.scale_nodes.clear();
  for (const std::string& n : split(nodes)) o.scale_nodes.push_back(static_cast<uint32_t>(std::stoul(n)));
  o.redis = !no_redis;
  o.lookups = !no_lookups;
  o.scale = !no_scale;
  if (o.quick) {
    o.heartbeat_ms = 100;
    o.rpc_timeout_ms = 500;
    o.tokens = 256;  // 32 MiB
    o.reps = 1;
    o.lookup_prompts = 16;
    o.lookup_tokens = 512;
    o.lookup_samples = 50;
    o.scale_nodes = {2, 3};
    o.scale_arena = "96MiB";
    o.scale_docs = 2;
    o.scale_requests = 6;
    o.min_doc = 64;
    o.max_doc = 256;
  }
  Status s = Run(o);
  if (!s.ok()) {
    std::fprintf(stderr, "bench_cluster: %s\n", s.ToString().c_str());
    return 1;
  }
  return 0;
}

}  // namespace ptstore::bench::cluster_bench

int main(int argc, char** argv) { return ptstore::bench::cluster_bench::Main(argc, argv); }

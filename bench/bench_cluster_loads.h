// Sections 1-3 of bench_cluster (its header comment): the remote load of a
// prefix on every data path (one 2-node cluster per path, all running at
// once: node A saves the prefix, a client of node B loads it) against raw
// loopback TCP and Redis, every method in every repetition, in a rotating
// order. RunLoads runs it; LoadBench is its state, run in steps
// (bench_cluster_loads.cc: the set-up, the methods and the repetitions;
// bench_cluster_load_report.cc: the checks of the nodes' counters, the
// table, the verdicts and the comparisons of the paths).
//
// Thread safety: one thread runs it (the baselines use threads of their
// own inside a method).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_cluster_baselines.h"
#include "bench/bench_cluster_nodes.h"
#include "bench/bench_cluster_options.h"
#include "bench/bench_cluster_util.h"
#include "bench/bench_util.h"
#include "ptstore/client.h"
#include "ptstore/layout.h"

namespace ptstore::bench::cluster_bench {

// One timed method of the load comparison.
struct Method {
  Method(std::string n, std::string k, std::function<Result<double>()> r)
      : name(std::move(n)), key(std::move(k)), run(std::move(r)) {}
  std::string name;
  std::string key;  // for JSON
  std::function<Result<double>()> run;
  std::vector<double> seconds;  // one per repetition, in order
  std::vector<double> cpu;      // CPU seconds of the timed part (this process + its servers), per repetition
};

// Throughput of `x` over `base`: the ratio of the medians, and the median of
// the repetitions' own ratios ("paired": both ran in the same repetition,
// seconds apart, so the figure is less exposed to this shared machine's
// drift than the ratio of medians).
double OfMedians(const Method& base, const Method& x);
double Paired(const Method& base, const Method& x);

// One data path's cluster: node A (0) owns the prefix, node B (1) loads it.
struct PathCluster {
  std::string path;
  ClusterPtr cluster;
  NodeMetrics metrics_b;
  std::unique_ptr<Client> a, b;
  uint64_t remote_loads = 0;
  // Seconds node B spent in the fetch RPC of each remote load (its
  // metrics), by method; Pin and CopyTo of the Pin method.
  std::map<std::string, std::vector<double>> fetch_s;
  std::vector<double> pin_s, copy_s;
  ClusterMetrics m0;
  uint64_t loads_before = 0;
};

struct PathResult {
  std::string path;
  double load_vs_tcp = 0, pin_vs_tcp = 0, load_vs_redis = 0, pin_vs_redis = 0;  // paired
  bool has_redis = false;
};

// Sections 1-3 for o.paths: prints its table and verdicts (unless --json),
// fills `out` when given, and adds each path's paired ratios to `results`
// (the summary's). Fails on a wrong byte, a load on node B that was not a
// remote fetch of the whole prefix, or node B's counters disagreeing.
Status RunLoads(const Options& o, json* out, std::vector<PathResult>* results);

struct LoadReport;

class LoadBench {
 public:
  explicit LoadBench(const Options& o);
  LoadBench(const LoadBench&) = delete;
  LoadBench& operator=(const LoadBench&) = delete;

  // The prefix, its buffers, the raw TCP baselines; prints the header.
  Status Prepare();
  // The Redis baseline, when there is one (its note printed; the SETs'
  // seconds in out["redis_set_s"]).
  Status StartRedis(json* out);
  // One cluster per path, node A holding the prefix.
  Status StartClusters();
  // The methods: the baselines, then each path's.
  void AddMethods();
  // An untimed warm-up of every method (checked), then the repetitions,
  // each running every method, starting with a different one each time.
  Status Repeat();
  // The checks of node B's counters, the table, the verdicts and the
  // comparisons of the paths (bench_cluster_load_report.cc).
  Status Report(json* out, std::vector<PathResult>* results);

 private:
  // The methods' runs: each poisons the destination, times the transfer
  // and checks every byte.
  Result<double> RawTcp(TcpBaseline& tcp, uint8_t poison, const std::string& what);
#ifdef PTSTORE_BENCH_HIREDIS
  Result<double> RedisGet(const std::string& what, int depth, int clients);
#endif
  Result<double> RemoteLoad(PathCluster& pc, const std::string& tag);
  Result<double> RemotePinCopy(PathCluster& pc, const std::string& tag);
  Result<double> LocalLoad(PathCluster& pc, const std::string& tag);

  // Runs `body` timed; its CPU time (this process and `servers`) goes to
  // last_cpu_.
  Result<double> Timed(const std::vector<pid_t>& servers, const std::function<Status()>& body);
  // A load on B that must be a remote fetch of the whole prefix: checks
  // node B's counters and keeps its fetch RPC's seconds under `what`.
  Result<double> Remote(PathCluster& pc, const std::string& what, const std::function<Result<uint64_t>()>& load);
  void Poison(uint8_t v);
  Status Check(const std::string& what) const;
  // `st`, after printing the nodes' logs (--verbose) when it is an error.
  Status FailLogs(Status st) const;
  // The method of `key` (the first one when there is none).
  const Method& Find(const std::string& key) const;

  // The report's steps (bench_cluster_load_report.cc).
  void Row(LoadReport& r, const Method& m) const;
  void Part(LoadReport& r, const char* name, const std::vector<double>& v) const;
  Status ReportPath(LoadReport& r, PathCluster& pc, std::vector<PathResult>* results);
  void CompareWithTcp(LoadReport& r, json* out);
  void CompareIntegrity(LoadReport& r, json* out);
  void MethodsJson(const LoadReport& r, json* out) const;

  const Options& o_;
  const Layout layout_;
  uint64_t tokens_n_ = 0, bpt_ = 0, bytes_ = 0, arena_ = 0;
  std::vector<uint32_t> tokens_;
  // Destroyed in reverse order: the methods and the clusters before the
  // baselines, the baselines' senders before the buffers they read.
  HostBuffer src_, dst_;
  std::unique_ptr<TcpBaseline> tcp1_, tcp2_;
#ifdef PTSTORE_BENCH_HIREDIS
  std::unique_ptr<RedisBaseline> redis_;
#endif
  std::vector<std::unique_ptr<PathCluster>> pcs_;
  std::vector<Method> methods_;
  size_t n_baselines_ = 0;
  double last_cpu_ = 0;
};

}  // namespace ptstore::bench::cluster_bench

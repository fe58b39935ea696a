// bench_e2e: the papers' experiments end to end (docs/e2e.md).
//
//   bench_e2e --mode ptstore,local --workload wikiqa --context-tokens 8192
//   bench_e2e --sweep quick            # the small configuration in ctest (< 1 min)
//   bench_e2e --sweep full --json docs/results/e2e/results.json   # scripts/e2e-sweep
//
// Each run starts its own ptstored nodes (real processes on loopback ports),
// replays a workload through the scheduler and prints a line; --json writes
// every run for bench/e2e/plot.py. Exits non-zero on a wrong byte or a
// store error; it never judges speed (the figures are for docs/).
#include <fstream>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "bench/bench_util.h"
#include "bench/e2e/driver.h"

namespace ptstore::bench::e2e {
namespace {

std::vector<std::string> Split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

// The Poisson rate at which `o.nodes` instances recomputing every prompt of
// o's workload would be `load` busy: load * nodes / mean prefill time of its
// prompts (by the cost model). The same rate serves every mode, so a mode's
// TTFT shows what reuse saves at one offered load.
double RateFor(const E2eOptions& o, double load) {
  auto cost = sched::CostModel::Load(o.profiles.empty() ? sched::DefaultProfilesPath() : o.profiles, o.model, o.gpu);
  if (!cost.ok()) return 1.0;
  E2eWorkloadOptions w = o.workload;
  w.rate = 1.0;  // the prompts do not depend on the rate
  double total = 0;
  const std::vector<E2eRequest> reqs = MakeE2eWorkload(w);
  for (const E2eRequest& r : reqs) total += cost->PrefillSeconds(r.tokens.size());
  return reqs.empty() || total <= 0 ? 1.0 : load * o.nodes * double(reqs.size()) / total;
}

std::vector<E2eOptions> Sweep(const std::string& which, const E2eOptions& base) {
  std::vector<E2eOptions> runs;
  const bool quick = which == "quick";
  const std::vector<Mode> modes = {Mode::kNoReuse, Mode::kLocal, Mode::kNoReplication, Mode::kPtstore};
  // Sequence length: WikiQA-like documents of exactly L tokens; the
  // engines' view (least-load routing) for every mode.
  const std::vector<uint32_t> lengths = quick ? std::vector<uint32_t>{2048} : std::vector<uint32_t>{1024, 2048, 4096, 8192};
  for (uint32_t len : lengths) {
    for (Mode m : modes) {
      E2eOptions o = base;
      o.experiment = quick ? "quick" : "seqlen";
      o.mode = m;
      o.policy = sched::Policy::kLeastLoad;
      o.nodes = quick ? 2 : 4;
      o.workload.kind = WorkloadKind::kWikiQa;
      o.workload.context_tokens = len;
      o.workload.requests = quick ? 40 : 200;
      o.workload.rate = RateFor(o, 0.6);
      runs.push_back(o);
    }
  }
  // The same with locality routing (the scheduler's prefix policy) for
  // every mode: what routing alone recovers for node-local caches.
  if (!quick) {
    for (uint32_t len : lengths) {
      for (Mode m : modes) {
        E2eOptions o = base;
        o.experiment = "seqlen-prefix";
        o.mode = m;
        o.policy = m == Mode::kNoReuse ? sched::Policy::kLeastLoad : sched::Policy::kPrefixLocality;
        o.nodes = 4;
        o.workload.kind = WorkloadKind::kWikiQa;
        o.workload.context_tokens = len;
        o.workload.requests = 200;
        o.workload.rate = RateFor(o, 0.6);
        runs.push_back(o);
      }
    }
  }
  if (quick) {
    // Prefix locality against session affinity, small.
    for (sched::Policy p : {sched::Policy::kSessionAffinity, sched::Policy::kPrefixLocality}) {
      E2eOptions o = base;
      o.experiment = "quick";
      o.policy = p;
      o.nodes = 2;
      o.workload.kind = WorkloadKind::kWikiQa;
      o.workload.context_tokens = 2048;
      o.workload.requests = 40;
      o.workload.rate = RateFor(o, 0.6);
      runs.push_back(o);
    }
    return runs;
  }
  // What replicas buy as the network gets slower than the GPU's PCIe: at 8k
  // tokens, the remote path over RMA (the profile's 200 Gb/s) and TCP
  // (100 GbE), without replicas and with replicas kept at the 2nd (the
  // default) or the 1st load.
  for (sched::LoadPath path : {sched::LoadPath::kRma, sched::LoadPath::kTcp}) {
    for (uint32_t keep : {0u, 2u, 1u}) {
      E2eOptions o = base;
      o.experiment = "replication";
      o.mode = keep == 0 ? Mode::kNoReplication : Mode::kPtstore;
      o.replicate_after = keep == 0 ? base.replicate_after : keep;
      o.remote_path = path;
      o.policy = sched::Policy::kLeastLoad;
      o.nodes = 4;
      o.workload.kind = WorkloadKind::kWikiQa;
      o.workload.context_tokens = 8192;
      o.workload.requests = 200;
      o.workload.rate = RateFor(o, 0.6);
      runs.push_back(o);
    }
  }
  // Weak scaling: 2 -> 8 nodes, requests and rate per node fixed.
  for (uint32_t n : {2u, 4u, 8u}) {
    for (Mode m : {Mode::kLocal, Mode::kNoReplication, Mode::kPtstore}) {
      E2eOptions o = base;
      o.experiment = "scaling";
      o.mode = m;
      o.policy = sched::Policy::kLeastLoad;
      o.nodes = n;
      o.workload.kind = WorkloadKind::kWikiQa;
      o.workload.context_tokens = 4096;
      o.workload.requests = 50 * n;
      o.workload.rate = RateFor(o, 0.6);
      runs.push_back(o);
    }
  }
  // Policies, PTStore mode, three workload shapes, a busier cluster.
  for (WorkloadKind w : {WorkloadKind::kWikiQa, WorkloadKind::kShareGpt, WorkloadKind::kReAct}) {
    for (sched::Policy p : {sched::Policy::kRoundRobin, sched::Policy::kLeastLoad, sched::Policy::kSessionAffinity,
                            sched::Policy::kPrefixLocality}) {
      E2eOptions o = base;
      o.experiment = "policies";
      o.mode = Mode::kPtstore;
      o.policy = p;
      o.nodes = 4;
      o.workload.kind = w;
      o.workload.requests = 200;
      o.workload.rate = RateFor(o, 0.8);
      runs.push_back(o);
    }
  }
  // Every workload shape under every mode.
  for (WorkloadKind w : AllWorkloads()) {
    for (Mode m : modes) {
      E2eOptions o = base;
      o.experiment = "workloads";
      o.mode = m;
      o.policy = sched::Policy::kLeastLoad;
      o.nodes = 4;
      o.workload.kind = w;
      o.workload.requests = 200;
      o.workload.rate = RateFor(o, 0.6);
      runs.push_back(o);
    }
  }
  return runs;
}

int Main(int argc, char** argv) {
  CLI::App app{"bench_e2e: the scheduler, the cost model and PTStore end to end (docs/e2e.md)"};
  E2eOptions base;
  std::string workload = "wikiqa", modes = "ptstore", policies = "least-load", nodes = "4", sweep, json_path;
  std::string remote_path = "rma";
  app.add_option("--workload", workload, "wikiqa, squad, sharegpt, loogle or react");
  app.add_option("--mode", modes, "comma list: no-reuse, local, no-replication, ptstore");
  app.add_option("--policy", policies, "comma list: round-robin, least-load, session, prefix");
  app.add_option("--nodes", nodes, "comma list of node counts");
  app.add_option("--requests", base.workload.requests, "requests per run");
  app.add_option("--rate", base.workload.rate, "Poisson arrivals per second (0: 60% of the nodes' recompute capacity)");
  app.add_option("--context-tokens", base.workload.context_tokens, "documents of exactly this length (0: the shape's)");
  app.add_option("--seed", base.workload.seed, "workload seed");
  app.add_option("--gpu", base.gpu, "profile: a100-80g, h100-80g or h200");
  app.add_option("--model", base.model, "profile model");
  app.add_option("--profiles", base.profiles, "profiles file (default: the shipped sched/profiles.toml)");
  app.add_option("--remote-path", remote_path, "the cost model's network path: rma or tcp");
  app.add_option("--data-path", base.data_path, "the nodes' real data path: tcp or rma");
  app.add_option("--replicate-after", base.replicate_after, "ptstore mode: loads before a replica is kept");
  app.add_option("--load-bound", base.load_bound_s, "prefix policy's load bound (seconds of queued prefill)");
  app.add_option("--real-bytes-per-token", base.real_bytes_per_token, "KV bytes the store really moves per token");
  app.add_option("--arena-size", base.arena_size, "arena per node");
  app.add_flag("!--no-verify", base.verify, "do not check loaded bytes");
  app.add_option("--sweep", sweep, "quick or full: the predefined experiments");
  app.add_option("--json", json_path, "write every run as JSON here");
  CLI11_PARSE(app, argc, argv);

  auto fail = [](const Status& s) {
    std::cerr << "bench_e2e: " << s.ToString() << "\n";
    return 1;
  };
  if (remote_path == "rma") {
    base.remote_path = sched::LoadPath::kRma;
  } else if (remote_path == "tcp") {
    base.remote_path = sched::LoadPath::kTcp;
  } else {
    return fail(InvalidArgument("--remote-path must be rma or tcp, not '" + remote_path + "'"));
  }
  auto kind = ParseWorkload(workload);
  if (!kind.ok()) return fail(kind.status());
  base.workload.kind = *kind;

  std::vector<E2eOptions> runs;
  if (!sweep.empty()) {
    if (sweep != "quick" && sweep != "full") return fail(InvalidArgument("--sweep must be quick or full"));
    runs = Sweep(sweep, base);
  } else {
    for (const std::string& ms : Split(modes)) {
      auto m = ParseMode(ms);
      if (!m.ok()) return fail(m.status());
      for (const std::string& ps : Split(policies)) {
        auto p = sched::ParsePolicy(ps);
        if (!p.ok()) return fail(p.status());
        for (const std::string& ns : Split(nodes)) {
          E2eOptions o = base;
          o.mode = *m;
          o.policy = *p;
          o.nodes = static_cast<uint32_t>(std::stoul(ns));
          o.experiment = "single";
          if (o.workload.rate <= 0) o.workload.rate = RateFor(o, 0.6);
          runs.push_back(o);
        }
      }
    }
  }

  nlohmann::json out = {{"command", ""}, {"config", {{"machine", MachineDescription()}}}, {"runs", nlohmann::json::array()}};
  std::string cmd;
  for (int i = 0; i < argc; ++i) cmd += (i ? " " : "") + std::string(argv[i]);
  out["command"] = cmd;
  std::cout << Format("%-13s %-9s %-15s %-11s %5s %6s %7s | %9s %9s %9s %9s | %9s %8s | %5s %6s %6s %6s | %6s\n",
                      "experiment", "workload", "mode", "policy", "nodes", "ctx", "rate", "ttft_mean", "ttft_p50",
                      "ttft_p99", "warm_mean", "jct_mean", "tpot_ms", "hit%", "dram", "remote", "miss", "wall_s");
  for (const E2eOptions& o : runs) {
    Result<E2eResult> r = RunE2e(o);
    if (!r.ok()) {
      return fail(Status(r.status().code(), std::string(ModeName(o.mode)) + "/" + sched::PolicyName(o.policy) + "/" +
                                                WorkloadName(o.workload.kind) + ": " + r.status().message()));
    }
    std::cout << Format("%-13s %-9s %-15s %-11s %5u %6u %7.2f | %8.3fs %8.3fs %8.3fs %8.3fs | %8.2fs %8.2f | %5.1f %6lu %6lu %6lu | %6.1f\n",
                        o.experiment.c_str(), WorkloadName(o.workload.kind), ModeName(o.mode), sched::PolicyName(o.policy),
                        o.nodes, o.workload.context_tokens, o.workload.rate, r->ttft.mean, r->ttft.p50, r->ttft.p99,
                        r->ttft_warm.mean, r->jct.mean, r->tpot.mean * 1000, 100 * r->token_hit_rate(), (unsigned long)r->hits_dram,
                        (unsigned long)r->hits_remote, (unsigned long)r->misses, r->wall_seconds)
              << std::flush;
    out["runs"].push_back(ToJson(*r));
  }
  if (!json_path.empty()) {
    std::ofstream f(json_path);
    f << out.dump(1) << "\n";
    if (!f) return fail(IOError("cannot write " + json_path));
  }
  return 0;
}

}  // namespace
}  // namespace ptstore::bench::e2e

int main(int argc, char** argv) { return ptstore::bench::e2e::Main(argc, argv); }

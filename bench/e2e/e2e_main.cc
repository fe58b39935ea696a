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
#include <optional>
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

// One run of a sweep: `base` with these settings, at `load` of the offered
// capacity (RateFor).
struct RunSpec {
  const char* experiment;
  Mode mode;
  sched::Policy policy;
  uint32_t nodes;
  WorkloadKind workload;
  uint32_t context_tokens;  // 0: the shape's own
  uint32_t requests;
  double load = 0.6;
  double rate = 0;              // requests/s; 0: `load` of the offered capacity
  std::optional<bool> save_generated = std::nullopt;  // finished requests save their output too (unset: as `base`)
};

E2eOptions MakeRun(const E2eOptions& base, const RunSpec& r) {
  E2eOptions o = base;
  o.experiment = r.experiment;
  o.mode = r.mode;
  o.policy = r.policy;
  o.nodes = r.nodes;
  o.workload.kind = r.workload;
  o.workload.context_tokens = r.context_tokens;
  o.workload.requests = r.requests;
  o.workload.rate = r.rate > 0 ? r.rate : RateFor(o, r.load);
  if (r.save_generated) o.save_generated = *r.save_generated;
  return o;
}

std::vector<E2eOptions> Sweep(const std::string& which, const E2eOptions& base) {
  using sched::Policy;
  std::vector<E2eOptions> runs;
  auto add = [&](const RunSpec& r) { runs.push_back(MakeRun(base, r)); };
  const std::vector<Mode> modes = {Mode::kNoReuse, Mode::kLocal, Mode::kNoReplication, Mode::kPtstore};
  const WorkloadKind wikiqa = WorkloadKind::kWikiQa;
  if (which == "quick") {
    // 2 nodes, 40 requests: every mode at 2k tokens, then prefix locality
    // against session affinity.
    for (Mode m : modes) add({"quick", m, Policy::kLeastLoad, 2, wikiqa, 2048, 40});
    for (Policy p : {Policy::kSessionAffinity, Policy::kPrefixLocality}) {
      add({"quick", Mode::kPtstore, p, 2, wikiqa, 2048, 40});
    }
    for (bool gen : {false, true}) {  // a chat's outputs saved or not
      add({"quick", Mode::kPtstore, Policy::kLeastLoad, 2, WorkloadKind::kShareGpt, 0, 40, 0.6, 0, gen});
    }
    return runs;
  }
  // Sequence length: WikiQA-like documents of exactly L tokens, every mode;
  // with the engines' view (least-load routing), then with locality routing
  // (the prefix policy; no-reuse has nothing to be local to).
  for (const char* experiment : {"seqlen", "seqlen-prefix"}) {
    for (uint32_t len : {1024u, 2048u, 4096u, 8192u}) {
      for (Mode m : modes) {
        const bool locality = std::string_view(experiment) == "seqlen-prefix" && m != Mode::kNoReuse;
        add({experiment, m, locality ? Policy::kPrefixLocality : Policy::kLeastLoad, 4, wikiqa, len, 200});
      }
    }
  }
  // What replicas buy as the network gets slower than the GPU's PCIe: at 8k
  // tokens, the remote path over RMA (the profile's 200 Gb/s) and TCP
  // (100 GbE), without replicas and with replicas kept at the 2nd (the
  // default) or the 1st load.
  for (sched::LoadPath path : {sched::LoadPath::kRma, sched::LoadPath::kTcp}) {
    for (uint32_t keep : {0u, 2u, 1u}) {
      E2eOptions o = base;
      o.remote_path = path;
      if (keep > 0) o.replicate_after = keep;
      runs.push_back(MakeRun(o, {"replication", keep == 0 ? Mode::kNoReplication : Mode::kPtstore,
                                 Policy::kLeastLoad, 4, wikiqa, 8192, 200}));
    }
  }
  // Weak scaling: 2 -> 8 nodes, requests and rate per node fixed.
  for (uint32_t n : {2u, 4u, 8u}) {
    for (Mode m : {Mode::kLocal, Mode::kNoReplication, Mode::kPtstore}) {
      add({"scaling", m, Policy::kLeastLoad, n, wikiqa, 4096, 50 * n});
    }
  }
  // Policies, PTStore mode, three workload shapes, a busier cluster.
  for (WorkloadKind w : {wikiqa, WorkloadKind::kShareGpt, WorkloadKind::kReAct}) {
    for (Policy p : {Policy::kRoundRobin, Policy::kLeastLoad, Policy::kSessionAffinity, Policy::kPrefixLocality}) {
      add({"policies", Mode::kPtstore, p, 4, w, 0, 200, 0.8});
    }
  }
  // Multi-turn: chats and agent loops with and without their outputs saved
  // (the vLLM connector's save_generated), under least-load and session routing.
  // At 2 requests/s: the think time between a session's turns (about
  // active_sessions / rate) is then longer than a turn's JCT, as in a real chat;
  // at 60% of capacity the next turn would arrive before the previous answer
  // was generated, so no output could be saved in time.
  for (WorkloadKind w : {WorkloadKind::kShareGpt, WorkloadKind::kReAct}) {
    for (Policy p : {Policy::kLeastLoad, Policy::kSessionAffinity}) {
      for (bool gen : {false, true}) add({"multiturn", Mode::kPtstore, p, 4, w, 0, 200, 0.6, 2.0, gen});
    }
  }
  // Every workload shape under every mode.
  for (WorkloadKind w : AllWorkloads()) {
    for (Mode m : modes) add({"workloads", m, Policy::kLeastLoad, 4, w, 0, 200});
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
  app.add_flag("--save-generated", base.save_generated, "a finished request saves its output's KV too");
  app.add_option("--sweep", sweep, "quick or full: the predefined experiments");
  app.add_option("--json", json_path, "write every run as JSON here");
  CLI11_PARSE(app, argc, argv);

  auto fail = [](const Status& s) {
    std::cerr << "bench_e2e: " << s.ToString() << "\n";
    return 1;
  };
  Result<sched::LoadPath> remote = sched::ParseRemotePath(remote_path);
  if (!remote.ok()) return fail(remote.status().WithContext("--remote-path"));
  base.remote_path = *remote;
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

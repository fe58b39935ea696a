// The report of sections 1-3 (bench_cluster_loads.h): node B's counters
// checked against the loads it made, the table of every method, the
// verdicts against the targets of issue 4, the RMA paths against the TCP
// stream and the frame MACs' cost (tcp over tcp-v1), and the JSON.
#include <algorithm>
#include <cstdio>

#include "bench/bench_cluster_loads.h"

namespace ptstore::bench::cluster_bench {

// What the report builds as it goes.
struct LoadReport {
  const Method* base = nullptr;   // raw TCP, 1 connection
  const Method* base2 = nullptr;  // raw TCP, 2 connections
  const Method* redis_best = nullptr;
  double base_p50 = 0, base_cpu = 0;
  Table t{{"method", "median GB/s", "min GB/s", "max GB/s", "median ms", "x raw TCP", "x raw TCP, paired", "CPU s",
           "CPU x raw TCP"}};
  json jpaths;
  std::string verdicts, vs_tcp;
};

Status LoadBench::Report(json* out, std::vector<PathResult>* results) {
  LoadReport r;
  r.base = &Find("raw_tcp_1");
  r.base2 = &Find("raw_tcp_2");
  for (size_t i = 0; i < n_baselines_; ++i) {
    const Method& m = methods_[i];
    if (m.key.rfind("redis", 0) == 0 && (r.redis_best == nullptr || P50(m.seconds) < P50(r.redis_best->seconds))) {
      r.redis_best = &m;
    }
  }
  r.base_p50 = P50(r.base->seconds);
  r.base_cpu = P50(r.base->cpu);
  for (size_t i = 0; i < n_baselines_; ++i) Row(r, methods_[i]);
  for (auto& up : pcs_) PTS_RETURN_IF_ERROR(ReportPath(r, *up, results));
  CompareWithTcp(r, out);
  CompareIntegrity(r, out);
  if (out) MethodsJson(r, out);
  if (!o_.json) {
    std::printf("%s", r.t.ToString().c_str());
    std::printf("(x raw TCP: of the medians; paired: the median over the repetitions of each one's own ratio, which "
                "the verdicts use;\n CPU s: median CPU time, user + system, of this process and the servers that "
                "worked for the method (ptstored A and B, redis-server) during its timed part)\n%s",
                r.verdicts.c_str());
    if (r.redis_best) std::printf("best Redis row (by median): %s\n", r.redis_best->name.c_str());
    if (!r.vs_tcp.empty()) std::printf("\n%s", r.vs_tcp.c_str());
  }
  return Status::OK();
}

void LoadBench::Row(LoadReport& r, const Method& m) const {
  const Summary s = Summarize(m.seconds);
  r.t.Row({m.name, Format("%.2f", GBps(bytes_, s.p50)), Format("%.2f", GBps(bytes_, s.max)),
           Format("%.2f", GBps(bytes_, s.min)), Format("%.1f", s.p50 * 1e3), Ratio(r.base_p50 / s.p50),
           Ratio(Paired(*r.base, m)), Format("%.2f", P50(m.cpu)), Ratio(P50(m.cpu) / r.base_cpu)});
}

void LoadBench::Part(LoadReport& r, const char* name, const std::vector<double>& v) const {
  const Summary f = Summarize(v);
  r.t.Row({name, Format("%.2f", GBps(bytes_, f.p50)), "", "", Format("%.1f", f.p50 * 1e3), Ratio(r.base_p50 / f.p50),
           "", "", ""});
}

// One path: node B's counters must account for every timed load, over the
// path's own transport, and B must have kept no replica; its rows, its
// verdicts and its JSON.
Status LoadBench::ReportPath(LoadReport& r, PathCluster& pc, std::vector<PathResult>* results) {
  const Method& base = *r.base;
  const Method& base2 = *r.base2;
  const Method* redis_best = r.redis_best;
  PTS_ASSIGN_OR_RETURN(ClusterMetrics m1, ClusterMetrics::Read(pc.metrics_b));
  const ClusterMetrics dm = m1 - pc.m0;
  const uint64_t timed = pc.remote_loads - pc.loads_before;
  const bool rma = pc.path.rfind("rma", 0) == 0;
  const double on_path = rma ? dm.bytes_rma : dm.bytes_tcp;
  if (on_path != static_cast<double>(timed * bytes_)) {
    return FailLogs(Internal(Format("%s: node B fetched %.0f bytes over its path (tcp %.0f, rma %.0f) for %llu loads "
                                    "of %llu",
                                    pc.path.c_str(), on_path, dm.bytes_tcp, dm.bytes_rma,
                                    static_cast<unsigned long long>(timed), static_cast<unsigned long long>(bytes_))));
  }
  PTS_ASSIGN_OR_RETURN(StoreStats sa, pc.a->Stats());
  PTS_ASSIGN_OR_RETURN(StoreStats sb, pc.b->Stats());
  if (sb.replicas_kept != 0) return Internal(pc.path + ": node B kept a replica: not every load was a remote fetch");
  const Method& load = Find(pc.path + ":remote_load");
  const Method& pin = Find(pc.path + ":remote_pin_copy");
  r.t.Separator();
  Row(r, load);
  Part(r, "  of which node B's fetch RPC (its metrics)", pc.fetch_s["load"]);
  Row(r, pin);
  Part(r, "  of which Pin (the fetch into B's arena)", pc.pin_s);
  Part(r, "  of which node B's fetch RPC (its metrics)", pc.fetch_s["pin"]);
  Part(r, "  of which CopyTo (B's arena -> buffer)", pc.copy_s);
  Row(r, Find(pc.path + ":local_load"));

  PathResult pr;
  pr.path = pc.path;
  pr.load_vs_tcp = Paired(base, load);
  pr.pin_vs_tcp = Paired(base, pin);
  if (redis_best) {
    pr.has_redis = true;
    pr.load_vs_redis = Paired(*redis_best, load);
    pr.pin_vs_redis = Paired(*redis_best, pin);
  }
  results->push_back(pr);
  std::string& verdicts = r.verdicts;
  auto verdict = [&](const std::string& what, double paired_r, double medians_r, double target) {
    verdicts += Format("  %-58s %.2f paired, %.2f of medians (target >= %.1f): %s\n", what.c_str(), paired_r, medians_r,
                       target, paired_r >= target ? "met" : "MISSED");
  };
  verdicts += Format("%s: node B made %.0f fetch requests, %s over %s (mean %.1f ms each); node A served %s to "
                     "peers\n",
                     pc.path.c_str(), dm.fetch_requests, HumanBytes(static_cast<uint64_t>(on_path)).c_str(),
                     rma ? "rma" : "tcp", dm.fetch_count ? dm.fetch_sum_s / dm.fetch_count * 1e3 : 0.0,
                     HumanBytes(sa.peer_served_bytes).c_str());
  verdict("remote Client::Load / raw TCP (1 connection)", pr.load_vs_tcp, OfMedians(base, load), 0.8);
  verdict("remote Pin + CopyTo / raw TCP (1 connection)", pr.pin_vs_tcp, OfMedians(base, pin), 0.8);
  verdicts += Format("  %-58s %.2f paired, %.2f of medians\n", "remote Client::Load / raw TCP (2 connections)",
                     Paired(base2, load), OfMedians(base2, load));
  if (redis_best) {
    verdict("remote Client::Load / best Redis GET", pr.load_vs_redis, OfMedians(*redis_best, load), 1.5);
    verdict("remote Pin + CopyTo / best Redis GET", pr.pin_vs_redis, OfMedians(*redis_best, pin), 1.5);
  }
  json j;
  j["fetch_rpc_s"] = pc.fetch_s;
  j["pin_s"] = pc.pin_s;
  j["copy_s"] = pc.copy_s;
  j["load_vs_raw_tcp_1"] = {{"paired", pr.load_vs_tcp}, {"of_medians", OfMedians(base, load)}};
  j["pin_copy_vs_raw_tcp_1"] = {{"paired", pr.pin_vs_tcp}, {"of_medians", OfMedians(base, pin)}};
  j["load_vs_raw_tcp_2"] = {{"paired", Paired(base2, load)}, {"of_medians", OfMedians(base2, load)}};
  if (redis_best) {
    j["load_vs_best_redis"] = {{"paired", pr.load_vs_redis}, {"of_medians", OfMedians(*redis_best, load)}};
    j["pin_copy_vs_best_redis"] = {{"paired", pr.pin_vs_redis}, {"of_medians", OfMedians(*redis_best, pin)}};
  }
  j["peer_served_bytes_a"] = sa.peer_served_bytes;
  r.jpaths[pc.path] = j;
  return Status::OK();
}

// The RMA paths against the TCP stream, in the same repetitions.
void LoadBench::CompareWithTcp(LoadReport& r, json* out) {
  const bool have_tcp = std::find(o_.paths.begin(), o_.paths.end(), "tcp") != o_.paths.end();
  for (const std::string& path : o_.paths) {
    if (!have_tcp || path == "tcp") continue;
    const Method& tl = Find("tcp:remote_load");
    const Method& tp = Find("tcp:remote_pin_copy");
    const Method& l = Find(path + ":remote_load");
    const Method& p = Find(path + ":remote_pin_copy");
    r.vs_tcp += Format("%s vs the TCP stream (throughput): Client::Load %.2f paired (%.2f of medians); Pin + CopyTo "
                       "%.2f paired (%.2f of medians); the fetch RPC alone %.2f of medians\n",
                       path.c_str(), Paired(tl, l), OfMedians(tl, l), Paired(tp, p), OfMedians(tp, p),
                       [&] {
                         PathCluster* a = nullptr;
                         PathCluster* b = nullptr;
                         for (auto& pc : pcs_) {
                           if (pc->path == "tcp") a = pc.get();
                           if (pc->path == path) b = pc.get();
                         }
                         std::vector<double> x = a->fetch_s["load"], y = b->fetch_s["load"];
                         x.insert(x.end(), a->fetch_s["pin"].begin(), a->fetch_s["pin"].end());
                         y.insert(y.end(), b->fetch_s["pin"].begin(), b->fetch_s["pin"].end());
                         return P50(x) / P50(y);
                       }());
    if (out) (*out)[path + "_vs_tcp_load"] = {{"paired", Paired(tl, l)}, {"of_medians", OfMedians(tl, l)}};
  }
}

// The frame MACs' cost: the same TCP stream with them (tcp, peer protocol
// 2) over without them (tcp-v1), in the same repetitions.
void LoadBench::CompareIntegrity(LoadReport& r, json* out) {
  auto has = [&](const char* path) { return std::find(o_.paths.begin(), o_.paths.end(), path) != o_.paths.end(); };
  if (!has("tcp") || !has("tcp-v1")) return;
  const Method& tl = Find("tcp:remote_load");
  const Method& tp = Find("tcp:remote_pin_copy");
  const Method& vl = Find("tcp-v1:remote_load");
  const Method& vp = Find("tcp-v1:remote_pin_copy");
  r.vs_tcp += Format("frame integrity (tcp, peer protocol 2: GMAC on every frame and on the fetched bytes) / without "
                     "(tcp-v1, protocol 1), throughput: Client::Load %.2f paired (%.2f of medians); Pin + CopyTo %.2f "
                     "paired (%.2f of medians)\n",
                     Paired(vl, tl), OfMedians(vl, tl), Paired(vp, tp), OfMedians(vp, tp));
  if (out) {
    (*out)["integrity_vs_none_load"] = {{"paired", Paired(vl, tl)}, {"of_medians", OfMedians(vl, tl)}};
    (*out)["integrity_vs_none_pin_copy"] = {{"paired", Paired(vp, tp)}, {"of_medians", OfMedians(vp, tp)}};
  }
}

void LoadBench::MethodsJson(const LoadReport& r, json* out) const {
  json jm;
  for (const Method& m : methods_) {
    jm[m.key] = {{"name", m.name}, {"seconds", m.seconds}, {"cpu_seconds", m.cpu},
                 {"gbps_p50", GBps(bytes_, P50(m.seconds))},
                 {"x_raw_tcp_1", {{"paired", Paired(*r.base, m)}, {"of_medians", r.base_p50 / P50(m.seconds)}}}};
  }
  (*out)["methods"] = jm;
  (*out)["paths"] = r.jpaths;
  if (r.redis_best) (*out)["best_redis"] = r.redis_best->key;
}

}  // namespace ptstore::bench::cluster_bench

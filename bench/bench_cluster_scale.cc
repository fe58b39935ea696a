#include "bench/bench_cluster_scale.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <numeric>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "bench/bench_cluster_nodes.h"
#include "bench/bench_util.h"
#include "bench/workload.h"
#include "ptstore/client.h"

namespace ptstore::bench::cluster_bench {
namespace {

// Zipf(s) over ranks 0..n-1: P(k) ~ 1 / (k + 1)^s.
class Zipf {
 public:
  Zipf(size_t n, double s) : cdf_(n) {
    double sum = 0;
    for (size_t k = 0; k < n; ++k) cdf_[k] = (sum += 1.0 / std::pow(static_cast<double>(k + 1), s));
    for (double& c : cdf_) c /= sum;
  }
  size_t Draw(SplitMix64& r) const {
    const double u = static_cast<double>(r.Next() >> 11) * 0x1.0p-53;
    return std::min<size_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin(), cdf_.size() - 1);
  }

 private:
  std::vector<double> cdf_;
};

struct NodeRun {
  uint64_t short_doc_loads = 0;  // loads that returned less than the document's whole blocks
  uint64_t requests = 0, requested = 0, loaded = 0, own = 0, replica = 0, remote = 0, doc_tokens = 0;
  uint64_t loaded_bytes = 0;
  std::vector<double> request_s, load_s;
  Status status;
};

struct ScaleRow {
  uint32_t nodes = 0;
  uint64_t requests = 0, requested = 0, loaded = 0, own = 0, replica = 0, remote = 0, miss = 0, doc_tokens = 0;
  uint64_t loaded_bytes = 0, moved_bytes = 0, served_bytes = 0, replicas_kept = 0, fetch_failures = 0;
  uint64_t evictions = 0, docs_lost = 0, short_doc_loads = 0, no_room_logged = 0;
  std::vector<std::string> owned_evictions_logged;  // "node i: <log line>" (debug level only)
  double wall_s = 0, save_s = 0, load_p50 = 0, load_p99 = 0, req_p50 = 0, shard_rpcs = 0, announces = 0;
};

// One cluster size's run, in steps (RunScaleOnce).
struct ScaleRun {
  ScaleRun(const Options& opts, uint32_t n);
  // The cluster, a client of every node and its metrics.
  Status Start();
  // `body(i)` for every node i, each in its own thread, all at once; the
  // first node's error.
  Status Parallel(const std::function<Status(uint32_t)>& body);
  // Every node saves its documents (document d: node d % nodes), at once.
  Status SaveDocs();
  // The counters before the requests.
  Status Snapshot();
  // Node i's requests, from its client.
  Status Requests(uint32_t i);
  // The nodes' runs and counters into the row.
  Status Sum();
  // What the nodes' logs say, and the documents lost.
  Status Inspect();

  const Options& o;
  const uint32_t nodes;
  Layout layout = MistralLayout();
  uint64_t bpt = 0;
  uint32_t bt = 0;
  const uint32_t docs;
  std::vector<std::vector<uint32_t>> doc;
  std::vector<uint32_t> by_rank;
  const Zipf zipf;
  uint64_t max_tokens = 0;
  ClusterPtr cluster;
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<NodeMetrics> metrics;
  ScaleRow row;
  std::vector<ClusterMetrics> m0;
  std::vector<StoreStats> s0;
  std::vector<NodeRun> runs;
  std::vector<double> load_s, req_s;
};

ScaleRun::ScaleRun(const Options& opts, uint32_t n)
    : o(opts), nodes(n), docs(n * opts.scale_docs), zipf(n * opts.scale_docs, opts.zipf) {
  layout.layers = 8;  // 32 KiB per token: documents of 8-32 MiB
  bpt = layout.BytesPerToken();
  bt = layout.block_tokens;
  SplitMix64 shape(1234);
  doc.resize(docs);
  for (uint32_t d = 0; d < docs; ++d) {
    doc[d] = RandomTokens(500000 + d, shape.Range(o.min_doc, o.max_doc));
  }
  // Popularity: a fixed random order of the documents, Zipf over it.
  by_rank.resize(docs);
  std::iota(by_rank.begin(), by_rank.end(), 0u);
  for (uint32_t i = docs; i > 1; --i) std::swap(by_rank[i - 1], by_rank[shape.Range(0, i - 1)]);
  max_tokens = o.max_doc + o.max_question + bt;
  row.nodes = nodes;
  runs.resize(nodes);
}

Status ScaleRun::Start() {
  PTS_ASSIGN_OR_RETURN(cluster, StartCluster(o, nodes, o.scale_arena, o.scale_path, o.replicate_after));
  for (uint32_t i = 0; i < nodes; ++i) {
    PTS_ASSIGN_OR_RETURN(auto c, cluster->Connect(i));
    PTS_RETURN_IF_ERROR(c->CreateNamespace(kNs, layout).status());
    clients.push_back(std::move(c));
    PTS_ASSIGN_OR_RETURN(NodeMetrics m, NodeMetrics::Find(cluster->node(i)));
    metrics.push_back(m);
  }
  return Status::OK();
}

Status ScaleRun::Parallel(const std::function<Status(uint32_t)>& body) {
  std::vector<Status> st(nodes);
  std::vector<std::thread> threads;
  for (uint32_t i = 0; i < nodes; ++i) threads.emplace_back([&, i] { st[i] = body(i); });
  for (auto& t : threads) t.join();
  for (uint32_t i = 0; i < nodes; ++i) {
    if (!st[i].ok()) return st[i].WithContext("node " + std::to_string(i));
  }
  return Status::OK();
}

Status ScaleRun::SaveDocs() {
  const auto ts = Clock::now();
  PTS_RETURN_IF_ERROR(Parallel([&](uint32_t i) -> Status {
    PTS_ASSIGN_OR_RETURN(HostBuffer buf, HostBuffer::Allocate(max_tokens * bpt));
    for (uint32_t d = i; d < docs; d += nodes) {
      const uint64_t whole = doc[d].size() / bt * bt;
      FillKv(std::span(doc[d]).first(whole), 0, bpt, buf.data());
      PTS_RETURN_IF_ERROR(clients[i]->Save(kNs, doc[d], buf.data(), whole * bpt).status());
    }
    return Status::OK();
  }));
  row.save_s = SecondsSince(ts);
  return Status::OK();
}

Status ScaleRun::Snapshot() {
  for (uint32_t i = 0; i < nodes; ++i) {
    PTS_ASSIGN_OR_RETURN(ClusterMetrics m, ClusterMetrics::Read(metrics[i]));
    m0.push_back(m);
    PTS_ASSIGN_OR_RETURN(StoreStats s, clients[i]->Stats());
    s0.push_back(s);
  }
  return Status::OK();
}

Status ScaleRun::Requests(uint32_t i) {
  NodeRun& r = runs[i];
  Client& c = *clients[i];
  PTS_ASSIGN_OR_RETURN(HostBuffer buf, HostBuffer::Allocate(max_tokens * bpt));
  SplitMix64 rng(7000 + i);
  for (uint32_t q = 0; q < o.scale_requests; ++q) {
    const uint32_t d = by_rank[zipf.Draw(rng)];
    std::vector<uint32_t> prompt = doc[d];
    const std::vector<uint32_t> question =
        RandomTokens((uint64_t{i} << 32) + q + 1, rng.Range(o.min_question, o.max_question));
    prompt.insert(prompt.end(), question.begin(), question.end());
    const uint64_t whole = prompt.size() / bt * bt;
    const auto tr = Clock::now();
    PTS_ASSIGN_OR_RETURN(PrefixInfo info, c.Lookup(kNs, prompt));
    uint64_t own_bytes = 0;
    for (const Extent& e : info.extents) {
      if (e.tensor.owner().value == i) own_bytes += e.length;
    }
    PTS_ASSIGN_OR_RETURN(StoreStats before, c.Stats());
    const auto tl = Clock::now();
    PTS_ASSIGN_OR_RETURN(uint64_t got, c.Load(kNs, prompt, buf.data(), whole * bpt));
    r.load_s.push_back(SecondsSince(tl));
    PTS_ASSIGN_OR_RETURN(StoreStats after, c.Stats());
    PTS_RETURN_IF_ERROR(CheckKv("a loaded prefix", std::span(prompt).first(got), bpt, buf.data()));
    FillKv(std::span(prompt).subspan(got, whole - got), got, bpt, buf.data() + got * bpt);
    PTS_RETURN_IF_ERROR(c.Save(kNs, prompt, buf.data(), whole * bpt).status());
    r.request_s.push_back(SecondsSince(tr));
    const uint64_t fetched = (after.remote_fetch_bytes - before.remote_fetch_bytes) / bpt;
    const uint64_t own = std::min(own_bytes / bpt, got);
    r.requests++;
    r.requested += whole;
    r.loaded += got;
    r.loaded_bytes += got * bpt;
    r.doc_tokens += doc[d].size() / bt * bt;
    if (got < doc[d].size() / bt * bt) {
      r.short_doc_loads++;
      if (o.verbose) {
        std::fprintf(stderr,
                     "short load: node %u request %u document %u (owner %u): lookup matched %llu, load %llu of the "
                     "document's %llu whole-block tokens; fetched %llu bytes\n",
                     i, q, d, d % nodes, static_cast<unsigned long long>(info.matched_tokens),
                     static_cast<unsigned long long>(got), static_cast<unsigned long long>(doc[d].size() / bt * bt),
                     static_cast<unsigned long long>(after.remote_fetch_bytes - before.remote_fetch_bytes));
      }
    }
    r.remote += std::min(fetched, got - own);
    r.own += own;
    r.replica += got - own - std::min(fetched, got - own);
  }
  return Status::OK();
}

Status ScaleRun::Sum() {
  for (uint32_t i = 0; i < nodes; ++i) {
    const NodeRun& r = runs[i];
    row.requests += r.requests;
    row.requested += r.requested;
    row.loaded += r.loaded;
    row.own += r.own;
    row.replica += r.replica;
    row.remote += r.remote;
    row.doc_tokens += r.doc_tokens;
    row.short_doc_loads += r.short_doc_loads;
    row.loaded_bytes += r.loaded_bytes;
    load_s.insert(load_s.end(), r.load_s.begin(), r.load_s.end());
    req_s.insert(req_s.end(), r.request_s.begin(), r.request_s.end());
    PTS_ASSIGN_OR_RETURN(ClusterMetrics m, ClusterMetrics::Read(metrics[i]));
    const ClusterMetrics dm = m - m0[i];
    row.shard_rpcs += dm.shard_lookups;
    row.announces += dm.announces;
    PTS_ASSIGN_OR_RETURN(StoreStats s, clients[i]->Stats());
    row.moved_bytes += s.remote_fetch_bytes - s0[i].remote_fetch_bytes;
    row.served_bytes += s.peer_served_bytes - s0[i].peer_served_bytes;
    row.replicas_kept += s.replicas_kept - s0[i].replicas_kept;
    row.fetch_failures += s.remote_fetch_failures - s0[i].remote_fetch_failures;
    row.evictions += s.evictions - s0[i].evictions;
  }
  row.miss = row.requested - row.loaded;
  return Status::OK();
}

Status ScaleRun::Inspect() {
  // Fetches a node had no room for (logged at debug level only).
  for (uint32_t i = 0; i < nodes; ++i) {
    const std::string log = cluster->node(i).ReadLog();
    for (size_t at = log.find("no room to fetch"); at != std::string::npos; at = log.find("no room to fetch", at + 1)) {
      row.no_room_logged++;
    }
    std::istringstream lines(log);
    for (std::string l; std::getline(lines, l);) {
      if (l.find("evict tensor") != std::string::npos && l.find("(owned, ") != std::string::npos) {
        row.owned_evictions_logged.push_back("node " + std::to_string(i) + ": " + l.substr(l.find("evict tensor")));
      }
    }
  }
  // Documents their owner no longer holds whole (evicted: no SSD tier here).
  for (uint32_t d = 0; d < docs; ++d) {
    PTS_ASSIGN_OR_RETURN(PrefixInfo info, clients[d % nodes]->Lookup(kNs, doc[d]));
    if (info.matched_tokens < doc[d].size() / bt * bt) row.docs_lost++;
  }
  return Status::OK();
}

// The row of a cluster of `nodes`.
Result<ScaleRow> RunScaleOnce(const Options& o, uint32_t nodes) {
  ScaleRun run(o, nodes);
  PTS_RETURN_IF_ERROR(run.Start());
  PTS_RETURN_IF_ERROR(run.SaveDocs());
  PTS_RETURN_IF_ERROR(run.Snapshot());
  // The requests: every node's client in its own thread, all at once.
  const auto t0 = Clock::now();
  PTS_RETURN_IF_ERROR(run.Parallel([&](uint32_t i) { return run.Requests(i); }));
  run.row.wall_s = SecondsSince(t0);
  PTS_RETURN_IF_ERROR(run.Sum());
  PTS_RETURN_IF_ERROR(run.Inspect());
  ScaleRow& row = run.row;
  const Summary ls = Summarize(run.load_s), rs = Summarize(run.req_s);
  row.load_p50 = ls.p50;
  row.load_p99 = ls.p99;
  row.req_p50 = rs.p50;
  return row;
}

}  // namespace

Status RunScale(const Options& o, json* out) {
  if (!o.json) {
    std::printf("\n== 5. Weak scaling: shared documents, the same work per node (%u documents and %u requests per "
                "node; documents of %u-%u tokens, questions of %u-%u, 32 KiB/token; Zipf s=%.1f; arenas of %s; "
                "replicate_after %u; %s path) ==\n",
                o.scale_docs, o.scale_requests, o.min_doc, o.max_doc, o.min_question, o.max_question, o.zipf,
                o.scale_arena.c_str(), o.replicate_after, o.scale_path.c_str());
  }
  std::vector<ScaleRow> rows;
  for (uint32_t n : o.scale_nodes) {
    Result<ScaleRow> r = RunScaleOnce(o, n);
    if (!r.ok()) return r.status().WithContext(std::to_string(n) + " nodes");
    rows.push_back(*r);
  }
  auto pct = [](uint64_t a, uint64_t b) { return b ? 100.0 * static_cast<double>(a) / static_cast<double>(b) : 0.0; };
  Table work({"nodes", "requests", "seconds", "req/s", "req/s per node", "x per node (first row)", "load GB/s",
              "load p50 ms", "load p99 ms", "request p50 ms"});
  Table tiers({"nodes", "own DRAM %", "local replica %", "remote fetch %", "miss %", "doc-prefix hit %",
               "moved between nodes", "moved per request", "replicas kept", "shard RPCs/request", "evictions",
               "fetch failures", "short doc loads", "documents lost"});
  json arr = json::array();
  const double first_per_node = rows.empty() ? 0 : rows[0].requests / rows[0].wall_s / rows[0].nodes;
  for (const ScaleRow& r : rows) {
    const double rps = static_cast<double>(r.requests) / r.wall_s;
    work.Row({std::to_string(r.nodes), std::to_string(r.requests), Format("%.2f", r.wall_s), Format("%.1f", rps),
              Format("%.1f", rps / r.nodes), Ratio(rps / r.nodes / first_per_node),
              Format("%.2f", GBps(r.loaded_bytes, r.wall_s)), Format("%.1f", r.load_p50 * 1e3),
              Format("%.1f", r.load_p99 * 1e3), Format("%.1f", r.req_p50 * 1e3)});
    tiers.Row({std::to_string(r.nodes), Format("%.1f", pct(r.own, r.requested)),
               Format("%.1f", pct(r.replica, r.requested)), Format("%.1f", pct(r.remote, r.requested)),
               Format("%.1f", pct(r.miss, r.requested)), Format("%.1f", pct(r.loaded, r.doc_tokens)),
               HumanBytes(r.moved_bytes), HumanBytes(r.requests ? r.moved_bytes / r.requests : 0),
               std::to_string(r.replicas_kept), Format("%.2f", r.shard_rpcs / static_cast<double>(r.requests)),
               std::to_string(r.evictions), std::to_string(r.fetch_failures), std::to_string(r.short_doc_loads),
               Format("%llu of %u", static_cast<unsigned long long>(r.docs_lost), r.nodes * o.scale_docs)});
    arr.push_back({{"nodes", r.nodes},
                   {"requests", r.requests},
                   {"seconds", r.wall_s},
                   {"save_seconds", r.save_s},
                   {"requests_per_s", rps},
                   {"requested_tokens", r.requested},
                   {"own_tokens", r.own},
                   {"replica_tokens", r.replica},
                   {"remote_tokens", r.remote},
                   {"miss_tokens", r.miss},
                   {"loaded_bytes", r.loaded_bytes},
                   {"moved_bytes", r.moved_bytes},
                   {"peer_served_bytes", r.served_bytes},
                   {"replicas_kept", r.replicas_kept},
                   {"fetch_failures", r.fetch_failures},
                   {"evictions", r.evictions},
                   {"documents_lost", r.docs_lost},
                   {"short_doc_loads", r.short_doc_loads},
                   {"no_room_to_fetch_logged", r.no_room_logged},
                   {"shard_rpcs", r.shard_rpcs},
                   {"announces", r.announces},
                   {"load_p50_s", r.load_p50},
                   {"load_p99_s", r.load_p99}});
    if (r.moved_bytes != r.served_bytes) {
      return Internal(Format("%u nodes: the nodes fetched %llu bytes but served %llu", r.nodes,
                             static_cast<unsigned long long>(r.moved_bytes),
                             static_cast<unsigned long long>(r.served_bytes)));
    }
  }
  if (out) *out = arr;
  if (!o.json) {
    std::printf("%s\nwhere the requested tokens (whole blocks of document + question) came from:\n%s", work.ToString().c_str(),
                tiers.ToString().c_str());
    std::printf("(a question is new on every request, so its blocks are always a miss; \"doc-prefix hit\" is loaded "
                "/ the documents' whole blocks)\n");
    if (o.node_log_level == "debug") {
      for (const ScaleRow& r : rows) {
        std::printf("%u nodes: %llu \"no room to fetch\" in the nodes' debug logs; %zu evictions of owned "
                    "tensors\n",
                    r.nodes, static_cast<unsigned long long>(r.no_room_logged), r.owned_evictions_logged.size());
        if (o.verbose) {
          for (const std::string& l : r.owned_evictions_logged) std::printf("  %s\n", l.c_str());
        }
      }
    }
  }
  return Status::OK();
}

}  // namespace ptstore::bench::cluster_bench

#include "bench/bench_cluster_lookups.h"

#include <algorithm>
#include <cstdio>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "bench/bench_cluster_nodes.h"
#include "bench/bench_util.h"
#include "bench/workload.h"
#include "ptstore/client.h"

namespace ptstore::bench::cluster_bench {
namespace {

constexpr size_t kNodes = 3;
constexpr uint32_t kSelf = 1;  // the node whose client looks up; node 0 saves

// Each class: samples (seconds) and the shard RPCs node 1 sent for them.
struct Class {
  std::string name, key;
  std::vector<double> s;
  double rpcs = 0, local_shard = 0;
};

// The section's state, run in steps by RunLookups.
struct LookupRun {
  explicit LookupRun(const Options& opts) : o(opts) {
    // A small geometry: a lookup's cost is in its tokens, not its bytes.
    layout.layers = 1;
    layout.kv_heads = 2;
    layout.head_dim = 32;
    layout.dtype = DType::kBF16;
    layout.block_tokens = 16;
    bpt = layout.BytesPerToken();
    n_tok = o.lookup_tokens / 16 * 16;
    want = std::max<uint32_t>(o.lookup_prompts / 2, 2);
  }
  // The prompts of each class, the cluster, node 0's saves.
  Status Start();
  // A lookup of a stored prompt (or a longer one), timed, into `cls`.
  Status One(Class& cls, std::span<const uint32_t> prompt);
  // `body`'s lookups, the shard RPCs node 1 sent for them counted to `cls`.
  Status Batch(Class& cls, const std::function<Status()>& body);
  // First lookups of both classes interleaved, then rounds of every
  // repeatable class in turn.
  Status Measure();
  // The table (unless --json) and the JSON.
  void Report(json* out) const;
  // The classification must be the nodes' own: the local classes never
  // asked a shard, the remote first/longer ones always did.
  Status CheckSplit() const;

  const Options& o;
  Layout layout;
  uint64_t bpt = 0;
  uint32_t n_tok = 0;
  size_t want = 0;
  std::vector<std::vector<uint32_t>> local, remote;
  ClusterPtr cluster;
  NodeMetrics metrics;
  std::unique_ptr<Client> saver, c;
  std::vector<Class> classes = {
      {"local shard, first lookup", "local_first", {}, 0, 0},
      {"remote shard, first lookup (1 RPC)", "remote_first", {}, 0, 0},
      {"local shard, again", "local", {}, 0, 0},
      {"remote shard, again (metadata cache)", "remote_cached", {}, 0, 0},
      {"local shard, prompt + 1 new block", "local_longer", {}, 0, 0},
      {"remote shard, prompt + 1 new block (1 RPC)", "remote_longer", {}, 0, 0},
  };
};

Status LookupRun::Start() {
  // Prompts by trying seeds until each class has its share.
  for (uint64_t seed = 1; local.size() < want || remote.size() < want; ++seed) {
    std::vector<uint32_t> p = RandomTokens(90000 + seed, n_tok);
    auto& cls = ShardOfPrompt(kNs, p, layout.block_tokens, kNodes) == kSelf ? local : remote;
    if (cls.size() < want) cls.push_back(std::move(p));
  }
  const uint64_t stored = 2 * want * n_tok * bpt;
  const std::string arena = std::to_string(std::max<uint64_t>(64, (2 * stored >> 20) + 32)) + "MiB";
  // Without the shard's negative-answer cache, so that every lookup past
  // the stored prefix makes its RPC (what this section measures).
  PTS_ASSIGN_OR_RETURN(cluster, StartCluster(o, kNodes, arena, "tcp", 2, /*negative_ttl_ms=*/0));
  PTS_ASSIGN_OR_RETURN(metrics, NodeMetrics::Find(cluster->node(kSelf)));
  PTS_ASSIGN_OR_RETURN(saver, cluster->Connect(0));
  PTS_ASSIGN_OR_RETURN(c, cluster->Connect(kSelf));
  PTS_RETURN_IF_ERROR(saver->CreateNamespace(kNs, layout).status());
  PTS_RETURN_IF_ERROR(c->CreateNamespace(kNs, layout).status());
  std::vector<uint8_t> kv(n_tok * bpt);
  for (auto* cls : {&local, &remote}) {
    for (const auto& p : *cls) {
      FillKv(p, 0, bpt, kv.data());
      PTS_RETURN_IF_ERROR(saver->Save(kNs, p, kv.data(), kv.size()).status());
    }
  }
  return Status::OK();
}

Status LookupRun::One(Class& cls, std::span<const uint32_t> prompt) {
  const auto t0 = Clock::now();
  PTS_ASSIGN_OR_RETURN(PrefixInfo info, c->Lookup(kNs, prompt));
  cls.s.push_back(SecondsSince(t0));
  if (info.matched_tokens != n_tok) {
    return Internal(Format("%s: a lookup matched %llu of the %u stored tokens", cls.name.c_str(),
                           static_cast<unsigned long long>(info.matched_tokens), n_tok));
  }
  return Status::OK();
}

Status LookupRun::Batch(Class& cls, const std::function<Status()>& body) {
  PTS_ASSIGN_OR_RETURN(ClusterMetrics m0, ClusterMetrics::Read(metrics));
  PTS_RETURN_IF_ERROR(body());
  PTS_ASSIGN_OR_RETURN(ClusterMetrics m1, ClusterMetrics::Read(metrics));
  cls.rpcs += (m1 - m0).shard_lookups;
  cls.local_shard += (m1 - m0).local_shard;
  return Status::OK();
}

Status LookupRun::Measure() {
  // First lookups, the two classes interleaved.
  SplitMix64 rng(7);
  for (size_t i = 0; i < want; ++i) {
    PTS_RETURN_IF_ERROR(Batch(classes[0], [&] { return One(classes[0], local[i]); }));
    PTS_RETURN_IF_ERROR(Batch(classes[1], [&] { return One(classes[1], remote[i]); }));
  }
  // Then rounds of every repeatable class in turn.
  const uint32_t per_batch = 50;
  uint64_t fresh = 1;
  for (uint32_t done = 0; done < o.lookup_samples; done += per_batch) {
    const uint32_t n = std::min(per_batch, o.lookup_samples - done);
    for (size_t k = 2; k < classes.size(); ++k) {
      const auto& prompts = (k % 2 == 0) ? local : remote;
      const bool longer = k >= 4;
      PTS_RETURN_IF_ERROR(Batch(classes[k], [&]() -> Status {
        for (uint32_t i = 0; i < n; ++i) {
          const auto& p = prompts[rng.Range(0, prompts.size() - 1)];
          if (!longer) {
            PTS_RETURN_IF_ERROR(One(classes[k], p));
            continue;
          }
          std::vector<uint32_t> q = p;
          const std::vector<uint32_t> block = RandomTokens(1000000 + fresh++, layout.block_tokens);
          q.insert(q.end(), block.begin(), block.end());
          PTS_RETURN_IF_ERROR(One(classes[k], q));
        }
        return Status::OK();
      }));
    }
  }
  return Status::OK();
}

void LookupRun::Report(json* out) const {
  const double base = P50(classes[2].s);
  json j;
  Table t({"Client::Lookup on node 1, " + std::to_string(n_tok) + "-token prompts", "lookups", "p50 us", "p99 us",
           "x local p50", "shard RPCs/lookup"});
  for (const Class& cls : classes) {
    const Summary s = Summarize(cls.s);
    const double rpl = cls.s.empty() ? 0 : cls.rpcs / static_cast<double>(cls.s.size());
    t.Row({cls.name, std::to_string(s.n), Format("%.0f", s.p50 * 1e6), Format("%.0f", s.p99 * 1e6),
           Ratio(s.p50 / base), Format("%.2f", rpl)});
    j[cls.key] = {{"n", s.n}, {"p50_us", s.p50 * 1e6}, {"p99_us", s.p99 * 1e6}, {"rpcs_per_lookup", rpl}};
  }
  const double cold = P50(classes[1].s) / P50(classes[0].s);
  const double longer = P50(classes[5].s) / P50(classes[4].s);
  j["remote_first_vs_local_first"] = cold;
  j["remote_longer_vs_local_longer"] = longer;
  if (out) *out = j;
  if (!o.json) {
    std::printf("\n== 4. Lookup latency: local vs remote index shard (3 nodes; node 0 saved %zu prompts, %zu "
                "whose root's shard is node 1) ==\n%s",
                2 * want, want, t.ToString().c_str());
    std::printf("remote / local shard, p50: first lookups %.2f; prompts past the stored prefix %.2f; a cached remote "
                "root %.2f\n",
                cold, longer, P50(classes[3].s) / base);
  }
}

Status LookupRun::CheckSplit() const {
  for (size_t k : {0, 2, 3, 4}) {
    if (classes[k].rpcs != 0) {
      return Internal(Format("%s: node 1 sent %.0f shard RPCs (expected none)", classes[k].name.c_str(),
                             classes[k].rpcs));
    }
  }
  for (size_t k : {1, 5}) {
    if (classes[k].rpcs != static_cast<double>(classes[k].s.size())) {
      return Internal(Format("%s: node 1 sent %.0f shard RPCs for %zu lookups", classes[k].name.c_str(),
                             classes[k].rpcs, classes[k].s.size()));
    }
  }
  return Status::OK();
}

}  // namespace

Status RunLookups(const Options& o, json* out) {
  LookupRun run(o);
  PTS_RETURN_IF_ERROR(run.Start());
  PTS_RETURN_IF_ERROR(run.Measure());
  run.Report(out);
  return run.CheckSplit();
}

}  // namespace ptstore::bench::cluster_bench

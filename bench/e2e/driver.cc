#include "bench/e2e/driver.h"

#include <algorithm>
#include <map>
#include <memory>
#include <queue>

#include "bench/bench_util.h"
#include "bench/workload.h"
#include "sched/load_advisor.h"
#include "sched/store_index.h"
#include "tests/testing/cluster.h"

namespace ptstore::bench::e2e {

const char* ModeName(Mode m) {
  switch (m) {
    case Mode::kNoReuse: return "no-reuse";
    case Mode::kLocal: return "local";
    case Mode::kNoReplication: return "no-replication";
    case Mode::kPtstore: return "ptstore";
  }
  return "?";
}

Result<Mode> ParseMode(std::string_view name) {
  for (Mode m : {Mode::kNoReuse, Mode::kLocal, Mode::kNoReplication, Mode::kPtstore}) {
    if (name == ModeName(m)) return m;
  }
  return InvalidArgument("unknown mode '" + std::string(name) + "' (no-reuse, local, no-replication or ptstore)");
}

namespace {

constexpr char kNs[] = "e2e";

// The real store's layout: bf16, one layer and KV head, head_dim chosen so
// a token is `bytes_per_token` bytes.
Result<Layout> RealLayout(uint64_t bytes_per_token) {
  Layout l;
  l.layers = 1;
  l.kv_heads = 1;
  l.dtype = DType::kBF16;
  l.block_tokens = 16;
  if (bytes_per_token % 4 != 0) return InvalidArgument("--real-bytes-per-token must be a multiple of 4");
  l.head_dim = static_cast<uint32_t>(bytes_per_token / 4);
  PTS_RETURN_IF_ERROR(l.Validate());
  return l;
}

// The nodes of one run: a cluster, independent stores, or none.
class Nodes {
 public:
  Status Start(const E2eOptions& o) {
    if (o.mode == Mode::kNoReuse) return Status::OK();
    if (o.mode == Mode::kLocal) {
      for (uint32_t i = 0; i < o.nodes; ++i) {
        auto d = std::make_unique<testing::Daemon>();
        testing::Daemon::Options dopt;
        dopt.arena_size = o.arena_size;
        dopt.extra_args = {"--node-id", std::to_string(i)};
        PTS_RETURN_IF_ERROR(d->Start(dopt));
        ClientOptions co;
        co.socket_path = d->socket_path();
        PTS_ASSIGN_OR_RETURN(std::unique_ptr<Client> c, Client::Connect(co));
        clients_.push_back({i, std::shared_ptr<Client>(std::move(c))});
        daemons_.push_back(std::move(d));
      }
      return Status::OK();
    }
    testing::TestCluster::Options co;
    co.nodes = o.nodes;
    co.arena_size = o.arena_size;
    co.data_path = o.data_path;
    co.replicate_after = o.mode == Mode::kPtstore ? o.replicate_after : 0;
    co.rpc_timeout_ms = 2000;
    // The replay runs ~100x faster than the virtual clock: a negative cache
    // entry of 250 ms real time would hide another node's save for ~25 s of
    // virtual time. Off, so every lookup sees what the cluster holds then.
    co.negative_ttl_ms = 0;
    cluster_ = std::make_unique<testing::TestCluster>(co);
    PTS_RETURN_IF_ERROR(cluster_->Start());
    PTS_RETURN_IF_ERROR(cluster_->WaitConverged(20000));
    for (uint32_t i = 0; i < o.nodes; ++i) {
      PTS_ASSIGN_OR_RETURN(std::unique_ptr<Client> c, cluster_->Connect(i));
      clients_.push_back({i, std::shared_ptr<Client>(std::move(c))});
    }
    return Status::OK();
  }
  const std::vector<sched::StoreIndex::Node>& clients() const { return clients_; }
  bool cluster() const { return cluster_ != nullptr; }

 private:
  std::unique_ptr<testing::TestCluster> cluster_;
  std::vector<std::unique_ptr<testing::Daemon>> daemons_;
  std::vector<sched::StoreIndex::Node> clients_;
};

struct Instance {
  double prefill_free = 0;                           // its prefill engine is busy until then
  std::vector<std::pair<double, uint64_t>> decoding;  // (finish time, KV tokens) of its decode batch
};

struct Event {
  double time;
  int kind;  // 0: prefill done (save), 1: request finished
  size_t request;
  uint64_t ticket;
  bool operator>(const Event& o) const { return time != o.time ? time > o.time : kind > o.kind; }
};

Metric ToMetric(std::vector<double> v) {
  Summary s = bench::Summarize(std::move(v));
  return Metric{s.mean, s.p50, s.p99};
}

}  // namespace

Result<E2eResult> RunE2e(const E2eOptions& o) {
  const auto wall0 = Clock::now();
  PTS_RETURN_IF_ERROR(ValidateOptions(o.workload));
  if (o.nodes == 0) return InvalidArgument("--nodes must be at least 1");
  PTS_ASSIGN_OR_RETURN(Layout layout, RealLayout(o.real_bytes_per_token));
  PTS_ASSIGN_OR_RETURN(sched::CostModel cost,
                       sched::CostModel::Load(o.profiles.empty() ? sched::DefaultProfilesPath() : o.profiles, o.model,
                                              o.gpu));
  const uint64_t bpt = o.real_bytes_per_token;
  const uint64_t model_bpt = cost.profile().kv_bytes_per_token;
  const std::vector<E2eRequest> requests = MakeE2eWorkload(o.workload);

  Nodes nodes;
  PTS_RETURN_IF_ERROR(nodes.Start(o));
  for (const auto& n : nodes.clients()) PTS_RETURN_IF_ERROR(n.client->CreateNamespace(kNs, layout).status());
  std::unique_ptr<sched::StoreIndex> index;
  if (o.mode != Mode::kNoReuse) index = std::make_unique<sched::StoreIndex>(nodes.clients(), nodes.cluster());
  sched::SchedulerOptions so;
  so.policy = o.policy;
  so.load_bound_s = o.load_bound_s;
  so.remote_path = o.remote_path;
  so.cost = cost;
  sched::Scheduler scheduler(so, index.get());
  for (uint32_t i = 0; i < o.nodes; ++i) {
    PTS_RETURN_IF_ERROR(scheduler.Register({"gpu" + std::to_string(i), i, "simulated"}));
  }

  E2eResult res;
  res.options = o;
  std::vector<Instance> inst(o.nodes);
  std::vector<double> nic_free(o.nodes, 0);
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events;
  std::vector<double> ttft, jct, tpot, ttft_warm;
  std::vector<uint8_t> buf, kv;
  std::vector<uint32_t> history;
  std::vector<uint32_t> node_of(requests.size(), 0);
  double last_finish = 0;

  // Events up to `t`: saves at the end of prefills, finished requests.
  auto drain = [&](double t) -> Status {
    while (!events.empty() && events.top().time <= t) {
      const Event e = events.top();
      events.pop();
      const E2eRequest& r = requests[e.request];
      std::span<const uint32_t> saved = r.tokens;  // at the prefill's end: the prompt
      if (e.kind == 1) {
        PTS_RETURN_IF_ERROR(scheduler.Finished(e.ticket));
        if (!o.save_generated || o.mode == Mode::kNoReuse || r.output.empty()) continue;
        // At the request's end: the prompt and its output, whose last token has no KV yet.
        history.assign(r.tokens.begin(), r.tokens.end());
        history.insert(history.end(), r.output.begin(), r.output.end() - 1);
        saved = history;
      } else {
        PTS_RETURN_IF_ERROR(scheduler.PrefillDone(e.ticket));
        if (o.mode == Mode::kNoReuse) continue;
      }
      const uint64_t whole = saved.size() / layout.block_tokens * layout.block_tokens;
      if (whole == 0) continue;
      kv.resize(whole * bpt);
      FillKv(saved.first(whole), 0, bpt, kv.data());
      Client& c = *nodes.clients()[node_of[e.request]].client;
      Result<SaveResult> s = c.Save(kNs, saved.first(whole), kv.data(), kv.size());
      if (s.ok()) {
        res.saved_bytes += s->new_bytes;
      } else if (s.status().code() != Code::kResourceExhausted) {  // a full arena may refuse: a cache's right
        return s.status();
      }
    }
    return Status::OK();
  };

  for (size_t i = 0; i < requests.size(); ++i) {
    const E2eRequest& r = requests[i];
    PTS_RETURN_IF_ERROR(drain(r.arrival_s));
    PTS_ASSIGN_OR_RETURN(sched::RouteDecision d, scheduler.Route({kNs, r.tokens, r.session}));
    const uint32_t node = d.node;
    node_of[i] = node;
    const uint64_t n = r.tokens.size();
    uint64_t got = 0, remote_tokens = 0;
    std::map<uint32_t, uint64_t> from_owner;  // remote tokens by owner
    if (o.mode != Mode::kNoReuse) {
      Client& c = *nodes.clients()[node].client;
      PTS_ASSIGN_OR_RETURN(PrefixLocation loc, c.LocatePrefix(kNs, r.tokens));
      res.cluster_tokens += loc.matched_tokens;
      const sched::LoadPlan plan = sched::PlanFor(cost, loc, node, n, o.remote_path);
      if (plan.load_tokens > 0) {
        PTS_ASSIGN_OR_RETURN(StoreStats s0, c.Stats());
        buf.resize(plan.load_tokens * bpt);
        PTS_ASSIGN_OR_RETURN(got, c.Load(kNs, std::span(r.tokens).first(plan.load_tokens), buf.data(), buf.size()));
        PTS_ASSIGN_OR_RETURN(StoreStats s1, c.Stats());
        if (o.verify && got > 0) {
          if (auto bad = VerifyKv(std::span(r.tokens).first(got), 0, bpt, buf.data())) {
            return Corruption("request " + std::to_string(i) + " on node " + std::to_string(node) +
                              " loaded wrong bytes: " + bad->ToString());
          }
          res.verified_bytes += got * bpt;
        }
        remote_tokens = std::min(got, (s1.remote_fetch_bytes - s0.remote_fetch_bytes) / bpt);
        if (got == 0) {
          ++res.misses;
        } else if (s1.remote_hits > s0.remote_hits) {
          ++res.hits_remote;
        } else if (s1.ssd_hits > s0.ssd_hits) {
          ++res.hits_ssd;
        } else {
          ++res.hits_dram;
        }
        // Which owners served the remote part (the index's spans this node
        // does not hold), for their NICs' queues.
        uint64_t start = 0, attributed = 0;
        for (size_t k = 0; k < loc.spans.size(); ++k) {
          const PrefixSpan& sp = loc.spans[k];
          const uint64_t hi = std::min(sp.end_token, got);
          if (hi > start && !loc.Holds(k, node)) {
            from_owner[sp.owner] += hi - start;
            attributed += hi - start;
          }
          start = sp.end_token;
        }
        if (remote_tokens > 0 && attributed == 0 && !loc.spans.empty()) from_owner[loc.spans.back().owner] = remote_tokens;
      } else {
        ++res.misses;
      }
    } else {
      ++res.misses;
    }
    const uint64_t local_tokens = got - remote_tokens;
    res.loaded_tokens += got;
    res.recomputed_tokens += n - got;
    res.prompt_tokens += n;
    res.loaded_local_bytes += local_tokens * bpt;
    res.loaded_remote_bytes += remote_tokens * bpt;
    res.model_loaded_bytes += got * model_bpt;

    // Virtual time: the prefill engine, the loads (local over PCIe; remote
    // runs queue on their owner's NIC), the prefill, the decode batch.
    Instance& in = inst[node];
    const double start = std::max(r.arrival_s, in.prefill_free);
    double load_end = start + cost.LoadSeconds(local_tokens * model_bpt, sched::LoadPath::kDram);
    uint64_t attributed_total = 0;
    for (const auto& [owner, t] : from_owner) attributed_total += t;
    for (const auto& [owner, t] : from_owner) {
      // Scale the index's split to the tokens that really came over the network.
      const uint64_t tokens = attributed_total ? t * remote_tokens / attributed_total : 0;
      // The network hop holds the owner's NIC; the arena -> GPU hop follows.
      const double begin = std::max(start, nic_free[owner % o.nodes]);
      const double net_end = begin + cost.HopSeconds(tokens * model_bpt, o.remote_path);
      nic_free[owner % o.nodes] = net_end;
      const double end = net_end + cost.LoadSeconds(tokens * model_bpt, o.remote_path) -
                         cost.HopSeconds(tokens * model_bpt, o.remote_path);
      load_end = std::max(load_end, end);
    }
    const double prefill_end = load_end + cost.PrefillSeconds(n, got);
    in.prefill_free = prefill_end;
    std::erase_if(in.decoding, [&](const auto& dj) { return dj.first <= prefill_end; });
    uint64_t batch_kv = n + r.output_tokens;
    for (const auto& dj : in.decoding) batch_kv += dj.second;
    const double step = cost.DecodeStepSeconds(batch_kv);
    const double finish = prefill_end + r.output_tokens * step;
    in.decoding.emplace_back(finish, n + r.output_tokens);
    ttft.push_back(prefill_end - r.arrival_s);
    if (r.turn > 0) ttft_warm.push_back(prefill_end - r.arrival_s);
    tpot.push_back(step);
    jct.push_back(finish - r.arrival_s);
    last_finish = std::max(last_finish, finish);
    events.push({prefill_end, 0, i, d.ticket});
    events.push({finish, 1, i, d.ticket});
  }
  PTS_RETURN_IF_ERROR(drain(1e300));

  res.requests = requests.size();
  res.ttft = ToMetric(ttft);
  res.ttft_warm = ToMetric(ttft_warm);
  res.jct = ToMetric(jct);
  res.tpot = ToMetric(tpot);
  const double first = requests.empty() ? 0 : requests.front().arrival_s;
  res.duration_s = last_finish - first;
  res.throughput_rps = res.duration_s > 0 ? double(res.requests) / res.duration_s : 0;
  res.wall_seconds = SecondsSince(wall0);
  return res;
}

nlohmann::json ToJson(const E2eResult& r) {
  const E2eOptions& o = r.options;
  auto metric = [](const Metric& m) { return nlohmann::json{{"mean", m.mean}, {"p50", m.p50}, {"p99", m.p99}}; };
  return {
      {"experiment", o.experiment},
      {"workload", WorkloadName(o.workload.kind)},
      {"mode", ModeName(o.mode)},
      {"policy", sched::PolicyName(o.policy)},
      {"nodes", o.nodes},
      {"context_tokens", o.workload.context_tokens},
      {"rate", o.workload.rate},
      {"requests", r.requests},
      {"gpu", o.gpu},
      {"model", o.model},
      {"remote_path", sched::LoadPathName(o.remote_path)},
      {"data_path", o.data_path},
      {"replicate_after", o.mode == Mode::kPtstore ? o.replicate_after : 0},
      {"save_generated", o.save_generated},
      {"real_bytes_per_token", o.real_bytes_per_token},
      {"ttft", metric(r.ttft)},
      {"ttft_warm", metric(r.ttft_warm)},
      {"jct", metric(r.jct)},
      {"tpot", metric(r.tpot)},
      {"throughput_rps", r.throughput_rps},
      {"duration_s", r.duration_s},
      {"token_hit_rate", r.token_hit_rate()},
      {"hits", {{"dram", r.hits_dram}, {"ssd", r.hits_ssd}, {"remote", r.hits_remote}, {"miss", r.misses}}},
      {"bytes",
       {{"loaded_local", r.loaded_local_bytes},
        {"loaded_remote", r.loaded_remote_bytes},
        {"saved", r.saved_bytes},
        {"model_loaded", r.model_loaded_bytes},
        {"verified", r.verified_bytes}}},
      {"prompt_tokens", r.prompt_tokens},
      {"loaded_tokens", r.loaded_tokens},
      {"recomputed_tokens", r.recomputed_tokens},
      {"cluster_tokens", r.cluster_tokens},
      {"wall_seconds", r.wall_seconds},
  };
}

}  // namespace ptstore::bench::e2e

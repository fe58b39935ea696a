#include "bench/bench_cluster_loads.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "bench/workload.h"

namespace ptstore::bench::cluster_bench {

double OfMedians(const Method& base, const Method& x) { return P50(base.seconds) / P50(x.seconds); }
double Paired(const Method& base, const Method& x) {
  std::vector<double> r;
  for (size_t i = 0; i < std::min(base.seconds.size(), x.seconds.size()); ++i) {
    r.push_back(base.seconds[i] / x.seconds[i]);
  }
  return P50(r);
}

Status RunLoads(const Options& o, json* out, std::vector<PathResult>* results) {
  LoadBench bench(o);
  PTS_RETURN_IF_ERROR(bench.Prepare());
  PTS_RETURN_IF_ERROR(bench.StartRedis(out));
  PTS_RETURN_IF_ERROR(bench.StartClusters());
  bench.AddMethods();
  PTS_RETURN_IF_ERROR(bench.Repeat());
  return bench.Report(out, results);
}

LoadBench::LoadBench(const Options& o) : o_(o), layout_(MistralLayout()) {}

Status LoadBench::Prepare() {
  tokens_n_ = o_.tokens / layout_.block_tokens * layout_.block_tokens;
  if (tokens_n_ == 0) return InvalidArgument("--tokens must be at least one block (16)");
  tokens_ = RandomTokens(4242, tokens_n_);
  bpt_ = layout_.BytesPerToken();
  bytes_ = tokens_n_ * bpt_;
  PTS_ASSIGN_OR_RETURN(src_, HostBuffer::Allocate(bytes_));
  PTS_ASSIGN_OR_RETURN(dst_, HostBuffer::Allocate(bytes_));
  FillKv(tokens_, 0, bpt_, src_.data());
  PTS_ASSIGN_OR_RETURN(tcp1_, TcpBaseline::Open(1, src_.data(), bytes_));
  PTS_ASSIGN_OR_RETURN(tcp2_, TcpBaseline::Open(2, src_.data(), bytes_));
  // Node A holds the prefix; node B needs room for one transient copy.
  arena_ = bytes_ + std::max<uint64_t>(64ull << 20, bytes_ / 8);
  if (!o_.json) {
    std::printf("\n== 1-3. Remote load of a %s prefix (%llu tokens, %s) ==\n", HumanBytes(bytes_).c_str(),
                static_cast<unsigned long long>(tokens_n_), layout_.ToString().c_str());
    std::printf("one 2-node cluster per data path (%s), all running at once: node A saves the prefix, a client of "
                "node B loads it;\narenas of %s; replicate_after 0, so every load on B is a transient fetch from A; "
                "%d repetitions of every method, in a rotating order\n",
                [&] {
                  std::string s;
                  for (const auto& p : o_.paths) s += (s.empty() ? "" : ", ") + p;
                  return s;
                }().c_str(),
                HumanBytes(arena_).c_str(), o_.reps);
  }
  return Status::OK();
}

Status LoadBench::StartRedis(json* out) {
  std::string redis_note;
#ifdef PTSTORE_BENCH_HIREDIS
  if (o_.redis && bytes_ % o_.redis_value == 0) {
    const std::string bin = FindInPath(o_.redis_server);
    if (bin.empty()) {
      redis_note = "no " + o_.redis_server + " on PATH: the Redis rows are skipped";
    } else {
      PTS_ASSIGN_OR_RETURN(redis_, RedisBaseline::Start(bin));
      PTS_ASSIGN_OR_RETURN(double set_s, redis_->SetAll(src_.data(), bytes_, o_.redis_value));
      redis_note = Format("redis-server %s on port %u: %llu SETs of %s, pipelined, in %.2f s (%.2f GB/s)", bin.c_str(),
                          redis_->port(), static_cast<unsigned long long>(bytes_ / o_.redis_value),
                          HumanBytes(o_.redis_value).c_str(), set_s, GBps(bytes_, set_s));
      if (out) (*out)["redis_set_s"] = set_s;
    }
  } else if (o_.redis) {
    redis_note = "the prefix is not a whole number of Redis values: the Redis rows are skipped";
  }
#else
  (void)out;
  if (o_.redis) redis_note = "built without hiredis (libhiredis-dev): the Redis rows are skipped";
#endif
  if (!o_.json && !redis_note.empty()) std::printf("%s\n", redis_note.c_str());
  return Status::OK();
}

Status LoadBench::StartClusters() {
  for (const std::string& path : o_.paths) {
    auto pc = std::make_unique<PathCluster>();
    pc->path = path;
    PTS_ASSIGN_OR_RETURN(pc->cluster, StartCluster(o_, 2, std::to_string(arena_ >> 20) + "MiB", path, 0));
    PTS_ASSIGN_OR_RETURN(pc->metrics_b, NodeMetrics::Find(pc->cluster->node(1)));
    PTS_ASSIGN_OR_RETURN(pc->a, pc->cluster->Connect(0));
    PTS_ASSIGN_OR_RETURN(pc->b, pc->cluster->Connect(1));
    if (!pc->a->mapped() || !pc->b->mapped()) {
      return Internal("the clients do not map the arenas (zero-copy loads need the store group)");
    }
    PTS_RETURN_IF_ERROR(pc->a->CreateNamespace(kNs, layout_).status());
    PTS_RETURN_IF_ERROR(pc->b->CreateNamespace(kNs, layout_).status());
    {
      // Saved from a registered buffer: one copy, and no staging buffer of
      // the prefix's size left in the client.
      PTS_ASSIGN_OR_RETURN(RegisteredBuffer rb, pc->a->AllocateBuffer(bytes_));
      std::memcpy(rb.data(), src_.data(), bytes_);
      PTS_ASSIGN_OR_RETURN(SaveResult saved, pc->a->Save(kNs, tokens_, rb, 0, bytes_));
      if (saved.new_bytes != bytes_) return Internal("node A did not store the whole prefix");
    }
    pcs_.push_back(std::move(pc));
  }
  return Status::OK();
}

void LoadBench::AddMethods() {
  methods_.emplace_back(Method{"raw TCP, 1 connection (baseline)", "raw_tcp_1",
                               [this] { return RawTcp(*tcp1_, 0x11, "raw TCP, 1 connection"); }});
  methods_.emplace_back(Method{"raw TCP, 2 connections", "raw_tcp_2",
                               [this] { return RawTcp(*tcp2_, 0x12, "raw TCP, 2 connections"); }});
#ifdef PTSTORE_BENCH_HIREDIS
  if (redis_) {
    const std::string v = HumanBytes(o_.redis_value);
    const int depth = o_.redis_depth;
    methods_.emplace_back(Method{Format("Redis GET x%llu of %s, 1 client, one at a time",
                                        static_cast<unsigned long long>(bytes_ / o_.redis_value), v.c_str()),
                                 "redis_1_sequential", [this] { return RedisGet("Redis GET, sequential", 1, 1); }});
    methods_.emplace_back(Method{Format("Redis GET, 1 client, pipelined (depth %d)", depth), "redis_1_pipelined",
                                 [this, depth] { return RedisGet("Redis GET, pipelined", depth, 1); }});
    methods_.emplace_back(Method{Format("Redis GET, 2 clients, pipelined (depth %d)", depth), "redis_2_pipelined",
                                 [this, depth] { return RedisGet("Redis GET, 2 clients", depth, 2); }});
  }
#endif
  n_baselines_ = methods_.size();
  for (auto& up : pcs_) {
    PathCluster* pc = up.get();
    const std::string tag = "[" + pc->path + "] ";
    methods_.emplace_back(Method{tag + "Client::Load on node B (remote fetch)", pc->path + ":remote_load",
                                 [this, pc, tag] { return RemoteLoad(*pc, tag); }});
    methods_.emplace_back(Method{tag + "Pin + CopyTo + Release on node B", pc->path + ":remote_pin_copy",
                                 [this, pc, tag] { return RemotePinCopy(*pc, tag); }});
    methods_.emplace_back(Method{tag + "Client::Load on node A (owner, local DRAM; reference)",
                                 pc->path + ":local_load", [this, pc, tag] { return LocalLoad(*pc, tag); }});
  }
}

Status LoadBench::Repeat() {
  for (Method& m : methods_) {
    Result<double> r = m.run();
    if (!r.ok()) return FailLogs(r.status().WithContext("warm-up: " + m.name));
  }
  for (auto& pc : pcs_) {
    pc->fetch_s.clear();
    pc->pin_s.clear();
    pc->copy_s.clear();
    PTS_ASSIGN_OR_RETURN(pc->m0, ClusterMetrics::Read(pc->metrics_b));
    pc->loads_before = pc->remote_loads;
  }
  for (int rep = 0; rep < o_.reps; ++rep) {
    const size_t first = static_cast<size_t>(rep) * 3 % methods_.size();
    for (size_t k = 0; k < methods_.size(); ++k) {
      Method& m = methods_[(k + first) % methods_.size()];
      last_cpu_ = 0;
      Result<double> r = m.run();
      if (!r.ok()) return FailLogs(r.status().WithContext(m.name));
      m.cpu.push_back(last_cpu_);
      m.seconds.push_back(*r);
    }
  }
  return Status::OK();
}

// ------------------------------------------------------ the methods' runs

Result<double> LoadBench::RawTcp(TcpBaseline& tcp, uint8_t poison, const std::string& what) {
  Poison(poison);
  PTS_ASSIGN_OR_RETURN(double s, Timed({}, [&] { return tcp.Transfer(dst_.data()).status(); }));
  PTS_RETURN_IF_ERROR(Check(what));
  return s;
}

#ifdef PTSTORE_BENCH_HIREDIS
Result<double> LoadBench::RedisGet(const std::string& what, int depth, int clients) {
  Poison(0x13);
  PTS_ASSIGN_OR_RETURN(double s, Timed({redis_->pid()}, [&] {
                         return redis_->GetAll(dst_.data(), bytes_, o_.redis_value, depth, clients).status();
                       }));
  PTS_RETURN_IF_ERROR(Check(what));
  return s;
}
#endif

Result<double> LoadBench::RemoteLoad(PathCluster& pc, const std::string& tag) {
  Poison(0x21);
  PTS_ASSIGN_OR_RETURN(double s, Remote(pc, "load", [&] { return pc.b->Load(kNs, tokens_, dst_.data(), bytes_); }));
  PTS_RETURN_IF_ERROR(Check(tag + "Client::Load on node B"));
  return s;
}

Result<double> LoadBench::RemotePinCopy(PathCluster& pc, const std::string& tag) {
  Poison(0x22);
  double pin_s = 0, copy_s = 0;
  PTS_ASSIGN_OR_RETURN(double s, Remote(pc, "pin", [&]() -> Result<uint64_t> {
                         auto t0 = Clock::now();
                         PTS_ASSIGN_OR_RETURN(PinnedPrefix p, pc.b->Pin(kNs, tokens_));
                         pin_s = SecondsSince(t0);
                         if (p.tokens() != tokens_n_) return p.tokens();
                         t0 = Clock::now();
                         PTS_RETURN_IF_ERROR(p.CopyTo(dst_.data(), bytes_));
                         copy_s = SecondsSince(t0);
                         PTS_RETURN_IF_ERROR(p.Release());
                         return p.tokens();
                       }));
  PTS_RETURN_IF_ERROR(Check(tag + "Pin + CopyTo on node B"));
  pc.pin_s.push_back(pin_s);
  pc.copy_s.push_back(copy_s);
  return s;
}

Result<double> LoadBench::LocalLoad(PathCluster& pc, const std::string& tag) {
  Poison(0x23);
  uint64_t got = 0;
  PTS_ASSIGN_OR_RETURN(double s, Timed({pc.cluster->node(0).pid()}, [&]() -> Status {
                         PTS_ASSIGN_OR_RETURN(got, pc.a->Load(kNs, tokens_, dst_.data(), bytes_));
                         return Status::OK();
                       }));
  if (got != tokens_n_) return Internal("the local load on node A was short");
  PTS_RETURN_IF_ERROR(Check(tag + "Client::Load on node A"));
  return s;
}

// ---------------------------------------------------------------- helpers

Result<double> LoadBench::Timed(const std::vector<pid_t>& servers, const std::function<Status()>& body) {
  // The CPU time of a method's timed part: this process (all its threads)
  // plus the server processes that work for it.
  auto cpu_of = [](const std::vector<pid_t>& servers) {
    double c = SelfCpuSeconds();
    for (pid_t p : servers) c += ProcCpuSeconds(p);
    return c;
  };
  const double c0 = cpu_of(servers);
  const auto t0 = Clock::now();
  PTS_RETURN_IF_ERROR(body());
  const double s = SecondsSince(t0);
  last_cpu_ = cpu_of(servers) - c0;
  return s;
}

Result<double> LoadBench::Remote(PathCluster& pc, const std::string& what,
                                 const std::function<Result<uint64_t>()>& load) {
  PTS_ASSIGN_OR_RETURN(ClusterMetrics mb, ClusterMetrics::Read(pc.metrics_b));
  PTS_ASSIGN_OR_RETURN(StoreStats before, pc.b->Stats());
  uint64_t got = 0;
  PTS_ASSIGN_OR_RETURN(double s, Timed({pc.cluster->node(0).pid(), pc.cluster->node(1).pid()}, [&]() -> Status {
                         PTS_ASSIGN_OR_RETURN(got, load());
                         return Status::OK();
                       }));
  PTS_ASSIGN_OR_RETURN(StoreStats after, pc.b->Stats());
  if (got != tokens_n_) {
    return Internal(Format("%s: %llu of %llu tokens", what.c_str(), static_cast<unsigned long long>(got),
                           static_cast<unsigned long long>(tokens_n_)));
  }
  if (after.remote_fetch_bytes - before.remote_fetch_bytes != bytes_) {
    return Internal(Format("%s: node B fetched %llu bytes from node A, not the %llu of the prefix", what.c_str(),
                           static_cast<unsigned long long>(after.remote_fetch_bytes - before.remote_fetch_bytes),
                           static_cast<unsigned long long>(bytes_)));
  }
  pc.remote_loads++;
  PTS_ASSIGN_OR_RETURN(ClusterMetrics ma, ClusterMetrics::Read(pc.metrics_b));
  pc.fetch_s[what].push_back((ma - mb).fetch_sum_s);
  return s;
}

void LoadBench::Poison(uint8_t v) { std::memset(dst_.data(), v, bytes_); }

Status LoadBench::Check(const std::string& what) const { return CheckKv(what.c_str(), tokens_, bpt_, dst_.data()); }

Status LoadBench::FailLogs(Status st) const {
  if (!st.ok() && o_.verbose) {
    for (auto& pc : pcs_) {
      std::fprintf(stderr, "=== %s cluster ===\n%s", pc->path.c_str(), NodeLogs(*pc->cluster).c_str());
    }
  }
  return st;
}

const Method& LoadBench::Find(const std::string& key) const {
  for (const Method& m : methods_) {
    if (m.key == key) return m;
  }
  return methods_[0];
}

}  // namespace ptstore::bench::cluster_bench

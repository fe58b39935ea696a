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
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>
#include <thread>

#include "bench/bench_util.h"
#include "bench/workload.h"
#include "core/mutex.h"
#include "core/rendezvous.h"
#include "ptstore/client.h"
#include "ptstore/keys.h"
#include "tests/testing/cluster.h"
#include "tests/testing/daemon.h"
#include "tests/testing/http_get.h"
#include "tests/testing/prometheus_text.h"

#ifdef PTSTORE_BENCH_HIREDIS
#include <hiredis/hiredis.h>
#endif

using namespace ptstore;
using namespace ptstore::bench;
using ptstore::testing::TestCluster;
using json = nlohmann::json;

namespace {

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
};

// Heartbeats of the clusters: the daemon's defaults (the harness's are
// short, for failure tests; a 1 GiB transfer on 2 busy cores must not look
// like a dead node), shorter in --quick (small transfers; faster start).
int g_heartbeat_ms = 500;
int g_rpc_timeout_ms = 1000;

constexpr char kNs[] = "bench";

// ------------------------------------------------------------ small tools

Status CheckKv(const char* what, std::span<const uint32_t> tokens, uint64_t bpt, const uint8_t* data) {
  if (auto bad = VerifyKv(tokens, 0, bpt, data)) return Corruption(std::string(what) + ": " + bad->ToString());
  return Status::OK();
}

// CPU time (user + system, all threads, exited ones included) of this
// process, and of another process (/proc/<pid>/stat: clock ticks).
double SelfCpuSeconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
         static_cast<double>(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1e-6;
}
double ProcCpuSeconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(in, line);
  const size_t close = line.rfind(')');  // the command may hold spaces
  if (close == std::string::npos) return 0;
  std::istringstream f(line.substr(close + 2));
  std::string field;
  double ticks = 0;
  // Fields 3.. after the command; utime and stime are fields 14 and 15.
  for (int i = 3; i <= 15 && f >> field; ++i) {
    if (i >= 14) ticks += std::stod(field);
  }
  return ticks / static_cast<double>(sysconf(_SC_CLK_TCK));
}

// Median of a sample, or 0.
double P50(const std::vector<double>& v) { return Summarize(v).p50; }

std::string Ratio(double r) { return Format("%.2f", r); }

// The ids 0..n-1.
std::vector<uint32_t> Ids(size_t n) {
  std::vector<uint32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0u);
  return ids;
}

// The node holding the index shard of a prompt's root with every node
// alive: the same function the nodes use (storage/cluster/cluster.cc ShardFor).
uint32_t ShardOfPrompt(const std::string& ns, std::span<const uint32_t> tokens, uint32_t block_tokens,
                       size_t nodes) {
  const ChainKey root = NextKey(RootKey(ns, ""), tokens.first(block_tokens));
  const std::vector<uint32_t> ids = Ids(nodes);
  return core::ShardOf(root, ids);
}

// A node's Prometheus endpoint (started with --metrics-port auto: its log
// says where).
class NodeMetrics {
 public:
  static Result<NodeMetrics> Find(const ptstore::testing::Daemon& d) {
    const std::string log = d.ReadLog();
    const std::string mark = "metrics on http://";
    const size_t at = log.find(mark);
    if (at == std::string::npos) return NotFound("no metrics address in the log of " + d.log_path());
    const size_t colon = log.find(':', at + mark.size());
    const size_t slash = log.find('/', at + mark.size());
    if (colon == std::string::npos || slash == std::string::npos || slash < colon) {
      return ProtocolError("cannot parse the metrics address in " + d.log_path());
    }
    NodeMetrics m;
    m.port_ = static_cast<uint16_t>(std::stoi(log.substr(colon + 1, slash - colon - 1)));
    return m;
  }
  Result<ptstore::testing::PromExposition> Scrape() const {
    PTS_ASSIGN_OR_RETURN(ptstore::testing::HttpReply r, ptstore::testing::HttpGet(port_, "/metrics"));
    if (r.code != 200) return Unavailable("metrics: HTTP " + std::to_string(r.code));
    return ptstore::testing::ParsePromText(r.body);
  }
  // One value (0 when absent).
  Result<double> Value(const std::string& name, const std::map<std::string, std::string>& labels = {}) const {
    PTS_ASSIGN_OR_RETURN(auto e, Scrape());
    const double v = e.Value(name, labels);
    return std::isnan(v) ? 0.0 : v;
  }

 private:
  uint16_t port_ = 0;
};

// The counters of a node's metrics the benchmark follows.
struct ClusterMetrics {
  double shard_lookups = 0, local_shard = 0, metadata_hits = 0, announces = 0, fetch_requests = 0;
  double fetch_failures = 0, bytes_tcp = 0, bytes_rma = 0, fetch_sum_s = 0, fetch_count = 0;
  double lookup_sum_s = 0, lookup_count = 0;
  static Result<ClusterMetrics> Read(const NodeMetrics& m) {
    PTS_ASSIGN_OR_RETURN(auto e, m.Scrape());
    auto v = [&](const std::string& name, const std::map<std::string, std::string>& labels = {}) {
      const double x = e.Value(name, labels);
      return std::isnan(x) ? 0.0 : x;
    };
    ClusterMetrics c;
    c.shard_lookups = v("ptstore_shard_lookups_total");
    c.local_shard = v("ptstore_local_shard_requests_total");
    c.metadata_hits = v("ptstore_metadata_cache_hits_total");
    c.announces = v("ptstore_announces_total");
    c.fetch_requests = v("ptstore_fetch_requests_total");
    c.fetch_failures = v("ptstore_fetch_failures_total");
    c.bytes_tcp = v("ptstore_fetched_bytes_total", {{"path", "tcp"}});
    c.bytes_rma = v("ptstore_fetched_bytes_total", {{"path", "rma"}});
    c.fetch_sum_s = v("ptstore_rpc_latency_seconds_sum", {{"rpc", "fetch"}});
    c.fetch_count = v("ptstore_rpc_latency_seconds_count", {{"rpc", "fetch"}});
    c.lookup_sum_s = v("ptstore_rpc_latency_seconds_sum", {{"rpc", "shard_lookup"}});
    c.lookup_count = v("ptstore_rpc_latency_seconds_count", {{"rpc", "shard_lookup"}});
    return c;
  }
  ClusterMetrics operator-(const ClusterMetrics& b) const {
    ClusterMetrics d;
    d.shard_lookups = shard_lookups - b.shard_lookups;
    d.local_shard = local_shard - b.local_shard;
    d.metadata_hits = metadata_hits - b.metadata_hits;
    d.announces = announces - b.announces;
    d.fetch_requests = fetch_requests - b.fetch_requests;
    d.fetch_failures = fetch_failures - b.fetch_failures;
    d.bytes_tcp = bytes_tcp - b.bytes_tcp;
    d.bytes_rma = bytes_rma - b.bytes_rma;
    d.fetch_sum_s = fetch_sum_s - b.fetch_sum_s;
    d.fetch_count = fetch_count - b.fetch_count;
    d.lookup_sum_s = lookup_sum_s - b.lookup_sum_s;
    d.lookup_count = lookup_count - b.lookup_count;
    return d;
  }
};

// A cluster of `nodes` real ptstored (metrics on), converged. `path`: tcp,
// rma (libfabric's tcp provider, the daemon's default) or rma-<provider>.
// Stops the nodes and removes their directories (the harness keeps a
// daemon's directory for post-mortems).
struct ClusterDeleter {
  void operator()(TestCluster* c) const {
    std::vector<std::string> dirs;
    for (size_t i = 0; i < c->size(); ++i) dirs.push_back(c->node(i).dir());
    delete c;
    for (const std::string& d : dirs) {
      std::error_code ec;
      if (!d.empty()) std::filesystem::remove_all(d, ec);
    }
  }
};
using ClusterPtr = std::unique_ptr<TestCluster, ClusterDeleter>;

// The nodes' --log-level (--node-log-level; the metrics address is logged
// at info).
std::string g_node_log_level = "info";

Result<ClusterPtr> StartCluster(size_t nodes, const std::string& arena, const std::string& path,
                                uint32_t replicate_after, int negative_ttl_ms = -1) {
  TestCluster::Options co;
  co.negative_ttl_ms = negative_ttl_ms;
  co.nodes = nodes;
  co.arena_size = arena;
  co.data_path = path.rfind("rma", 0) == 0 ? "rma" : "tcp";
  // tcp-v1: both nodes the ptstored-peer-v1 build, peer protocol 1, frames
  // without MACs (the baseline of the MACs' cost).
  if (path == "tcp-v1") co.binaries = std::vector<std::string>(nodes, PTSTORE_PTSTORED_PEER_V1_PATH);
  co.replicate_after = replicate_after;
  co.heartbeat_ms = g_heartbeat_ms;
  co.rpc_timeout_ms = g_rpc_timeout_ms;
  co.extra_args = {"--metrics-port", "auto", "--log-level", g_node_log_level};
  if (path.rfind("rma-", 0) == 0) {
    co.extra_args.insert(co.extra_args.end(), {"--fabric-provider", path.substr(4)});
    // A provider may name an endpoint by its node's address (shm does):
    // node i at 127.0.0.(i + 1), port 7400 (the harness's fixed port for
    // separate hosts).
    for (size_t i = 0; i < nodes; ++i) co.hosts.push_back("127.0.0." + std::to_string(i + 1));
  }
  ClusterPtr c(new TestCluster(co));
  PTS_RETURN_IF_ERROR(c->Start());
  PTS_RETURN_IF_ERROR(c->WaitConverged(20000));
  return c;
}

std::string NodeLogs(TestCluster& c) {
  std::string out;
  for (size_t i = 0; i < c.size(); ++i) {
    std::string log = c.node(i).ReadLog();
    if (log.size() > 3000) log = "..." + log.substr(log.size() - 3000);
    out += "--- node " + std::to_string(i) + " log ---\n" + log;
  }
  return out;
}

// ---------------------------------------------------- raw loopback TCP

bool SendAll(int fd, const uint8_t* p, uint64_t n) {
  while (n > 0) {
    ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<uint64_t>(w);
  }
  return true;
}

bool RecvAll(int fd, uint8_t* p, uint64_t n) {
  while (n > 0) {
    ssize_t r = recv(fd, p, n, 0);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    p += r;
    n -= static_cast<uint64_t>(r);
  }
  return true;
}

// `n` loopback TCP connections in this process. The far end of connection
// k sends slice k of `src` (4 KiB-aligned slices) each time it reads a
// 1-byte request; Transfer() asks on every connection at once and receives
// the slices into dst, like a remote load asks its owner and receives.
class TcpBaseline {
 public:
  static Result<std::unique_ptr<TcpBaseline>> Open(int n, const uint8_t* src, uint64_t bytes) {
    std::unique_ptr<TcpBaseline> t(new TcpBaseline());
    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0) return ErrnoError("socket", errno);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (bind(lfd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(lfd, n) != 0 ||
        getsockname(lfd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      Status st = ErrnoError("listen on loopback", errno);
      close(lfd);
      return st;
    }
    uint64_t off = 0;
    for (int k = 0; k < n; ++k) {
      Conn c;
      c.rx = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (connect(c.rx, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
        Status st = ErrnoError("connect on loopback", errno);
        close(c.rx);
        close(lfd);
        return st;
      }
      c.tx = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c.tx < 0) {
        Status st = ErrnoError("accept on loopback", errno);
        close(c.rx);
        close(lfd);
        return st;
      }
      // As the nodes' connections (rdma/tcp.cc TuneTcp); buffer sizes are
      // the kernel's (autotuned) on both.
      int one = 1;
      setsockopt(c.rx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      setsockopt(c.tx, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      uint64_t end = k + 1 == n ? bytes : ((bytes * (k + 1) / n) & ~uint64_t{4095});
      c.off = off;
      c.len = end - off;
      off = end;
      t->conns_.push_back(std::move(c));
    }
    close(lfd);
    for (Conn& c : t->conns_) {
      c.sender = std::thread([fd = c.tx, p = src + c.off, len = c.len] {
        char req;
        while (recv(fd, &req, 1, 0) == 1) {
          if (!SendAll(fd, p, len)) return;
        }
      });
    }
    return t;
  }
  ~TcpBaseline() {
    for (Conn& c : conns_) shutdown(c.rx, SHUT_RDWR);
    for (Conn& c : conns_) {
      if (c.sender.joinable()) c.sender.join();
      close(c.rx);
      close(c.tx);
    }
  }
  // Seconds from the requests to the last byte received.
  Result<double> Transfer(uint8_t* dst) {
    std::atomic<bool> ok{true};
    auto receive = [&](const Conn& c) {
      const char req = 'g';
      if (send(c.rx, &req, 1, MSG_NOSIGNAL) != 1 || !RecvAll(c.rx, dst + c.off, c.len)) ok = false;
    };
    const auto t0 = Clock::now();
    std::vector<std::thread> others;
    for (size_t k = 1; k < conns_.size(); ++k) others.emplace_back(receive, std::cref(conns_[k]));
    receive(conns_[0]);
    for (auto& t : others) t.join();
    const double s = SecondsSince(t0);
    if (!ok) return IOError("the loopback TCP baseline lost its connection");
    return s;
  }

 private:
  struct Conn {
    int rx = -1, tx = -1;
    uint64_t off = 0, len = 0;
    std::thread sender;
  };
  TcpBaseline() = default;
  std::vector<Conn> conns_;
};

// ------------------------------------------------------------------ Redis

// The first executable `name` on PATH (or name itself when it has a '/').
std::string FindInPath(const std::string& name) {
  if (name.find('/') != std::string::npos) return access(name.c_str(), X_OK) == 0 ? name : "";
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "/usr/local/bin:/usr/bin:/bin");
  std::string dir;
  while (std::getline(ss, dir, ':')) {
    const std::string p = (dir.empty() ? "." : dir) + "/" + name;
    if (access(p.c_str(), X_OK) == 0) return p;
  }
  return "";
}

#ifdef PTSTORE_BENCH_HIREDIS
// A redis-server of this benchmark: a free loopback port, no persistence
// (--save "" --appendonly no), a temporary directory; SIGTERM and removed
// when destroyed (and SIGTERM if this process dies: PR_SET_PDEATHSIG).
class RedisBaseline {
 public:
  static Result<std::unique_ptr<RedisBaseline>> Start(const std::string& binary) {
    std::unique_ptr<RedisBaseline> r(new RedisBaseline());
    r->dir_ = ptstore::testing::MakeTempDir("bench-cluster-redis");
    if (r->dir_.empty()) return ErrnoError("mkdtemp", errno);
    r->port_ = ptstore::testing::FreePort();
    PTS_ASSIGN_OR_RETURN(r->pid_, ptstore::testing::SpawnWithLog(
                                      {binary, "--port", std::to_string(r->port_), "--bind", "127.0.0.1", "--save",
                                       "", "--appendonly", "no", "--dir", r->dir_, "--daemonize", "no"},
                                      r->dir_ + "/redis.log"));
    const auto deadline = Clock::now() + std::chrono::seconds(20);
    while (Clock::now() < deadline) {
      int status;
      if (waitpid(r->pid_, &status, WNOHANG) == r->pid_) {
        r->pid_ = -1;
        return Unavailable("redis-server exited at start: " + ptstore::testing::ReadFile(r->dir_ + "/redis.log"));
      }
      if (redisContext* c = r->ConnectOne()) {
        redisReply* rep = static_cast<redisReply*>(redisCommand(c, "PING"));
        const bool up = rep != nullptr && rep->type == REDIS_REPLY_STATUS;
        if (rep) freeReplyObject(rep);
        if (up) {
          r->clients_.push_back(c);
          return r;
        }
        redisFree(c);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return DeadlineExceeded("redis-server did not answer within 20 s");
  }
  ~RedisBaseline() {
    for (redisContext* c : clients_) redisFree(c);
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status;
      waitpid(pid_, &status, 0);
    }
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }
  uint16_t port() const { return port_; }
  pid_t pid() const { return pid_; }

  // SETs src as values of `value` bytes (keys kv:0, kv:1, ...), pipelined.
  Result<double> SetAll(const uint8_t* src, uint64_t bytes, uint64_t value) {
    redisContext* c = clients_[0];
    const uint64_t n = bytes / value;
    const auto t0 = Clock::now();
    for (uint64_t i = 0; i < n; ++i) {
      redisAppendCommand(c, "SET kv:%llu %b", static_cast<unsigned long long>(i), src + i * value,
                         static_cast<size_t>(value));
    }
    for (uint64_t i = 0; i < n; ++i) {
      void* rep = nullptr;
      if (redisGetReply(c, &rep) != REDIS_OK || rep == nullptr) return IOError(std::string("SET: ") + c->errstr);
      const bool ok = static_cast<redisReply*>(rep)->type == REDIS_REPLY_STATUS;
      freeReplyObject(rep);
      if (!ok) return IOError("SET refused");
    }
    return SecondsSince(t0);
  }

  // GETs every value into dst with `clients` connections (each a contiguous
  // run of keys) keeping `depth` requests in flight on each (1: one at a
  // time, redisCommand). Seconds.
  Result<double> GetAll(uint8_t* dst, uint64_t bytes, uint64_t value, int depth, int clients) {
    while (clients_.size() < static_cast<size_t>(clients)) {
      redisContext* c = ConnectOne();
      if (c == nullptr) return Unavailable("cannot connect to redis-server");
      clients_.push_back(c);
    }
    const uint64_t n = bytes / value;
    std::atomic<bool> ok{true};
    core::Mutex err_mu;
    std::string err;
    auto fail = [&](const std::string& why) {
      core::MutexLock lk(err_mu);
      ok = false;
      err = why;
    };
    auto run = [&](redisContext* c, uint64_t first, uint64_t end) {
      auto take = [&](redisReply* rep, uint64_t i) {
        if (rep == nullptr || rep->type != REDIS_REPLY_STRING || static_cast<uint64_t>(rep->len) != value) {
          fail(std::string("GET kv:") + std::to_string(i) + ": " + (rep ? "wrong reply" : c->errstr));
        } else {
          std::memcpy(dst + i * value, rep->str, value);
        }
        if (rep) freeReplyObject(rep);
      };
      if (depth <= 1) {
        for (uint64_t i = first; i < end && ok; ++i) {
          take(static_cast<redisReply*>(redisCommand(c, "GET kv:%llu", static_cast<unsigned long long>(i))), i);
        }
        return;
      }
      uint64_t sent = first;
      for (uint64_t i = first; i < end && ok; ++i) {
        while (sent < end && sent < i + static_cast<uint64_t>(depth)) {
          redisAppendCommand(c, "GET kv:%llu", static_cast<unsigned long long>(sent++));
        }
        void* rep = nullptr;
        if (redisGetReply(c, &rep) != REDIS_OK) rep = nullptr;
        take(static_cast<redisReply*>(rep), i);
      }
    };
    const auto t0 = Clock::now();
    std::vector<std::thread> others;
    for (int k = 1; k < clients; ++k) {
      others.emplace_back(run, clients_[k], n * k / clients, n * (k + 1) / clients);
    }
    run(clients_[0], 0, n / clients);
    for (auto& t : others) t.join();
    const double s = SecondsSince(t0);
    if (!ok) return IOError(err);
    return s;
  }

 private:
  RedisBaseline() = default;
  redisContext* ConnectOne() const {
    timeval tv{2, 0};
    redisContext* c = redisConnectWithTimeout("127.0.0.1", port_, tv);
    if (c == nullptr) return nullptr;
    if (c->err) {
      redisFree(c);
      return nullptr;
    }
    return c;
  }
  std::string dir_;
  uint16_t port_ = 0;
  pid_t pid_ = -1;
  std::vector<redisContext*> clients_;
};
#endif  // PTSTORE_BENCH_HIREDIS

// ------------------------------------------------- 1-3: the remote load

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
double OfMedians(const Method& base, const Method& x) { return P50(base.seconds) / P50(x.seconds); }
double Paired(const Method& base, const Method& x) {
  std::vector<double> r;
  for (size_t i = 0; i < std::min(base.seconds.size(), x.seconds.size()); ++i) {
    r.push_back(base.seconds[i] / x.seconds[i]);
  }
  return P50(r);
}

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

Status RunLoads(const Options& o, json* out, std::vector<PathResult>* results) {
  const Layout layout = MistralLayout();
  const uint64_t tokens_n = o.tokens / layout.block_tokens * layout.block_tokens;
  if (tokens_n == 0) return InvalidArgument("--tokens must be at least one block (16)");
  const std::vector<uint32_t> tokens = RandomTokens(4242, tokens_n);
  const uint64_t bpt = layout.BytesPerToken();
  const uint64_t bytes = tokens_n * bpt;
  PTS_ASSIGN_OR_RETURN(HostBuffer src, HostBuffer::Allocate(bytes));
  PTS_ASSIGN_OR_RETURN(HostBuffer dst, HostBuffer::Allocate(bytes));
  FillKv(tokens, 0, bpt, src.data());
  PTS_ASSIGN_OR_RETURN(auto tcp1, TcpBaseline::Open(1, src.data(), bytes));
  PTS_ASSIGN_OR_RETURN(auto tcp2, TcpBaseline::Open(2, src.data(), bytes));
  // Node A holds the prefix; node B needs room for one transient copy.
  const uint64_t arena = bytes + std::max<uint64_t>(64ull << 20, bytes / 8);
  if (!o.json) {
    std::printf("\n== 1-3. Remote load of a %s prefix (%llu tokens, %s) ==\n", HumanBytes(bytes).c_str(),
                static_cast<unsigned long long>(tokens_n), layout.ToString().c_str());
    std::printf("one 2-node cluster per data path (%s), all running at once: node A saves the prefix, a client of "
                "node B loads it;\narenas of %s; replicate_after 0, so every load on B is a transient fetch from A; "
                "%d repetitions of every method, in a rotating order\n",
                [&] {
                  std::string s;
                  for (const auto& p : o.paths) s += (s.empty() ? "" : ", ") + p;
                  return s;
                }().c_str(),
                HumanBytes(arena).c_str(), o.reps);
  }
  std::string redis_note;
#ifdef PTSTORE_BENCH_HIREDIS
  std::unique_ptr<RedisBaseline> redis;
  if (o.redis && bytes % o.redis_value == 0) {
    const std::string bin = FindInPath(o.redis_server);
    if (bin.empty()) {
      redis_note = "no " + o.redis_server + " on PATH: the Redis rows are skipped";
    } else {
      PTS_ASSIGN_OR_RETURN(redis, RedisBaseline::Start(bin));
      PTS_ASSIGN_OR_RETURN(double set_s, redis->SetAll(src.data(), bytes, o.redis_value));
      redis_note = Format("redis-server %s on port %u: %llu SETs of %s, pipelined, in %.2f s (%.2f GB/s)", bin.c_str(),
                          redis->port(), static_cast<unsigned long long>(bytes / o.redis_value),
                          HumanBytes(o.redis_value).c_str(), set_s, GBps(bytes, set_s));
      if (out) (*out)["redis_set_s"] = set_s;
    }
  } else if (o.redis) {
    redis_note = "the prefix is not a whole number of Redis values: the Redis rows are skipped";
  }
#else
  if (o.redis) redis_note = "built without hiredis (libhiredis-dev): the Redis rows are skipped";
#endif
  if (!o.json && !redis_note.empty()) std::printf("%s\n", redis_note.c_str());

  // The clusters.
  std::vector<std::unique_ptr<PathCluster>> pcs;
  for (const std::string& path : o.paths) {
    auto pc = std::make_unique<PathCluster>();
    pc->path = path;
    PTS_ASSIGN_OR_RETURN(pc->cluster, StartCluster(2, std::to_string(arena >> 20) + "MiB", path, 0));
    PTS_ASSIGN_OR_RETURN(pc->metrics_b, NodeMetrics::Find(pc->cluster->node(1)));
    PTS_ASSIGN_OR_RETURN(pc->a, pc->cluster->Connect(0));
    PTS_ASSIGN_OR_RETURN(pc->b, pc->cluster->Connect(1));
    if (!pc->a->mapped() || !pc->b->mapped()) {
      return Internal("the clients do not map the arenas (zero-copy loads need the store group)");
    }
    PTS_RETURN_IF_ERROR(pc->a->CreateNamespace(kNs, layout).status());
    PTS_RETURN_IF_ERROR(pc->b->CreateNamespace(kNs, layout).status());
    {
      // Saved from a registered buffer: one copy, and no staging buffer of
      // the prefix's size left in the client.
      PTS_ASSIGN_OR_RETURN(RegisteredBuffer rb, pc->a->AllocateBuffer(bytes));
      std::memcpy(rb.data(), src.data(), bytes);
      PTS_ASSIGN_OR_RETURN(SaveResult saved, pc->a->Save(kNs, tokens, rb, 0, bytes));
      if (saved.new_bytes != bytes) return Internal("node A did not store the whole prefix");
    }
    pcs.push_back(std::move(pc));
  }
  auto fail_logs = [&](Status st) {
    if (!st.ok() && o.verbose) {
      for (auto& pc : pcs) std::fprintf(stderr, "=== %s cluster ===\n%s", pc->path.c_str(), NodeLogs(*pc->cluster).c_str());
    }
    return st;
  };

  // The CPU time of a method's timed part: this process (all its threads)
  // plus the server processes that work for it.
  double last_cpu = 0;
  auto cpu_of = [](const std::vector<pid_t>& servers) {
    double c = SelfCpuSeconds();
    for (pid_t p : servers) c += ProcCpuSeconds(p);
    return c;
  };
  // Runs `body` timed; its CPU time goes to last_cpu.
  auto timed = [&](const std::vector<pid_t>& servers, const std::function<Status()>& body) -> Result<double> {
    const double c0 = cpu_of(servers);
    const auto t0 = Clock::now();
    PTS_RETURN_IF_ERROR(body());
    const double s = SecondsSince(t0);
    last_cpu = cpu_of(servers) - c0;
    return s;
  };
  auto poison = [&](uint8_t v) { std::memset(dst.data(), v, bytes); };
  auto check = [&](const std::string& what) { return CheckKv(what.c_str(), tokens, bpt, dst.data()); };
  // Every load on B must be a remote fetch of the whole prefix.
  auto remote = [&](PathCluster& pc, const std::string& what,
                    const std::function<Result<uint64_t>()>& load) -> Result<double> {
    PTS_ASSIGN_OR_RETURN(ClusterMetrics mb, ClusterMetrics::Read(pc.metrics_b));
    PTS_ASSIGN_OR_RETURN(StoreStats before, pc.b->Stats());
    uint64_t got = 0;
    PTS_ASSIGN_OR_RETURN(double s, timed({pc.cluster->node(0).pid(), pc.cluster->node(1).pid()}, [&]() -> Status {
                           PTS_ASSIGN_OR_RETURN(got, load());
                           return Status::OK();
                         }));
    PTS_ASSIGN_OR_RETURN(StoreStats after, pc.b->Stats());
    if (got != tokens_n) {
      return Internal(Format("%s: %llu of %llu tokens", what.c_str(), static_cast<unsigned long long>(got),
                             static_cast<unsigned long long>(tokens_n)));
    }
    if (after.remote_fetch_bytes - before.remote_fetch_bytes != bytes) {
      return Internal(Format("%s: node B fetched %llu bytes from node A, not the %llu of the prefix", what.c_str(),
                             static_cast<unsigned long long>(after.remote_fetch_bytes - before.remote_fetch_bytes),
                             static_cast<unsigned long long>(bytes)));
    }
    pc.remote_loads++;
    PTS_ASSIGN_OR_RETURN(ClusterMetrics ma, ClusterMetrics::Read(pc.metrics_b));
    pc.fetch_s[what].push_back((ma - mb).fetch_sum_s);
    return s;
  };

  std::vector<Method> methods;
  methods.emplace_back(Method{"raw TCP, 1 connection (baseline)", "raw_tcp_1", [&]() -> Result<double> {
                                poison(0x11);
                                PTS_ASSIGN_OR_RETURN(double s, timed({}, [&] { return tcp1->Transfer(dst.data()).status(); }));
                                PTS_RETURN_IF_ERROR(check("raw TCP, 1 connection"));
                                return s;
                              }});
  methods.emplace_back(Method{"raw TCP, 2 connections", "raw_tcp_2", [&]() -> Result<double> {
                                poison(0x12);
                                PTS_ASSIGN_OR_RETURN(double s, timed({}, [&] { return tcp2->Transfer(dst.data()).status(); }));
                                PTS_RETURN_IF_ERROR(check("raw TCP, 2 connections"));
                                return s;
                              }});
#ifdef PTSTORE_BENCH_HIREDIS
  if (redis) {
    auto get = [&](const std::string& what, int depth, int clients) {
      return [&, what, depth, clients]() -> Result<double> {
        poison(0x13);
        PTS_ASSIGN_OR_RETURN(double s, timed({redis->pid()}, [&] {
                               return redis->GetAll(dst.data(), bytes, o.redis_value, depth, clients).status();
                             }));
        PTS_RETURN_IF_ERROR(check(what));
        return s;
      };
    };
    const std::string v = HumanBytes(o.redis_value);
    methods.emplace_back(Method{Format("Redis GET x%llu of %s, 1 client, one at a time",
                                       static_cast<unsigned long long>(bytes / o.redis_value), v.c_str()),
                                "redis_1_sequential", get("Redis GET, sequential", 1, 1)});
    methods.emplace_back(Method{Format("Redis GET, 1 client, pipelined (depth %d)", o.redis_depth), "redis_1_pipelined",
                                get("Redis GET, pipelined", o.redis_depth, 1)});
    methods.emplace_back(Method{Format("Redis GET, 2 clients, pipelined (depth %d)", o.redis_depth),
                                "redis_2_pipelined", get("Redis GET, 2 clients", o.redis_depth, 2)});
  }
#endif
  const size_t n_baselines = methods.size();
  for (auto& up : pcs) {
    PathCluster* pcp = up.get();  // the lambdas outlive this loop: capture the pointer
    PathCluster& pc = *pcp;
    const std::string tag = "[" + pc.path + "] ";
    methods.emplace_back(Method{tag + "Client::Load on node B (remote fetch)", pc.path + ":remote_load",
                                [&, tag, pcp]() -> Result<double> {
                                  PathCluster& pc = *pcp;
                                  poison(0x21);
                                  PTS_ASSIGN_OR_RETURN(double s, remote(pc, "load", [&] {
                                                         return pc.b->Load(kNs, tokens, dst.data(), bytes);
                                                       }));
                                  PTS_RETURN_IF_ERROR(check(tag + "Client::Load on node B"));
                                  return s;
                                }});
    methods.emplace_back(Method{tag + "Pin + CopyTo + Release on node B", pc.path + ":remote_pin_copy",
                                [&, tag, pcp]() -> Result<double> {
                                  PathCluster& pc = *pcp;
                                  poison(0x22);
                                  double pin_s = 0, copy_s = 0;
                                  PTS_ASSIGN_OR_RETURN(double s, remote(pc, "pin", [&]() -> Result<uint64_t> {
                                                         auto t0 = Clock::now();
                                                         PTS_ASSIGN_OR_RETURN(PinnedPrefix p, pc.b->Pin(kNs, tokens));
                                                         pin_s = SecondsSince(t0);
                                                         if (p.tokens() != tokens_n) return p.tokens();
                                                         t0 = Clock::now();
                                                         PTS_RETURN_IF_ERROR(p.CopyTo(dst.data(), bytes));
                                                         copy_s = SecondsSince(t0);
                                                         PTS_RETURN_IF_ERROR(p.Release());
                                                         return p.tokens();
                                                       }));
                                  PTS_RETURN_IF_ERROR(check(tag + "Pin + CopyTo on node B"));
                                  pc.pin_s.push_back(pin_s);
                                  pc.copy_s.push_back(copy_s);
                                  return s;
                                }});
    methods.emplace_back(Method{tag + "Client::Load on node A (owner, local DRAM; reference)", pc.path + ":local_load",
                                [&, tag, pcp]() -> Result<double> {
                                  PathCluster& pc = *pcp;
                                  poison(0x23);
                                  uint64_t got = 0;
                                  PTS_ASSIGN_OR_RETURN(double s, timed({pc.cluster->node(0).pid()}, [&]() -> Status {
                                                         PTS_ASSIGN_OR_RETURN(got, pc.a->Load(kNs, tokens, dst.data(), bytes));
                                                         return Status::OK();
                                                       }));
                                  if (got != tokens_n) return Internal("the local load on node A was short");
                                  PTS_RETURN_IF_ERROR(check(tag + "Client::Load on node A"));
                                  return s;
                                }});
  }

  // Untimed warm-up of every method (checked), then the repetitions, each
  // running every method, starting with a different one each time.
  for (Method& m : methods) {
    Result<double> r = m.run();
    if (!r.ok()) return fail_logs(r.status().WithContext("warm-up: " + m.name));
  }
  for (auto& pc : pcs) {
    pc->fetch_s.clear();
    pc->pin_s.clear();
    pc->copy_s.clear();
    PTS_ASSIGN_OR_RETURN(pc->m0, ClusterMetrics::Read(pc->metrics_b));
    pc->loads_before = pc->remote_loads;
  }
  for (int rep = 0; rep < o.reps; ++rep) {
    const size_t first = static_cast<size_t>(rep) * 3 % methods.size();
    for (size_t k = 0; k < methods.size(); ++k) {
      Method& m = methods[(k + first) % methods.size()];
      last_cpu = 0;
      Result<double> r = m.run();
      if (!r.ok()) return fail_logs(r.status().WithContext(m.name));
      m.cpu.push_back(last_cpu);
      m.seconds.push_back(*r);
    }
  }
  auto find = [&](const std::string& key) -> const Method& {
    for (const Method& m : methods) {
      if (m.key == key) return m;
    }
    return methods[0];
  };
  const Method& base = find("raw_tcp_1");
  const Method& base2 = find("raw_tcp_2");
  const Method* redis_best = nullptr;
  for (size_t i = 0; i < n_baselines; ++i) {
    const Method& m = methods[i];
    if (m.key.rfind("redis", 0) == 0 && (redis_best == nullptr || P50(m.seconds) < P50(redis_best->seconds))) {
      redis_best = &m;
    }
  }
  const double base_p50 = P50(base.seconds);

  Table t({"method", "median GB/s", "min GB/s", "max GB/s", "median ms", "x raw TCP", "x raw TCP, paired",
           "CPU s", "CPU x raw TCP"});
  const double base_cpu = P50(base.cpu);
  auto row = [&](const Method& m) {
    const Summary s = Summarize(m.seconds);
    t.Row({m.name, Format("%.2f", GBps(bytes, s.p50)), Format("%.2f", GBps(bytes, s.max)),
           Format("%.2f", GBps(bytes, s.min)), Format("%.1f", s.p50 * 1e3), Ratio(base_p50 / s.p50),
           Ratio(Paired(base, m)), Format("%.2f", P50(m.cpu)), Ratio(P50(m.cpu) / base_cpu)});
  };
  auto part = [&](const char* name, const std::vector<double>& v) {
    const Summary f = Summarize(v);
    t.Row({name, Format("%.2f", GBps(bytes, f.p50)), "", "", Format("%.1f", f.p50 * 1e3), Ratio(base_p50 / f.p50), "",
           "", ""});
  };
  for (size_t i = 0; i < n_baselines; ++i) row(methods[i]);
  json jpaths;
  std::string verdicts;
  for (auto& up : pcs) {
    PathCluster& pc = *up;
    PTS_ASSIGN_OR_RETURN(ClusterMetrics m1, ClusterMetrics::Read(pc.metrics_b));
    const ClusterMetrics dm = m1 - pc.m0;
    const uint64_t timed = pc.remote_loads - pc.loads_before;
    const bool rma = pc.path.rfind("rma", 0) == 0;
    const double on_path = rma ? dm.bytes_rma : dm.bytes_tcp;
    if (on_path != static_cast<double>(timed * bytes)) {
      return fail_logs(Internal(Format("%s: node B fetched %.0f bytes over its path (tcp %.0f, rma %.0f) for %llu loads "
                                       "of %llu",
                                       pc.path.c_str(), on_path, dm.bytes_tcp, dm.bytes_rma,
                                       static_cast<unsigned long long>(timed),
                                       static_cast<unsigned long long>(bytes))));
    }
    PTS_ASSIGN_OR_RETURN(StoreStats sa, pc.a->Stats());
    PTS_ASSIGN_OR_RETURN(StoreStats sb, pc.b->Stats());
    if (sb.replicas_kept != 0) return Internal(pc.path + ": node B kept a replica: not every load was a remote fetch");
    const Method& load = find(pc.path + ":remote_load");
    const Method& pin = find(pc.path + ":remote_pin_copy");
    t.Separator();
    row(load);
    part("  of which node B's fetch RPC (its metrics)", pc.fetch_s["load"]);
    row(pin);
    part("  of which Pin (the fetch into B's arena)", pc.pin_s);
    part("  of which node B's fetch RPC (its metrics)", pc.fetch_s["pin"]);
    part("  of which CopyTo (B's arena -> buffer)", pc.copy_s);
    row(find(pc.path + ":local_load"));

    PathResult r;
    r.path = pc.path;
    r.load_vs_tcp = Paired(base, load);
    r.pin_vs_tcp = Paired(base, pin);
    if (redis_best) {
      r.has_redis = true;
      r.load_vs_redis = Paired(*redis_best, load);
      r.pin_vs_redis = Paired(*redis_best, pin);
    }
    results->push_back(r);
    auto verdict = [&](const std::string& what, double paired_r, double medians_r, double target) {
      verdicts += Format("  %-58s %.2f paired, %.2f of medians (target >= %.1f): %s\n", what.c_str(), paired_r, medians_r,
                         target, paired_r >= target ? "met" : "MISSED");
    };
    verdicts += Format("%s: node B made %.0f fetch requests, %s over %s (mean %.1f ms each); node A served %s to "
                       "peers\n",
                       pc.path.c_str(), dm.fetch_requests, HumanBytes(static_cast<uint64_t>(on_path)).c_str(),
                       rma ? "rma" : "tcp", dm.fetch_count ? dm.fetch_sum_s / dm.fetch_count * 1e3 : 0.0,
                       HumanBytes(sa.peer_served_bytes).c_str());
    verdict("remote Client::Load / raw TCP (1 connection)", r.load_vs_tcp, OfMedians(base, load), 0.8);
    verdict("remote Pin + CopyTo / raw TCP (1 connection)", r.pin_vs_tcp, OfMedians(base, pin), 0.8);
    verdicts += Format("  %-58s %.2f paired, %.2f of medians\n", "remote Client::Load / raw TCP (2 connections)",
                       Paired(base2, load), OfMedians(base2, load));
    if (redis_best) {
      verdict("remote Client::Load / best Redis GET", r.load_vs_redis, OfMedians(*redis_best, load), 1.5);
      verdict("remote Pin + CopyTo / best Redis GET", r.pin_vs_redis, OfMedians(*redis_best, pin), 1.5);
    }
    json j;
    j["fetch_rpc_s"] = pc.fetch_s;
    j["pin_s"] = pc.pin_s;
    j["copy_s"] = pc.copy_s;
    j["load_vs_raw_tcp_1"] = {{"paired", r.load_vs_tcp}, {"of_medians", OfMedians(base, load)}};
    j["pin_copy_vs_raw_tcp_1"] = {{"paired", r.pin_vs_tcp}, {"of_medians", OfMedians(base, pin)}};
    j["load_vs_raw_tcp_2"] = {{"paired", Paired(base2, load)}, {"of_medians", OfMedians(base2, load)}};
    if (redis_best) {
      j["load_vs_best_redis"] = {{"paired", r.load_vs_redis}, {"of_medians", OfMedians(*redis_best, load)}};
      j["pin_copy_vs_best_redis"] = {{"paired", r.pin_vs_redis}, {"of_medians", OfMedians(*redis_best, pin)}};
    }
    j["peer_served_bytes_a"] = sa.peer_served_bytes;
    jpaths[pc.path] = j;
  }
  // The RMA paths against the TCP stream, in the same repetitions.
  std::string vs_tcp;
  const bool have_tcp = std::find(o.paths.begin(), o.paths.end(), "tcp") != o.paths.end();
  for (const std::string& path : o.paths) {
    if (!have_tcp || path == "tcp") continue;
    const Method& tl = find("tcp:remote_load");
    const Method& tp = find("tcp:remote_pin_copy");
    const Method& l = find(path + ":remote_load");
    const Method& p = find(path + ":remote_pin_copy");
    vs_tcp += Format("%s vs the TCP stream (throughput): Client::Load %.2f paired (%.2f of medians); Pin + CopyTo %.2f "
                     "paired (%.2f of medians); the fetch RPC alone %.2f of medians\n",
                     path.c_str(), Paired(tl, l), OfMedians(tl, l), Paired(tp, p), OfMedians(tp, p),
                     [&] {
                       PathCluster* a = nullptr;
                       PathCluster* b = nullptr;
                       for (auto& pc : pcs) {
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
  // The frame MACs' cost: the same TCP stream with them (tcp, peer protocol
  // 2) over without them (tcp-v1), in the same repetitions.
  if (have_tcp && std::find(o.paths.begin(), o.paths.end(), "tcp-v1") != o.paths.end()) {
    const Method& tl = find("tcp:remote_load");
    const Method& tp = find("tcp:remote_pin_copy");
    const Method& vl = find("tcp-v1:remote_load");
    const Method& vp = find("tcp-v1:remote_pin_copy");
    vs_tcp += Format("frame integrity (tcp, peer protocol 2: GMAC on every frame and on the fetched bytes) / without "
                     "(tcp-v1, protocol 1), throughput: Client::Load %.2f paired (%.2f of medians); Pin + CopyTo %.2f "
                     "paired (%.2f of medians)\n",
                     Paired(vl, tl), OfMedians(vl, tl), Paired(vp, tp), OfMedians(vp, tp));
    if (out) {
      (*out)["integrity_vs_none_load"] = {{"paired", Paired(vl, tl)}, {"of_medians", OfMedians(vl, tl)}};
      (*out)["integrity_vs_none_pin_copy"] = {{"paired", Paired(vp, tp)}, {"of_medians", OfMedians(vp, tp)}};
    }
  }
  if (out) {
    json jm;
    for (const Method& m : methods) {
      jm[m.key] = {{"name", m.name}, {"seconds", m.seconds}, {"cpu_seconds", m.cpu},
                   {"gbps_p50", GBps(bytes, P50(m.seconds))},
                   {"x_raw_tcp_1", {{"paired", Paired(base, m)}, {"of_medians", base_p50 / P50(m.seconds)}}}};
    }
    (*out)["methods"] = jm;
    (*out)["paths"] = jpaths;
    if (redis_best) (*out)["best_redis"] = redis_best->key;
  }
  if (!o.json) {
    std::printf("%s", t.ToString().c_str());
    std::printf("(x raw TCP: of the medians; paired: the median over the repetitions of each one's own ratio, which "
                "the verdicts use;\n CPU s: median CPU time, user + system, of this process and the servers that "
                "worked for the method (ptstored A and B, redis-server) during its timed part)\n%s",
                verdicts.c_str());
    if (redis_best) std::printf("best Redis row (by median): %s\n", redis_best->name.c_str());
    if (!vs_tcp.empty()) std::printf("\n%s", vs_tcp.c_str());
  }
  return Status::OK();
}

// ------------------------------------------------------- 4: lookups

Status RunLookups(const Options& o, json* out) {
  // A small geometry: a lookup's cost is in its tokens, not its bytes.
  Layout layout;
  layout.layers = 1;
  layout.kv_heads = 2;
  layout.head_dim = 32;
  layout.dtype = DType::kBF16;
  layout.block_tokens = 16;
  const uint64_t bpt = layout.BytesPerToken();
  const uint32_t n_tok = o.lookup_tokens / 16 * 16;
  constexpr size_t kNodes = 3;
  constexpr uint32_t kSelf = 1;  // the node whose client looks up; node 0 saves
  // Prompts by trying seeds until each class has its share.
  std::vector<std::vector<uint32_t>> local, remote;
  const size_t want = std::max<uint32_t>(o.lookup_prompts / 2, 2);
  for (uint64_t seed = 1; local.size() < want || remote.size() < want; ++seed) {
    std::vector<uint32_t> p = RandomTokens(90000 + seed, n_tok);
    auto& cls = ShardOfPrompt(kNs, p, layout.block_tokens, kNodes) == kSelf ? local : remote;
    if (cls.size() < want) cls.push_back(std::move(p));
  }
  const uint64_t stored = 2 * want * n_tok * bpt;
  const std::string arena = std::to_string(std::max<uint64_t>(64, (2 * stored >> 20) + 32)) + "MiB";
  // Without the shard's negative-answer cache, so that every lookup past
  // the stored prefix makes its RPC (what this section measures).
  PTS_ASSIGN_OR_RETURN(auto cluster, StartCluster(kNodes, arena, "tcp", 2, /*negative_ttl_ms=*/0));
  PTS_ASSIGN_OR_RETURN(NodeMetrics metrics, NodeMetrics::Find(cluster->node(kSelf)));
  PTS_ASSIGN_OR_RETURN(auto saver, cluster->Connect(0));
  PTS_ASSIGN_OR_RETURN(auto c, cluster->Connect(kSelf));
  PTS_RETURN_IF_ERROR(saver->CreateNamespace(kNs, layout).status());
  PTS_RETURN_IF_ERROR(c->CreateNamespace(kNs, layout).status());
  {
    std::vector<uint8_t> kv(n_tok * bpt);
    for (auto* cls : {&local, &remote}) {
      for (const auto& p : *cls) {
        FillKv(p, 0, bpt, kv.data());
        PTS_RETURN_IF_ERROR(saver->Save(kNs, p, kv.data(), kv.size()).status());
      }
    }
  }
  // Each class: samples (seconds) and the shard RPCs node 1 sent for them.
  struct Class {
    std::string name, key;
    std::vector<double> s;
    double rpcs = 0, local_shard = 0;
  };
  std::vector<Class> classes = {
      {"local shard, first lookup", "local_first", {}, 0, 0},
      {"remote shard, first lookup (1 RPC)", "remote_first", {}, 0, 0},
      {"local shard, again", "local", {}, 0, 0},
      {"remote shard, again (metadata cache)", "remote_cached", {}, 0, 0},
      {"local shard, prompt + 1 new block", "local_longer", {}, 0, 0},
      {"remote shard, prompt + 1 new block (1 RPC)", "remote_longer", {}, 0, 0},
  };
  auto one = [&](Class& cls, std::span<const uint32_t> prompt) -> Status {
    const auto t0 = Clock::now();
    PTS_ASSIGN_OR_RETURN(PrefixInfo info, c->Lookup(kNs, prompt));
    cls.s.push_back(SecondsSince(t0));
    if (info.matched_tokens != n_tok) {
      return Internal(Format("%s: a lookup matched %llu of the %u stored tokens", cls.name.c_str(),
                             static_cast<unsigned long long>(info.matched_tokens), n_tok));
    }
    return Status::OK();
  };
  auto batch = [&](Class& cls, const std::function<Status()>& body) -> Status {
    PTS_ASSIGN_OR_RETURN(ClusterMetrics m0, ClusterMetrics::Read(metrics));
    PTS_RETURN_IF_ERROR(body());
    PTS_ASSIGN_OR_RETURN(ClusterMetrics m1, ClusterMetrics::Read(metrics));
    cls.rpcs += (m1 - m0).shard_lookups;
    cls.local_shard += (m1 - m0).local_shard;
    return Status::OK();
  };
  // First lookups, the two classes interleaved.
  SplitMix64 rng(7);
  for (size_t i = 0; i < want; ++i) {
    PTS_RETURN_IF_ERROR(batch(classes[0], [&] { return one(classes[0], local[i]); }));
    PTS_RETURN_IF_ERROR(batch(classes[1], [&] { return one(classes[1], remote[i]); }));
  }
  // Then rounds of every repeatable class in turn.
  const uint32_t per_batch = 50;
  uint64_t fresh = 1;
  for (uint32_t done = 0; done < o.lookup_samples; done += per_batch) {
    const uint32_t n = std::min(per_batch, o.lookup_samples - done);
    for (size_t k = 2; k < classes.size(); ++k) {
      const auto& prompts = (k % 2 == 0) ? local : remote;
      const bool longer = k >= 4;
      PTS_RETURN_IF_ERROR(batch(classes[k], [&]() -> Status {
        for (uint32_t i = 0; i < n; ++i) {
          const auto& p = prompts[rng.Range(0, prompts.size() - 1)];
          if (!longer) {
            PTS_RETURN_IF_ERROR(one(classes[k], p));
            continue;
          }
          std::vector<uint32_t> q = p;
          const std::vector<uint32_t> block = RandomTokens(1000000 + fresh++, layout.block_tokens);
          q.insert(q.end(), block.begin(), block.end());
          PTS_RETURN_IF_ERROR(one(classes[k], q));
        }
        return Status::OK();
      }));
    }
  }
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
  // The classification must be the nodes' own: the local classes never
  // asked a shard, the remote first/longer ones always did.
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

// -------------------------------------------------- 5: weak scaling

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

Result<ScaleRow> RunScaleOnce(const Options& o, uint32_t nodes) {
  Layout layout = MistralLayout();
  layout.layers = 8;  // 32 KiB per token: documents of 8-32 MiB
  const uint64_t bpt = layout.BytesPerToken();
  const uint32_t bt = layout.block_tokens;
  const uint32_t docs = nodes * o.scale_docs;
  SplitMix64 shape(1234);
  std::vector<std::vector<uint32_t>> doc(docs);
  for (uint32_t d = 0; d < docs; ++d) {
    doc[d] = RandomTokens(500000 + d, shape.Range(o.min_doc, o.max_doc));
  }
  // Popularity: a fixed random order of the documents, Zipf over it.
  std::vector<uint32_t> by_rank(docs);
  std::iota(by_rank.begin(), by_rank.end(), 0u);
  for (uint32_t i = docs; i > 1; --i) std::swap(by_rank[i - 1], by_rank[shape.Range(0, i - 1)]);
  const Zipf zipf(docs, o.zipf);

  PTS_ASSIGN_OR_RETURN(auto cluster, StartCluster(nodes, o.scale_arena, o.scale_path, o.replicate_after));
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<NodeMetrics> metrics;
  for (uint32_t i = 0; i < nodes; ++i) {
    PTS_ASSIGN_OR_RETURN(auto c, cluster->Connect(i));
    PTS_RETURN_IF_ERROR(c->CreateNamespace(kNs, layout).status());
    clients.push_back(std::move(c));
    PTS_ASSIGN_OR_RETURN(NodeMetrics m, NodeMetrics::Find(cluster->node(i)));
    metrics.push_back(m);
  }
  const uint64_t max_tokens = o.max_doc + o.max_question + bt;
  // Every node saves its documents (document d: node d % nodes), at once.
  ScaleRow row;
  row.nodes = nodes;
  auto parallel = [&](const std::function<Status(uint32_t)>& body) -> Status {
    std::vector<Status> st(nodes);
    std::vector<std::thread> threads;
    for (uint32_t i = 0; i < nodes; ++i) threads.emplace_back([&, i] { st[i] = body(i); });
    for (auto& t : threads) t.join();
    for (uint32_t i = 0; i < nodes; ++i) {
      if (!st[i].ok()) return st[i].WithContext("node " + std::to_string(i));
    }
    return Status::OK();
  };
  const auto ts = Clock::now();
  PTS_RETURN_IF_ERROR(parallel([&](uint32_t i) -> Status {
    PTS_ASSIGN_OR_RETURN(HostBuffer buf, HostBuffer::Allocate(max_tokens * bpt));
    for (uint32_t d = i; d < docs; d += nodes) {
      const uint64_t whole = doc[d].size() / bt * bt;
      FillKv(std::span(doc[d]).first(whole), 0, bpt, buf.data());
      PTS_RETURN_IF_ERROR(clients[i]->Save(kNs, doc[d], buf.data(), whole * bpt).status());
    }
    return Status::OK();
  }));
  row.save_s = SecondsSince(ts);
  std::vector<ClusterMetrics> m0;
  std::vector<StoreStats> s0;
  for (uint32_t i = 0; i < nodes; ++i) {
    PTS_ASSIGN_OR_RETURN(ClusterMetrics m, ClusterMetrics::Read(metrics[i]));
    m0.push_back(m);
    PTS_ASSIGN_OR_RETURN(StoreStats s, clients[i]->Stats());
    s0.push_back(s);
  }
  // The requests: every node's client in its own thread, all at once.
  std::vector<NodeRun> runs(nodes);
  const auto t0 = Clock::now();
  PTS_RETURN_IF_ERROR(parallel([&](uint32_t i) -> Status {
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
  }));
  row.wall_s = SecondsSince(t0);
  std::vector<double> load_s, req_s;
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
  const Summary ls = Summarize(load_s), rs = Summarize(req_s);
  row.load_p50 = ls.p50;
  row.load_p99 = ls.p99;
  row.req_p50 = rs.p50;
  return row;
}

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
    if (g_node_log_level == "debug") {
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

// ------------------------------------------------------------------ main

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

int main(int argc, char** argv) {
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
  app.add_option("--node-log-level", g_node_log_level, "the nodes' --log-level (debug, info)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
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
    g_heartbeat_ms = 100;
    g_rpc_timeout_ms = 500;
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

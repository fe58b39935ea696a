// bench_scale: how the cluster's design behaves at hundreds of nodes
// (docs/scale.md). Two parts:
//
//  1. In one process, at 64..512 members, with the production code that
//     decides (rendezvous hashing, core/rendezvous.h; chain keys,
//     ptstore/keys.h; the peer messages' encodings, core/peer_messages.h):
//     shard balance, the load on the shard of hot roots under a Zipf
//     workload (without and with the rule that a node asks a shard only
//     until it holds the prefix), the roots that move when a member joins or
//     leaves, and the heartbeat and removal messages per node.
//  2. Real ptstored processes (2..16 on loopback ports, heartbeats every
//     100 ms): the CPU and threads each node spends on its peers, measured,
//     and what that gives at 512 members.
//
//   bench_scale                      # 64,128,256,512 members; 2,4,8,16 real nodes
//   bench_scale --quick              # small: for the test suite
#include <dirent.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <vector>

#include "bench/bench_util.h"
#include "core/peer_messages.h"
#include "core/rendezvous.h"
#include "core/wire.h"
#include "ptstore/keys.h"
#include "tests/testing/cluster.h"

namespace ptstore::bench {
namespace {

std::vector<uint32_t> Ids(size_t n) {
  std::vector<uint32_t> ids(n);
  std::iota(ids.begin(), ids.end(), 0);
  return ids;
}

// Roots of `count` distinct prompts (16-token first blocks of random tokens).
std::vector<ChainKey> Roots(size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<ChainKey> roots;
  roots.reserve(count);
  const ChainKey ns_root = RootKey("bench", "");
  std::vector<uint32_t> block(16);
  for (size_t i = 0; i < count; ++i) {
    for (auto& t : block) t = static_cast<uint32_t>(rng() % 128000);
    roots.push_back(NextKey(ns_root, block));
  }
  return roots;
}

template <typename Msg>
size_t WireBytes(const Msg& m) {
  core::Encoder e;
  m.Encode(e);
  return e.buffer().size() + core::kFrameHeaderBytes;
}

// Zipf(s) over n ranks by inverse CDF.
class Zipf {
 public:
  Zipf(size_t n, double s) : cdf_(n) {
    double sum = 0;
    for (size_t k = 0; k < n; ++k) cdf_[k] = (sum += 1.0 / std::pow(double(k + 1), s));
    for (auto& c : cdf_) c /= sum;
  }
  size_t operator()(std::mt19937_64& rng) const {
    const double u = std::uniform_real_distribution<double>(0, 1)(rng);
    return static_cast<size_t>(std::lower_bound(cdf_.begin(), cdf_.end(), u) - cdf_.begin());
  }
  double share(size_t k) const { return k == 0 ? cdf_[0] : cdf_[k] - cdf_[k - 1]; }

 private:
  std::vector<double> cdf_;
};

void ShardBalance(const std::vector<size_t>& sizes, size_t roots_n) {
  const auto roots = Roots(roots_n, 1);
  Table t({"members", "roots", "mean roots/shard", "max", "min", "max/mean", "stddev/mean"});
  for (size_t n : sizes) {
    const auto ids = Ids(n);
    std::vector<size_t> per(n);
    for (const ChainKey& r : roots) per[core::ShardOf(r, ids)]++;
    const double mean = double(roots.size()) / n;
    double var = 0;
    for (size_t c : per) var += (c - mean) * (c - mean);
    const double sd = std::sqrt(var / n);
    t.Row({std::to_string(n), std::to_string(roots.size()), Format("%.1f", mean),
           std::to_string(*std::max_element(per.begin(), per.end())),
           std::to_string(*std::min_element(per.begin(), per.end())),
           Format("%.2f", *std::max_element(per.begin(), per.end()) / mean), Format("%.3f", sd / mean)});
  }
  std::printf("Shard balance: roots per shard by rendezvous hashing (core::ShardOf)\n\n%s\n", t.ToString().c_str());
}

// Lookups arrive at random nodes for roots drawn Zipf(s). "every lookup":
// each asks the root's shard. "until held": the rule in Cluster::Refresh
// (a node whose index matches the whole prompt asks nobody) with replicas
// after `replicate_after` loads: a node asks a root's shard at most that
// many times, then holds the prefix itself (no eviction in this model).
void HotRoots(const std::vector<size_t>& sizes, size_t roots_n, size_t lookups, double s, uint32_t replicate_after) {
  const auto roots = Roots(roots_n, 2);
  const Zipf zipf(roots_n, s);
  Table t({"members", "lookups", "policy", "RPCs to shards", "max shard share", "max/mean shard", "hottest root share"});
  for (size_t n : sizes) {
    const auto ids = Ids(n);
    std::vector<uint32_t> shard_of(roots_n);
    for (size_t k = 0; k < roots_n; ++k) shard_of[k] = core::ShardOf(roots[k], ids);
    for (int policy = 0; policy < 2; ++policy) {
      std::mt19937_64 rng(3);
      std::vector<uint64_t> per(n);
      std::unordered_map<uint64_t, uint32_t> asked;  // (node, root) -> times asked
      uint64_t rpcs = 0;
      for (size_t i = 0; i < lookups; ++i) {
        const size_t k = zipf(rng);
        const uint32_t node = static_cast<uint32_t>(rng() % n);
        if (shard_of[k] == node) continue;  // its own shard: no RPC
        if (policy == 1) {
          uint32_t& a = asked[(uint64_t{node} << 32) | k];
          if (a >= replicate_after) continue;  // held here now
          a++;
        }
        per[shard_of[k]]++;
        rpcs++;
      }
      const uint64_t mx = *std::max_element(per.begin(), per.end());
      const double mean = double(rpcs) / n;
      t.Row({std::to_string(n), std::to_string(lookups), policy == 0 ? "every lookup asks" : "until held",
             std::to_string(rpcs), Format("%.4f", rpcs ? double(mx) / rpcs : 0.0),
             Format("%.1f", mean > 0 ? mx / mean : 0.0), Format("%.4f", zipf.share(0))});
    }
    t.Separator();
  }
  std::printf("Hot roots: %zu roots drawn Zipf(s=%.2f), lookups at random nodes, replicas after %u loads\n\n%s\n",
              roots_n, s, replicate_after, t.ToString().c_str());
}

void Churn(const std::vector<size_t>& sizes, size_t roots_n) {
  const auto roots = Roots(roots_n, 4);
  // What a node tells a root's new shard: the prefix (2048 tokens here) and who owns its blocks.
  core::ShardAnnounce one;
  one.ns.info.name = "llama-3-70b";
  one.entries.resize(1);
  one.entries[0].tokens.resize(2048);
  one.entries[0].ranges.resize(1);
  const size_t announce = WireBytes(one);
  Table t({"members", "join: roots moved", "1/(n+1)", "leave: roots moved", "1/n",
           "re-announced per node of 16k roots"});
  for (size_t n : sizes) {
    const auto ids = Ids(n);
    auto joined = Ids(n + 1);
    auto left = Ids(n);
    left.erase(left.begin() + static_cast<long>(n / 2));
    size_t moved_join = 0, moved_leave = 0;
    for (const ChainKey& r : roots) {
      const uint32_t s = core::ShardOf(r, ids);
      if (core::ShardOf(r, joined) != s) moved_join++;
      if (core::ShardOf(r, left) != s) moved_leave++;
    }
    const double fj = double(moved_join) / roots.size(), fl = double(moved_leave) / roots.size();
    t.Row({std::to_string(n), Format("%.4f", fj), Format("%.4f", 1.0 / (n + 1)), Format("%.4f", fl),
           Format("%.4f", 1.0 / n), Format("%.0f (%s)", 16384 * fj, HumanBytes(uint64_t(16384 * fj * announce)).c_str())});
  }
  std::printf("Membership churn: roots whose shard moves when one member joins or leaves\n\n%s\n", t.ToString().c_str());
}

void Messages(const std::vector<size_t>& sizes, int heartbeat_ms) {
  core::PeerPingReply reply;
  reply.fabric_provider = "tcp";
  const size_t ping = WireBytes(core::PeerPing{}), pong = WireBytes(reply);
  core::PeerRemove rm;
  rm.ns = "llama-3-70b";
  rm.tokens.resize(4096);
  const size_t remove = WireBytes(rm);
  Table t({"members", "pings sent+answered per node per s", "heartbeat bytes per node per s", "messages per removal",
           "removal bytes (4k-token prompt)"});
  for (size_t n : sizes) {
    const double per_s = 2.0 * double(n - 1) * 1000.0 / heartbeat_ms;
    t.Row({std::to_string(n), Format("%.0f", per_s),
           HumanBytes(uint64_t(double(n - 1) * 1000.0 / heartbeat_ms * 2 * (ping + pong))),
           std::to_string(n - 1), HumanBytes(uint64_t(n - 1) * remove)});
  }
  std::printf("Heartbeats (every %d ms, to every member) and removals (the shard sends each to every member)\n"
              "ping %zu B, reply %zu B, removal of a 4096-token prompt %zu B on the wire\n\n%s\n",
              heartbeat_ms, ping, pong, remove, t.ToString().c_str());
}

// CPU seconds (user + system) and threads of process `pid`.
std::pair<double, int> CpuAndThreads(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  std::istringstream in(line.substr(close + 2));
  std::string field;
  double ticks = 0;
  for (int i = 3; i <= 17 && in >> field; ++i) {
    if (i == 14 || i == 15) ticks += std::stod(field);
  }
  int threads = 0;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  while (std::getline(status, line)) {
    if (line.rfind("Threads:", 0) == 0) threads = std::stoi(line.substr(8));
  }
  return {ticks / double(sysconf(_SC_CLK_TCK)), threads};
}

Status RealNodes(const std::vector<size_t>& sizes, double seconds, int heartbeat_ms, std::vector<double>* cost_us,
                 std::vector<double>* threads_per_node) {
  Table t({"nodes", "pings/s per node (sent+answered)", "CPU per node", "CPU per ping (us)", "threads per node"});
  for (size_t n : sizes) {
    testing::TestCluster::Options o;
    o.nodes = n;
    o.arena_size = "16MiB";
    o.heartbeat_ms = heartbeat_ms;
    o.rpc_timeout_ms = 1000;
    o.extra_args = {"--no-prefault", "--log-level", "warn"};
    testing::TestCluster cluster(o);
    PTS_RETURN_IF_ERROR(cluster.Start());
    PTS_RETURN_IF_ERROR(cluster.WaitConverged(30000));
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::vector<std::pair<double, int>> before(n), after(n);
    for (size_t i = 0; i < n; ++i) before[i] = CpuAndThreads(cluster.node(i).pid());
    const auto t0 = Clock::now();
    std::this_thread::sleep_for(std::chrono::milliseconds(int(seconds * 1000)));
    const double wall = SecondsSince(t0);
    double cpu = 0, threads = 0;
    for (size_t i = 0; i < n; ++i) {
      after[i] = CpuAndThreads(cluster.node(i).pid());
      cpu += after[i].first - before[i].first;
      threads += after[i].second;
    }
    cpu /= n;
    threads /= n;
    const double pings_per_s = 2.0 * double(n - 1) * 1000.0 / heartbeat_ms;
    const double us = cpu / wall / pings_per_s * 1e6;
    cost_us->push_back(us);
    threads_per_node->push_back(threads);
    t.Row({std::to_string(n), Format("%.0f", pings_per_s), Format("%.2f%%", 100 * cpu / wall), Format("%.1f", us),
           Format("%.0f", threads)});
  }
  std::printf("Real ptstored nodes on loopback, heartbeats every %d ms, idle otherwise, %.0f s each\n\n%s\n",
              heartbeat_ms, seconds, t.ToString().c_str());
  return Status::OK();
}

}  // namespace
}  // namespace ptstore::bench

int main(int argc, char** argv) {
  using namespace ptstore::bench;
  CLI::App app{"bench_scale: the cluster at 64..512 members (docs/scale.md)"};
  std::vector<size_t> sizes = {64, 128, 256, 512};
  std::vector<size_t> real = {2, 4, 8, 16};
  size_t roots = 200000, lookups = 2000000;
  double zipf_s = 1.0, seconds = 5;
  bool quick = false;
  app.add_option("--members", sizes, "simulated member counts");
  app.add_option("--real-nodes", real, "real ptstored cluster sizes (empty: skip)");
  app.add_option("--roots", roots, "distinct prompt roots");
  app.add_option("--lookups", lookups, "lookups in the hot-root model");
  app.add_option("--zipf", zipf_s, "Zipf exponent of root popularity");
  app.add_option("--seconds", seconds, "measured seconds per real cluster");
  app.add_flag("--quick", quick, "small run for the test suite");
  CLI11_PARSE(app, argc, argv);
  if (quick) {
    sizes = {16, 64};
    real = {2, 3};
    roots = 20000;
    lookups = 100000;
    seconds = 1;
  }
  std::printf("bench_scale\nmachine: %s\n\n", MachineDescription().c_str());
  ShardBalance(sizes, roots);
  HotRoots(sizes, std::min<size_t>(roots, 100000), lookups, zipf_s, 2);
  Churn(sizes, roots);
  Messages(sizes, 500);
  if (!real.empty()) {
    std::vector<double> cost, threads;
    ptstore::Status st = RealNodes(real, seconds, 100, &cost, &threads);
    if (!st.ok()) {
      std::fprintf(stderr, "bench_scale: real nodes: %s\n", st.ToString().c_str());
      return 1;
    }
    // At 512 members, heartbeats every 500 ms (the default), with the cost
    // measured at the largest real cluster.
    const double us = cost.back();
    const double pings = 2.0 * 511 * 1000.0 / 500;
    const double slope = real.size() > 1 ? (threads.back() - threads.front()) / double(real.back() - real.front()) : 0;
    const double base = threads.front() - slope * double(real.front() - 1);
    std::printf("At 512 members, heartbeats every 500 ms: %.0f pings/s per node x %.1f us = %.1f%% of one core per "
                "node; threads per node %.0f (%.2f per peer measured, %.0f without peers)\n",
                pings, us, pings * us / 1e4, base + slope * 511, slope, base);
  }
  return 0;
}

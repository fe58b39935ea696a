// bench_kv_events: the KV-event stream's costs and what routing from it buys
// (docs/kv-events.md), all as ratios against baselines of the same run.
//
//   1. Save throughput with events on against off (target >= 0.98): into a
//      namespace a --events ptstored publishes against one the same server
//      excludes, and against a server without --events; rounds rotating
//      between the three, on --pairs fresh pairs of servers.
//   2. Events per second one node publishes while saving at full speed (the
//      events a subscriber of that node received, over the saves' time).
//   3. Lag from a save's reply to its BlockStored at a subscriber (p50, p99).
//   4. ptstore-sched's prefix index from the events (sched/event_index.h)
//      against the store's LocatePrefix (sched/store_index.h) on a 3-node
//      cluster under churn (saves and removals on every node meanwhile):
//      decisions per second, p99 decision latency, and how often the node
//      each one picks holds the prompt's first block by LocatePrefix right
//      after (the ground truth).
//
// Never asserts on time; exits non-zero on a wrong answer (a missing event).
#include <sys/resource.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <atomic>
#include <future>
#include <cstdio>
#include <iostream>
#include <msgpack.hpp>
#include <regex>
#include <thread>
#include <unordered_map>
#include <zmq.hpp>

#include "bench/bench_util.h"
#include "core/mutex.h"
#include "ptstore/client.h"
#include "ptstore/keys.h"
#include "sched/event_index.h"
#include "sched/store_index.h"
#include "tests/testing/cluster.h"

using namespace ptstore;
using namespace ptstore::bench;

namespace {

struct Options {
  int rounds = 6, saves = 400, decisions = 4000, pairs = 3;
  uint32_t tokens = 256;
  bool quick = false, print_rounds = false;
  int subscriber_nice = 0;
  std::string events_config;  // a config file for the server with events ([events] keys)
};

Layout SmallLayout() {
  Layout l;
  l.layers = 2;
  l.kv_heads = 4;
  l.head_dim = 64;
  l.dtype = DType::kBF16;
  l.block_tokens = 16;
  return l;  // 2 KiB per token
}

std::vector<uint32_t> Prompt(uint64_t seed, uint32_t n) {
  std::vector<uint32_t> t(n);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (auto& v : t) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    v = static_cast<uint32_t>(x % 32000);
  }
  return t;
}

bool Endpoints(const std::string& log, std::string* pub, std::string* replay) {
  static const std::regex re("kv events on (tcp://\\S+) replay (tcp://\\S+) incarnation");
  bool found = false;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it) {
    *pub = (*it)[1];
    *replay = (*it)[2];
    found = true;
  }
  return found;
}

// Receives BlockStored events and stamps the time each last block hash
// arrived; counts the batches of namespace `quiet` (there must be none).
class Stamper {
 public:
  // `nice`: the subscriber's thread and ZMQ's I/O thread run that many nice
  // levels below this process (0: beside the saves, at their priority).
  Stamper(const std::string& pub, int nice, const std::string& quiet) : quiet_topic_end_("@" + quiet) {
    std::promise<void> ready;
    thread_ = std::thread([this, pub, nice, &ready] {
      if (nice != 0) setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), std::min(19, nice));
      sub_ = zmq::socket_t(ctx_, zmq::socket_type::sub);  // starts ZMQ's I/O thread from this one
      sub_.set(zmq::sockopt::subscribe, "");
      sub_.set(zmq::sockopt::rcvhwm, 0);
      sub_.connect(pub);
      ready.set_value();
      Loop();
    });
    ready.get_future().wait();
  }
  ~Stamper() {
    stop_ = true;
    thread_.join();
  }
  uint64_t events() const { return events_; }
  uint64_t quiet_batches() const { return quiet_; }
  bool Arrival(uint64_t hash, Clock::time_point* t) EXCLUDES(mu_) {
    core::MutexLock lk(mu_);
    auto it = seen_.find(hash);
    if (it == seen_.end()) return false;
    *t = it->second;
    return true;
  }

 private:
  void Loop() EXCLUDES(mu_) {
    while (!stop_) {
      zmq::pollitem_t item{sub_.handle(), 0, ZMQ_POLLIN, 0};
      if (zmq::poll(&item, 1, std::chrono::milliseconds(20)) <= 0) continue;
      std::vector<zmq::message_t> f;
      do {
        zmq::message_t m;
        if (!sub_.recv(m, zmq::recv_flags::none)) break;
        f.push_back(std::move(m));
      } while (f.back().more());
      const auto now = Clock::now();
      if (f.size() != 3) continue;
      if (f[0].to_string().ends_with(quiet_topic_end_)) quiet_++;
      auto h = msgpack::unpack(static_cast<const char*>(f[2].data()), f[2].size());
      const auto& ev = h.get().via.array.ptr[1].via.array;
      core::MutexLock lk(mu_);
      for (uint32_t i = 0; i < ev.size; i++) {
        const auto& e = ev.ptr[i].via.array;
        if (e.size < 2 || std::string(e.ptr[0].via.str.ptr, e.ptr[0].via.str.size) != "BlockStored") continue;
        events_++;
        const auto& hashes = e.ptr[1].via.array;
        if (hashes.size > 0) seen_.emplace(hashes.ptr[hashes.size - 1].via.u64, now);
      }
    }
  }
  zmq::context_t ctx_;
  zmq::socket_t sub_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> events_{0}, quiet_{0};
  const std::string quiet_topic_end_;
  core::Mutex mu_;
  std::unordered_map<uint64_t, Clock::time_point> seen_ GUARDED_BY(mu_);
  std::thread thread_;
};

int Fail(const Status& s) {
  std::fprintf(stderr, "bench_kv_events: %s\n", s.ToString().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"bench_kv_events: KV events on vs off, events/s, lag, routing from events vs LocatePrefix"};
  app.add_option("--rounds", o.rounds, "rounds per server pair (each saves the three ways once, in a rotating order)");
  app.add_option("--pairs", o.pairs, "server pairs (events off, on), each fresh, one after the other")->check(CLI::Range(1, 100));
  app.add_option("--saves", o.saves, "saves per way and round");
  app.add_option("--tokens", o.tokens, "tokens per saved prompt (16-token blocks, 2 KiB per token)");
  app.add_option("--decisions", o.decisions, "routing decisions per index");
  app.add_flag("--quick", o.quick, "a small configuration (the suite's)");
  app.add_option("--subscriber-nice", o.subscriber_nice,
                 "nice levels for the in-process subscriber's threads (0: at the saves' priority; 10: a router "
                 "that takes only the cycles saves leave, as on its own cores)");
  app.add_option("--events-config", o.events_config, "ptstored config file for the server with events ([events])");
  app.add_flag("--print-rounds", o.print_rounds, "print every round's saves/s, server by server (where the noise is)");
  CLI11_PARSE(app, argc, argv);
  if (o.quick) o.rounds = 2, o.saves = 60, o.decisions = 300, o.pairs = 1;
  const Layout layout = SmallLayout();
  const uint32_t bt = layout.block_tokens;
  const uint64_t bytes = uint64_t{o.tokens} / bt * bt * layout.BytesPerToken();
  std::vector<uint8_t> kv(bytes, 0x5a);

  // ------------------------------------------------ 1-3: one node, on vs off
  // Three ways to save, rounds rotating between them: into a namespace that
  // a --events server publishes ("on"); into one that the same server
  // excludes (--events-exclude, "quiet": the same process, nothing
  // published); into a server without --events ("off"). On this VM a
  // ptstored is now and then faster or slower than another for its whole
  // life by 10-35% (its memory and where the scheduler puts its threads, not
  // its code), so on/quiet, in one process, is the figure; on/off, across
  // two, is printed beside it. `pairs` times with fresh servers; a figure is
  // the median over the pairs of each pair's median over rounds of the
  // ratio within a round.
  enum Way { kOn = 0, kQuiet = 1, kOff = 2 };
  const char* const kNs[3] = {"bench", "bench-quiet", "bench"};
  struct Sent {
    uint64_t seed;  // of the prompt
    Clock::time_point start, reply;
  };
  struct Phase {  // nobody subscribed, or one subscriber
    std::vector<double> rate[3];                 // every round's saves/s, pooled over pairs
    std::vector<double> pair_quiet, pair_off;    // per pair: median over rounds of on/quiet, on/off
  };
  Phase phases[2];
  std::vector<double> lag, lag_start;
  uint64_t seed = 1, missing = 0, events_on = 0;
  double on_seconds = 0;
  for (int pair = 0; pair < o.pairs; pair++) {
    testing::Daemon::Options so = ServerOptions("1GiB");
    auto off = testing::StartDaemon(so);
    if (!off.ok()) return Fail(off.status());
    so.extra_args = {"--events", "--events-exclude", kNs[kQuiet]};
    if (!o.events_config.empty()) so.extra_args.insert(so.extra_args.end(), {"--config", o.events_config});
    so.log_level = "info";
    auto on = testing::StartDaemon(so);
    if (!on.ok()) return Fail(on.status());
    std::string pub, replay;
    if (!Endpoints((*on)->LogTail(1 << 16), &pub, &replay)) return Fail(Internal("no 'kv events on' in the log"));
    ClientOptions co;
    co.socket_path = (*off)->socket_path();
    auto c_off = Client::Connect(co);
    co.socket_path = (*on)->socket_path();
    auto c_on = Client::Connect(co);
    if (!c_off.ok() || !c_on.ok()) return Fail(Unavailable("cannot connect"));
    Client* client[3] = {c_on->get(), c_on->get(), c_off->get()};
    for (int w : {kOn, kQuiet, kOff}) {
      if (Status s = client[w]->CreateNamespace(kNs[w], layout).status(); !s.ok()) return Fail(s);
    }
    std::vector<Sent> replied;
    // Round r runs the three ways in the order rotated by r (each way comes
    // first, second and third equally often); round -1 warms up, uncounted.
    auto rounds = [&](Phase* ph, bool record) -> Status {
      std::vector<double> rate[3];
      for (int r = -1; r < o.rounds; r++) {
        for (int k = 0; k < 3; k++) {
          const int w = (r + 3 + k) % 3;
          Client& c = *client[w];
          const bool stamp = record && w == kOn && r >= 0;
          const auto t0 = Clock::now();
          for (int i = 0; i < o.saves; i++) {
            auto p = Prompt(seed++, o.tokens);
            const auto start = Clock::now();
            auto res = c.Save(kNs[w], p, kv.data(), kv.size());
            if (!res.ok()) return res.status();
            // The prompt's last block hash is computed after the round: hashing here would slow the on rounds only.
            if (stamp) replied.push_back({seed - 1, start, Clock::now()});
          }
          const double secs = SecondsSince(t0);
          if (r >= 0) rate[w].push_back(o.saves / secs);
          if (stamp) on_seconds += secs;
          // Every store stays the same size: what was saved goes. The removals'
          // events and the round's last batch go out before the next round.
          PTS_RETURN_IF_ERROR(c.DropNamespace(kNs[w]).status());
          PTS_RETURN_IF_ERROR(c.CreateNamespace(kNs[w], layout).status());
          std::this_thread::sleep_for(std::chrono::milliseconds(5));
        }
      }
      std::vector<double> vs_quiet, vs_off;
      for (int r = 0; r < o.rounds; r++) {
        vs_quiet.push_back(rate[kOn][r] / rate[kQuiet][r]);
        vs_off.push_back(rate[kOn][r] / rate[kOff][r]);
      }
      ph->pair_quiet.push_back(Summarize(vs_quiet).p50);
      ph->pair_off.push_back(Summarize(vs_off).p50);
      for (int w : {kOn, kQuiet, kOff}) {
        ph->rate[w].insert(ph->rate[w].end(), rate[w].begin(), rate[w].end());
        if (o.print_rounds) {
          std::printf("pair %d, %s, %s:", pair, record ? "one subscriber" : "nobody subscribed",
                      w == kOn ? "on   " : w == kQuiet ? "quiet" : "off  ");
          for (double x : rate[w]) std::printf(" %.0f", x);
          std::printf("\n");
        }
      }
      return Status::OK();
    };
    if (Status s = rounds(&phases[0], false); !s.ok()) return Fail(s);  // nobody subscribed
    {
      Stamper stamper(pub, o.subscriber_nice, kNs[kQuiet]);
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      if (Status s = rounds(&phases[1], true); !s.ok()) return Fail(s);  // one subscriber
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      for (const Sent& x : replied) {
        Clock::time_point at;
        if (!stamper.Arrival(ChainKeys(RootKey(kNs[kOn], ""), Prompt(x.seed, o.tokens), bt).back().lo, &at)) {
          missing++;
          continue;
        }
        events_on++;
        lag.push_back(std::chrono::duration<double>(at - x.reply).count());
        lag_start.push_back(std::chrono::duration<double>(at - x.start).count());
      }
      if (stamper.quiet_batches() != 0) {
        std::fprintf(stderr, "bench_kv_events: %llu batches of the excluded namespace were published\n",
                     static_cast<unsigned long long>(stamper.quiet_batches()));
        return 1;
      }
    }
    (*on)->Stop();
    (*off)->Stop();
  }
  auto list = [](const std::vector<double>& v) {
    std::string out;
    for (double x : v) out += (out.empty() ? "" : " ") + std::to_string(x).substr(0, 5);
    return out;
  };
  Summary s_lag = Summarize(lag), s_lag_start = Summarize(lag_start);
  std::printf("bench_kv_events: %s\n", MachineDescription().c_str());
  std::printf("saves: %u tokens (%s) per new prompt, %d server pairs x %d rounds x 3 ways x %d saves, rotating\n",
              o.tokens, HumanBytes(bytes).c_str(), o.pairs, o.rounds, o.saves);
  for (int i = 0; i < 2; i++) {
    const Phase& ph = phases[i];
    const Summary on_s = Summarize(ph.rate[kOn]), quiet_s = Summarize(ph.rate[kQuiet]), off_s = Summarize(ph.rate[kOff]);
    std::printf("  %s: saves/s median published %.0f (%.1f MB/s), excluded namespace %.0f, events-off server %.0f"
                " (rounds %.0f-%.0f)\n",
                i == 0 ? "no subscriber " : "one subscriber", on_s.p50, on_s.p50 * bytes / 1e6, quiet_s.p50,
                off_s.p50, std::min({on_s.min, quiet_s.min, off_s.min}), std::max({on_s.max, quiet_s.max, off_s.max}));
    std::printf("    events on / off, same server (published / excluded namespace): %.3f (pairs: %s) (target >= 0.98%s)\n",
                Summarize(ph.pair_quiet).p50, list(ph.pair_quiet).c_str(),
                i == 0 ? "" : ("; the subscriber runs in this process, on the same cores, at nice +" +
                               std::to_string(o.subscriber_nice)).c_str());
    std::printf("    events on / off, two servers (with / without --events): %.3f (pairs: %s)\n",
                Summarize(ph.pair_off).p50, list(ph.pair_off).c_str());
  }
  std::printf("  events published at full save speed: %.0f events/s (%llu events, %llu blocks each)\n",
              events_on / on_seconds, static_cast<unsigned long long>(events_on),
              static_cast<unsigned long long>(o.tokens / bt));
  std::printf("  lag save reply -> its event at a subscriber: p50 %.1f us, p99 %.1f us, max %.1f us (%zu samples;"
              " negative: the event came before the reply)\n",
              s_lag.p50 * 1e6, s_lag.p99 * 1e6, s_lag.max * 1e6, lag.size());
  std::printf("  lag save call -> its event at a subscriber: p50 %.1f us, p99 %.1f us (the save's own time included)\n",
              s_lag_start.p50 * 1e6, s_lag_start.p99 * 1e6);
  if (missing > 0) {
    std::fprintf(stderr, "bench_kv_events: %llu saves had no BlockStored event\n",
                 static_cast<unsigned long long>(missing));
    return 1;
  }

  // ------------------------------------ 4: routing from events vs LocatePrefix
  testing::TestCluster::Options cl;
  cl.nodes = 3;
  cl.arena_size = "256MiB";
  cl.extra_args = {"--events"};
  testing::TestCluster cluster(cl);
  if (Status s = cluster.Start(); !s.ok()) return Fail(s);
  if (Status s = cluster.WaitConverged(); !s.ok()) return Fail(s);
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<sched::StoreIndex::Node> nodes;
  std::vector<sched::EventIndex::Source> sources;
  for (uint32_t i = 0; i < 3; i++) {
    auto c = cluster.Connect(i);
    if (!c.ok()) return Fail(c.status());
    if (Status s = (*c)->CreateNamespace("bench", layout).status(); !s.ok()) return Fail(s);
    auto c2 = cluster.Connect(i);
    nodes.push_back({i, std::shared_ptr<Client>(std::move(*c2))});
    clients.push_back(std::move(*c));
    sched::EventIndex::Source src;
    src.node = i;
    if (!Endpoints(cluster.node(i).ReadLog(), &src.pub, &src.replay)) return Fail(Internal("no events endpoint"));
    sources.push_back(src);
  }
  const int families = 64;
  for (int f = 0; f < families; f++) {
    auto p = Prompt(100000 + f, o.tokens);
    if (Status s = clients[f % 3]->Save("bench", p, kv.data(), kv.size()).status(); !s.ok()) return Fail(s);
  }
  sched::StoreIndex store_index(nodes, /*cluster=*/true);
  sched::EventIndex event_index(sources, &store_index);
  for (int i = 0; i < 500 && !event_index.AllKnown(); i++) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::atomic<bool> stop{false};
  std::thread churn([&] {
    uint64_t k = 0;
    while (!stop) {  // a family moves: removed from where it was, saved on another node
      const int f = static_cast<int>(k % families);
      auto p = Prompt(100000 + f, o.tokens);
      (void)clients[(f + k / families) % 3]->Remove("bench", p);
      (void)clients[(f + k / families + 1) % 3]->Save("bench", p, kv.data(), kv.size());
      k++;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  });
  auto truth_client = cluster.Connect(0);
  if (!truth_client.ok()) return Fail(truth_client.status());
  struct Result_ {
    double per_s = 0, p99_us = 0, p50_us = 0;
    double holder = 0;
  };
  auto run = [&](sched::PrefixIndex& index) -> Result<Result_> {
    std::vector<double> lat;
    uint64_t holder = 0;
    const auto t0 = Clock::now();
    double spent = 0;
    for (int d = 0; d < o.decisions; d++) {
      auto p = Prompt(100000 + d % families, o.tokens);
      const auto a = Clock::now();
      PTS_ASSIGN_OR_RETURN(PrefixLocation loc, index.Locate("bench", p));
      uint32_t best = 0;
      uint64_t best_held = 0;
      for (uint32_t n = 0; n < 3; n++) {
        if (loc.HeldBy(n) > best_held) best = n, best_held = loc.HeldBy(n);
      }
      const double dt = std::chrono::duration<double>(Clock::now() - a).count();
      lat.push_back(dt);
      spent += dt;
      PTS_ASSIGN_OR_RETURN(PrefixLocation truth, (*truth_client)->LocatePrefix("bench", p));
      if (best_held > 0 && truth.HeldBy(best) > 0) holder++;
    }
    (void)t0;
    Summary s = Summarize(lat);
    return Result_{o.decisions / spent, s.p99 * 1e6, s.p50 * 1e6, double(holder) / o.decisions};
  };
  auto r_events = run(event_index);
  auto r_rpc = run(store_index);
  stop = true;
  churn.join();
  if (!r_events.ok()) return Fail(r_events.status());
  if (!r_rpc.ok()) return Fail(r_rpc.status());
  auto st = event_index.stats();
  std::printf("routing on a 3-node cluster, %d prompt families of %u tokens moving between nodes (churn):\n",
              families, o.tokens);
  std::printf("  from events:       %.0f decisions/s, p50 %.1f us, p99 %.1f us, routed to a holder %.1f%%\n",
              r_events->per_s, r_events->p50_us, r_events->p99_us, 100 * r_events->holder);
  std::printf("  from LocatePrefix: %.0f decisions/s, p50 %.1f us, p99 %.1f us, routed to a holder %.1f%%\n",
              r_rpc->per_s, r_rpc->p50_us, r_rpc->p99_us, 100 * r_rpc->holder);
  std::printf("  ratio events/LocatePrefix: %.1fx decisions/s, p99 latency 1/%.0f; event index answered %llu, fell back"
              " %llu; gaps %llu, replays %llu\n",
              r_events->per_s / r_rpc->per_s, r_rpc->p99_us / r_events->p99_us,
              static_cast<unsigned long long>(st.from_events), static_cast<unsigned long long>(st.from_fallback),
              static_cast<unsigned long long>(st.gaps), static_cast<unsigned long long>(st.replays));
  return 0;
}

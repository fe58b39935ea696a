// ptstore-sched: the global scheduler as a service (see man/ptstore-sched.8).
#include <signal.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/command_line.h"
#include "core/logging.h"
#include "core/signals.h"
#include "ptstore/client.h"
#include "ptstore/options.h"
#include "sched/cost_model.h"
#include "sched/scheduler.h"
#include "sched/service.h"
#include "sched/event_index.h"
#include "sched/store_index.h"

using namespace ptstore;

namespace {

// "ADDR:PORT", "[V6]:PORT" or ":PORT" (127.0.0.1).
Status ParseListen(const std::string& listen, std::string* host, uint16_t* port) {
  std::string p;
  if (!listen.empty() && listen[0] == '[') {
    size_t close = listen.find(']');
    if (close == std::string::npos || close + 1 >= listen.size() || listen[close + 1] != ':') {
      return InvalidArgument("--listen '" + listen + "': expected [ADDRESS]:PORT");
    }
    *host = listen.substr(1, close - 1);
    p = listen.substr(close + 2);
  } else {
    size_t colon = listen.rfind(':');
    if (colon == std::string::npos || listen.find(':') != colon) {
      return InvalidArgument("--listen '" + listen + "': expected ADDRESS:PORT (an IPv6 address as [ADDRESS]:PORT)");
    }
    *host = colon == 0 ? "127.0.0.1" : listen.substr(0, colon);
    p = listen.substr(colon + 1);
  }
  if (p.empty() || p.size() > 5 || p.find_first_not_of("0123456789") != std::string::npos || std::stoul(p) > 65535) {
    return InvalidArgument("--listen '" + listen + "': the port must be a number 0..65535");
  }
  *port = static_cast<uint16_t>(std::stoul(p));
  return Status::OK();
}

// "NODE=SOCKET".
Status ParseStore(const std::string& s, uint32_t* node, std::string* socket) {
  size_t eq = s.find('=');
  if (eq == std::string::npos || eq == 0 || eq + 1 == s.size()) {
    return InvalidArgument("--store '" + s + "': expected NODE=SOCKET (a node id and its ptstored socket path)");
  }
  std::string id = s.substr(0, eq);
  if (id.size() > 8 || id.find_first_not_of("0123456789") != std::string::npos || std::stoul(id) >= (1u << 24)) {
    return InvalidArgument("--store '" + s + "': the node id must be a number below 2^24");
  }
  *node = static_cast<uint32_t>(std::stoul(id));
  *socket = s.substr(eq + 1);
  return Status::OK();
}

// The command line (man/ptstore-sched.8).
struct Flags {
  std::string listen = "127.0.0.1:7600";
  std::string policy_name = "prefix";
  double load_bound_s = -1;
  std::string profiles;
  std::string model = "mistral-7b", gpu = "h100-80g";
  std::string remote_path = "rma";
  std::vector<std::string> stores;
  bool cluster = false;
  int threads = 4;
  std::string log_level;
  std::vector<std::string> events;

  // Declares the flags on `app`, each bound to its field, with its default.
  void AddTo(CLI::App& app);
};

void Flags::AddTo(CLI::App& app) {
  app.add_option("--listen", listen, "ADDRESS:PORT of the HTTP API (port 0: any free one)")->capture_default_str();
  app.add_option("--policy", policy_name, "round-robin, least-load, session or prefix")->capture_default_str();
  app.add_option("--load-bound", load_bound_s,
                 "prefix: give up locality when the best instance's queue exceeds the least loaded one's by more "
                 "than this many seconds (negative: by more than locality saves, by the cost model)")
      ->capture_default_str();
  app.add_option("--profiles", profiles, "cost-model profiles file (TOML; default: the installed profiles.toml)");
  app.add_option("--model", model, "the model's profile name")->capture_default_str();
  app.add_option("--gpu", gpu, "the GPU's profile name")->capture_default_str();
  app.add_option("--remote-path", remote_path, "how remote prefixes load: rma or tcp")->capture_default_str();
  app.add_option("--store", stores, "NODE=SOCKET: the ptstored of node NODE (its client socket), repeatable");
  app.add_option("--events", events,
                 "NODE=PUB,REPLAY: node NODE's KV-event endpoints (docs/kv-events.md), repeatable: route from "
                 "the events, asking the --store daemons only while a stream is unknown");
  app.add_flag("--cluster", cluster, "the --store daemons form one cluster (ask one for all)");
  app.add_option("--threads", threads, "threads answering requests")->check(CLI::Range(1, 256))->capture_default_str();
  app.add_option("--log-level", log_level, "debug (a line per route), info, warn or error");
}

// What the flags say about routing and listening, checked before anything
// starts: the log level (set here), the policy, the remote path, --listen
// and the --store list. A bad flag is InvalidArgument naming it (a usage
// error).
Status ParseFlags(const Flags& f, sched::SchedulerOptions* opts, std::string* host, uint16_t* port,
                  std::map<uint32_t, std::string>* sockets) {
  if (!f.log_level.empty()) {
    core::LogLevel level;
    if (!core::ParseLogLevel(f.log_level, &level)) {
      return InvalidArgument("--log-level '" + f.log_level + "': expected debug, info, warn or error");
    }
    core::SetLogLevel(level);
  }
  Result<sched::Policy> policy = sched::ParsePolicy(f.policy_name);
  if (!policy.ok()) return policy.status().WithContext("--policy");
  opts->policy = *policy;
  opts->load_bound_s = f.load_bound_s;
  Result<sched::LoadPath> remote = sched::ParseRemotePath(f.remote_path);
  if (!remote.ok()) return remote.status().WithContext("--remote-path");
  opts->remote_path = *remote;
  PTS_RETURN_IF_ERROR(ParseListen(f.listen, host, port));
  for (const std::string& s : f.stores) {
    uint32_t node = 0;
    std::string socket;
    PTS_RETURN_IF_ERROR(ParseStore(s, &node, &socket));
    if (!sockets->emplace(node, socket).second) {
      return InvalidArgument("--store: node " + std::to_string(node) + " is given twice");
    }
  }
  return Status::OK();
}

// A client of each --store daemon, in node order; the first that cannot be
// reached fails with its flag as context.
Result<std::vector<sched::StoreIndex::Node>> ConnectStores(const std::map<uint32_t, std::string>& sockets,
                                                           int threads) {
  std::vector<sched::StoreIndex::Node> nodes;
  for (const auto& [node, socket] : sockets) {
    ClientOptions co;
    co.socket_path = socket;
    co.client_name = "ptstore-sched";
    co.want_mapping = false;
    co.rpc_timeout_ms = 2000;  // a stuck store costs a route this much, then it routes without locality
    co.max_connections = threads;
    co.staging_bytes = 1 << 20;
    Result<std::unique_ptr<Client>> c = Client::Connect(co);
    if (!c.ok()) return c.status().WithContext("--store " + std::to_string(node) + "=" + socket);
    nodes.push_back({node, std::shared_ptr<Client>(std::move(*c))});
  }
  return nodes;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ptstore-sched: the PTStore global scheduler (routes requests to serving instances; HTTP + JSON)"};
  Flags flags;
  flags.AddTo(app);
  if (std::optional<int> rc = core::ParseCommandLine(app, argc, argv)) return *rc;

  core::SetLogProgramName("ptstore-sched");
  auto usage = [](const Status& st) {
    std::fprintf(stderr, "ptstore-sched: %s\n", st.message().c_str());
    return 2;
  };
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "ptstore-sched: %s\n", st.ToString().c_str());
    return 1;
  };
  sched::SchedulerOptions opts;
  std::string host;
  uint16_t port = 0;
  std::map<uint32_t, std::string> sockets;
  if (Status st = ParseFlags(flags, &opts, &host, &port, &sockets); !st.ok()) return usage(st);
  const std::string profiles = flags.profiles.empty() ? sched::DefaultProfilesPath() : flags.profiles;
  Result<sched::CostModel> cost = sched::CostModel::Load(profiles, flags.model, flags.gpu);
  if (!cost.ok()) return fail(cost.status().WithContext("cost model"));
  opts.cost = std::move(*cost);

  // Signals are taken by sigwait below; block them before any thread starts.
  const sigset_t sigs = core::BlockStopSignals();

  Result<std::vector<sched::StoreIndex::Node>> nodes = ConnectStores(sockets, flags.threads);
  if (!nodes.ok()) return fail(nodes.status());
  std::unique_ptr<sched::StoreIndex> index;
  if (!nodes->empty()) {
    index = std::make_unique<sched::StoreIndex>(std::move(*nodes), flags.cluster);
  } else if (opts.policy == sched::Policy::kPrefixLocality) {
    PTS_WARN("main", "policy prefix without --store: no locality is known, requests route least-load");
  }
  std::vector<sched::EventIndex::Source> sources;
  for (const std::string& e : flags.events) {
    Result<sched::EventIndex::Source> src = sched::EventIndex::ParseSource(e);
    if (!src.ok()) return usage(src.status().WithContext("--events"));
    sources.push_back(*src);
  }
  std::unique_ptr<sched::EventIndex> event_index;
  sched::PrefixIndex* prefix_index = index.get();
  if (!sources.empty()) {
    event_index = std::make_unique<sched::EventIndex>(std::move(sources), index.get());
    prefix_index = event_index.get();
    PTS_INFO("main", "routing from the KV events of " << flags.events.size() << " node(s)");
  }
  sched::Scheduler scheduler(opts, prefix_index);

  sched::SchedServiceOptions so;
  so.bind = host;
  so.port = port;
  so.handler_threads = flags.threads;
  sched::SchedService service(&scheduler, so);
  if (Status st = service.Start(); !st.ok()) return fail(st.WithContext("--listen " + flags.listen));
  PTS_INFO("main", "policy " << sched::PolicyName(opts.policy) << ", load bound " << opts.load_bound_s << " s, "
                             << opts.cost.profile().model << " on " << opts.cost.profile().gpu << ", remote path "
                             << sched::LoadPathName(opts.remote_path) << ", " << sockets.size() << " store(s)"
                             << (flags.cluster ? " (one cluster)" : ""));
  PTS_INFO("main", "listening on http://" << service.address());

  core::WaitForStopSignal(sigs);
  service.Stop();
  return 0;
}

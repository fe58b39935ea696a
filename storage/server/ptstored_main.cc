// ptstored: the PTStore node server (see man/ptstored.8).
#include <signal.h>
#include <sys/stat.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <vector>

#include "core/command_line.h"
#include "core/logging.h"
#include "core/sd_notify.h"
#include "core/signals.h"
#include "storage/server/config.h"
#include "storage/cluster/etcd_membership.h"
#include "storage/events/kv_event_publisher.h"
#include "storage/server/kv_query.h"
#include "storage/cluster/cluster_metrics.h"
#include "storage/server/metrics.h"
#include "storage/server/metrics_http.h"
#include "storage/server/node.h"
#include "storage/server/server.h"
#include "storage/cache/store.h"

using namespace ptstore;

namespace {

// The command line (man/ptstored.8). A flag given overrides the config file.
struct Flags {
  std::string config_path, socket, arena_size, group, log_level;
  std::optional<double> replica_share;
  std::optional<uint32_t> node_id;
  bool no_prefault = false;
  std::string ssd_dir, ssd_capacity, ssd_sync;
  bool ssd_compress = false;
  std::string metrics_port, metrics_bind;
  std::string cluster_file, secret_file, data_path, fabric_provider, advertise;
  std::optional<uint32_t> replicate_after;
  bool events = false;
  std::optional<uint16_t> events_port, events_replay_port;
  std::string events_bind;
  std::vector<std::string> events_exclude;

  // Declares the flags on `app`, each bound to its field.
  void AddTo(CLI::App& app);
  // The flags given, over `cfg` (the defaults and the config file).
  // InvalidArgument names the flag that does not parse.
  Status ApplyTo(storage::DaemonConfig* cfg) const;
};

void Flags::AddTo(CLI::App& app) {
  app.set_version_flag("--version", std::string("ptstored ") + PTSTORE_VERSION);
  app.add_option("-c,--config", config_path, "TOML config file (see ptstored(8))")->check(CLI::ExistingFile);
  app.add_option("-s,--socket", socket, "unix socket path for local clients");
  app.add_option("--arena-size", arena_size, "DRAM arena size, e.g. 4GiB");
  app.add_option("--replica-share", replica_share, "largest share of the arena replicas may use (0..1)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--node-id", node_id, "this node's id in the cluster")->check(CLI::Range(0u, (1u << 24) - 1));
  app.add_option("--group", group, "store group: its members get the zero-copy arena mapping");
  app.add_option("--log-level", log_level, "debug, info, warn or error");
  app.add_flag("--no-prefault", no_prefault, "do not touch the arena's pages at start (slower first use)");
  app.add_option("--ssd-dir", ssd_dir, "data directory of the SSD tier (segment files)");
  app.add_option("--ssd-capacity", ssd_capacity, "bytes the SSD tier may take, e.g. 100GiB");
  app.add_flag("--ssd-compress", ssd_compress, "byte-shuffle + zstd the payloads written to SSD");
  app.add_option("--ssd-sync", ssd_sync, "when SSD writes are made durable: none, segment or record");
  app.add_option("--metrics-port", metrics_port, "serve Prometheus metrics on this TCP port (auto: any free one; 0: off)");
  app.add_option("--metrics-bind", metrics_bind, "address of the metrics port (default 127.0.0.1)");
  app.add_option("--cluster", cluster_file,
                 "cluster file (TOML [[node]] list or one host[:port] per line), or etcd://HOST:PORT[,...]/PREFIX: "
                 "join a cluster")
      ->check([](const std::string& v) {
        return storage::IsEtcdUrl(v) ? std::string() : CLI::ExistingFile(v);
      });
  app.add_option("--advertise", advertise, "with --cluster etcd://...: the HOST:PORT other nodes reach this one at");
  app.add_option("--secret-file", secret_file, "the cluster's shared secret (>= 32 bytes, mode 0600)");
  app.add_option("--data-path", data_path, "how remote loads move bytes: tcp (a stream) or rma (libfabric fi_read)");
  app.add_option("--fabric-provider", fabric_provider, "libfabric provider for --data-path rma (default tcp)");
  app.add_option("--replicate-after", replicate_after, "keep a fetched remote increment as a replica after this many loads (0: never)");
  app.add_flag("--events", events, "publish KV events (docs/kv-events.md) on ephemeral ports (logged)");
  app.add_option("--events-port", events_port, "KV events: the ZMQ PUB port (implies --events)");
  app.add_option("--events-replay-port", events_replay_port, "KV events: the ZMQ ROUTER replay port (implies --events)");
  app.add_option("--events-bind", events_bind, "KV events: the address to bind (default 127.0.0.1)");
  app.add_option("--events-exclude", events_exclude,
                 "KV events: namespaces (fnmatch patterns of their names, repeatable) that publish nothing; "
                 "added to [events] exclude");
}

Status Flags::ApplyTo(storage::DaemonConfig* cfg) const {
  if (!socket.empty()) cfg->server.socket_path = socket;
  if (!arena_size.empty()) {
    auto size = storage::ParseSize(arena_size);
    if (!size.ok()) return size.status().WithContext("--arena-size");
    cfg->store.arena_bytes = *size;
  }
  if (replica_share) cfg->store.replica_share = *replica_share;
  if (node_id) cfg->store.node_id = *node_id;
  if (!cluster_file.empty()) cfg->cluster.cluster_file = cluster_file;
  if (!secret_file.empty()) cfg->cluster.secret_file = secret_file;
  if (!advertise.empty()) cfg->cluster.advertise = advertise;
  if (!data_path.empty()) {
    auto p = storage::ParseDataPath(data_path);
    if (!p.ok()) return p.status().WithContext("--data-path");
    cfg->cluster.data_path = *p;
  }
  if (!fabric_provider.empty()) cfg->cluster.fabric_provider = fabric_provider;
  if (replicate_after) cfg->store.replicate_after = *replicate_after;
  // Owned data evicted with no copy left must leave the other nodes' indexes.
  cfg->store.track_lost = !cfg->cluster.cluster_file.empty();
  if (!group.empty()) cfg->trusted_group = group;
  if (!log_level.empty()) cfg->log_level = log_level;
  if (no_prefault) cfg->store.prefault = false;
  if (!ssd_dir.empty()) cfg->store.ssd.dir = ssd_dir;
  if (!ssd_capacity.empty()) {
    auto size = storage::ParseSize(ssd_capacity);
    if (!size.ok()) return size.status().WithContext("--ssd-capacity");
    cfg->store.ssd.capacity = *size;
  }
  if (ssd_compress) cfg->store.ssd.compress = true;
  if (!ssd_sync.empty()) {
    auto sync = storage::ParseSync(ssd_sync);
    if (!sync.ok()) return sync.status().WithContext("--ssd-sync");
    cfg->store.ssd.sync = *sync;
  }
  if (!metrics_port.empty()) {
    if (Status st = storage::ParseMetricsPort(metrics_port, &cfg->metrics); !st.ok()) {
      return st.WithContext("--metrics-port");
    }
  }
  if (!metrics_bind.empty()) cfg->metrics.bind = metrics_bind;
  if (events || events_port || events_replay_port) cfg->events.enabled = true;
  if (events_port) cfg->events.port = *events_port;
  if (events_replay_port) cfg->events.replay_port = *events_replay_port;
  if (!events_bind.empty()) cfg->events.bind = events_bind;
  for (const std::string& p : events_exclude) {
    if (p.empty()) return InvalidArgument("--events-exclude: a pattern must not be empty");
    cfg->events.exclude.push_back(p);
  }
  if (cfg->events.port != 0 && cfg->events.port == cfg->events.replay_port) {
    return InvalidArgument("the KV events' PUB and replay ports must differ");
  }
  return Status::OK();
}

// The daemon's configuration: the defaults, the config file (--config),
// the flags over them; then the checks (the SSD tier, the log level, which
// it sets, and the trusted group).
Status Configure(const Flags& flags, storage::DaemonConfig* cfg) {
  if (!flags.config_path.empty()) PTS_RETURN_IF_ERROR(storage::LoadConfigFile(flags.config_path, cfg));
  PTS_RETURN_IF_ERROR(flags.ApplyTo(cfg));
  PTS_RETURN_IF_ERROR(storage::CheckSsdConfig(*cfg));
  core::LogLevel level;
  if (!core::ParseLogLevel(cfg->log_level, &level)) {
    return InvalidArgument("log level '" + cfg->log_level + "' is not debug, info, warn or error");
  }
  core::SetLogLevel(level);
  return storage::ResolveTrustedGroup(cfg);
}

// The metrics endpoint (cfg.metrics): /metrics renders the node's, the
// server's and the cluster's counters; the KV query API answers beside it.
// `node`, `server` and `cfg` outlive `metrics`.
Status StartMetrics(storage::Node& node, storage::Server& server, const storage::DaemonConfig& cfg,
                    double start_time, storage::MetricsHttpServer* metrics) {
  storage::Store* node_store = &node.store();
  storage::Cluster* node_cluster = node.cluster();
  const storage::EtcdMembership* node_etcd = node.etcd();
  const storage::KvEventPublisher* events_pub = node.events();
  auto render = [node_store, node_cluster, node_etcd, events_pub, &server, &cfg, start_time] {
    storage::NodeMetrics info;
    info.node_id = cfg.store.node_id;
    info.version = PTSTORE_VERSION;
    info.start_time = start_time;
    info.sessions_open = server.sessions_open();
    info.sessions_total = server.sessions_served();
    info.sessions_refused = server.sessions_refused();
    core::PromWriter w;
    storage::AppendNodeMetrics(w, info);
    storage::AppendStoreMetrics(w, node_store->Stats());
    storage::AppendNamespaceMetrics(w, node_store->ListNamespaces());
    storage::AppendNamespaceQuotaMetrics(w, node_store->ListQuotas());
    if (node_cluster != nullptr) storage::AppendClusterMetrics(w, *node_cluster);
    if (node_etcd != nullptr) storage::AppendEtcdMetrics(w, node_etcd->counters());
    if (events_pub) storage::AppendKvEventMetrics(w, events_pub->Stats());
    if (!w.status().ok()) PTS_ERROR("metrics", w.status().ToString());
    return w.Take();
  };
  auto query = std::make_shared<storage::KvQuery>(node_store, node_cluster, cfg.events.codec.data_parallel_rank);
  auto handle = [query](const core::HttpRequest& req) { return query->Handle(req); };
  if (Status st = metrics->Start(cfg.metrics.bind, cfg.metrics.port, render, handle); !st.ok()) {
    return st.WithContext("metrics endpoint");
  }
  PTS_INFO("metrics", "metrics on http://" << metrics->address() << "/metrics");
  return Status::OK();
}

// Serves until a stop signal, telling the service manager (Type=notify)
// where it stands; SIGHUP reloads the cluster file.
void ServeUntilStopped(storage::Node& node, const storage::DaemonConfig& cfg, const sigset_t& sigs) {
  // The service manager (Type=notify) learns that the socket accepts and
  // the store is recovered (Store::Open scanned the SSD tier above).
  auto notify = [](const std::string& state) {
    if (Status st = core::SdNotify(state); !st.ok()) PTS_WARN("main", "notifying the service manager: " << st.ToString());
  };
  const std::string serving = "STATUS=serving on " + cfg.server.socket_path;
  auto members = [&node] {
    return node.cluster() ? "; " + std::to_string(node.member_count()) + " cluster members" : std::string();
  };
  notify("READY=1\n" + serving + members());

  // SIGHUP: the cluster file again (storage/cluster/cluster.h, Reload). A file that
  // cannot be applied is logged and changes nothing.
  auto on_hangup = [&] {
    if (!node.cluster() || node.etcd()) {  // nothing to reload: Reload says why
      PTS_INFO("main", "SIGHUP: " << node.Reload().value());
      return;
    }
    PTS_INFO("main", "SIGHUP: reloading cluster file " << cfg.cluster.cluster_file);
    notify("RELOADING=1\nSTATUS=reloading the cluster file");
    Result<std::string> r = node.Reload();
    if (!r.ok()) PTS_ERROR("cluster", r.status().ToString());
    notify("READY=1\n" + serving + members() + (r.ok() ? "" : "; last reload refused: " + r.status().message()));
  };
  core::WaitForStopSignal(sigs, on_hangup);
  notify("STOPPING=1\nSTATUS=shutting down");
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ptstored: the PTStore node server (DRAM arena of KV prefixes)"};
  Flags flags;
  flags.AddTo(app);
  // Usage errors exit 2, as documented in ptstored(8).
  if (std::optional<int> rc = core::ParseCommandLine(app, argc, argv)) return *rc;

  core::SetLogProgramName("ptstored");
  storage::DaemonConfig cfg;
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "ptstored: %s\n", st.ToString().c_str());
    return 1;
  };
  if (Status st = Configure(flags, &cfg); !st.ok()) return fail(st);

  // Signals are taken synchronously by the main thread below; every other
  // thread inherits the blocked mask.
  const sigset_t sigs = core::BlockStopSignals();

  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(cfg.server.socket_path).parent_path(), ec);

  const double start_time = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  auto opened = storage::Node::Open(cfg);
  if (!opened.ok()) return fail(opened.status());
  storage::Node& node = **opened;
  storage::Server server(&node, cfg.server);
  // The metrics endpoint starts before the socket, so that its port is in
  // the log once clients can connect.
  storage::MetricsHttpServer metrics;
  if (cfg.metrics.enabled) {
    if (Status st = StartMetrics(node, server, cfg, start_time, &metrics); !st.ok()) return fail(st);
  }
  if (Status st = server.Start(); !st.ok()) return fail(st);
  PTS_INFO("main", "ready");
  ServeUntilStopped(node, cfg, sigs);
  // Leave etcd first: the others drop this node now, not when its lease
  // expires (they lose misses, not time).
  node.Leave();
  metrics.Stop();
  server.Stop();
  node.Stop(cfg.persist_on_shutdown);
  StoreStats s = node.store().Stats();
  PTS_INFO("main", "served " << s.hits << " hits, " << s.misses << " misses, " << s.saves << " saves; bye");
  return 0;
}

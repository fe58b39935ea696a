#include "storage/server/config.h"

#include <grp.h>

#include <charconv>
#include <set>
#include <toml++/toml.h>

namespace ptstore::storage {

Result<uint64_t> ParseSize(std::string_view text) {
  std::string_view t = text;
  while (!t.empty() && t.back() == ' ') t.remove_suffix(1);
  uint64_t number = 0;
  auto [p, ec] = std::from_chars(t.data(), t.data() + t.size(), number);
  if (ec != std::errc() || p == t.data()) {
    return InvalidArgument("size '" + std::string(text) + "' does not start with a number");
  }
  std::string_view unit(p, t.data() + t.size() - p);
  while (!unit.empty() && unit.front() == ' ') unit.remove_prefix(1);
  uint64_t mult = 1;
  if (unit.empty() || unit == "B") mult = 1;
  else if (unit == "K" || unit == "KiB" || unit == "k") mult = 1ull << 10;
  else if (unit == "M" || unit == "MiB") mult = 1ull << 20;
  else if (unit == "G" || unit == "GiB") mult = 1ull << 30;
  else if (unit == "T" || unit == "TiB") mult = 1ull << 40;
  else return InvalidArgument("size '" + std::string(text) + "' has unknown unit '" + std::string(unit) + "' (use B, KiB/K, MiB/M, GiB/G or TiB/T)");
  if (number > UINT64_MAX / mult) return InvalidArgument("size '" + std::string(text) + "' overflows");
  return number * mult;
}

namespace {

Status CheckKeys(const toml::table& t, const std::string& where, const std::set<std::string>& known) {
  for (const auto& [k, v] : t) {
    if (!known.count(std::string(k.str()))) {
      return InvalidArgument("config: unknown key '" + std::string(k.str()) + "' in [" + where + "]");
    }
  }
  return Status::OK();
}

Status SizeField(const toml::table& t, const char* key, uint64_t* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::OK();
  if (auto i = n->value<int64_t>()) {
    if (*i < 0) return InvalidArgument(std::string("config: ") + key + " must not be negative");
    *out = static_cast<uint64_t>(*i);
    return Status::OK();
  }
  if (auto s = n->value<std::string>()) {
    PTS_ASSIGN_OR_RETURN(*out, ParseSize(*s));
    return Status::OK();
  }
  return InvalidArgument(std::string("config: ") + key + " must be a number of bytes or a size like \"4GiB\"");
}

template <typename T>
Status Field(const toml::table& t, const char* key, T* out) {
  const toml::node* n = t.get(key);
  if (!n) return Status::OK();
  if (auto v = n->value<T>()) {
    *out = *v;
    return Status::OK();
  }
  return InvalidArgument(std::string("config: key '") + key + "' has the wrong type");
}

// An integer key of [section] that must lie in [lo, hi]; `out` keeps its
// value when the key is absent.
template <typename T>
Status RangedField(const toml::table& t, const char* section, const char* key, int64_t lo, int64_t hi, T* out) {
  int64_t v = static_cast<int64_t>(*out);
  PTS_RETURN_IF_ERROR(Field(t, key, &v));
  if (v < lo || v > hi) {
    return InvalidArgument(std::string("config: ") + section + "." + key + " must be in [" + std::to_string(lo) +
                           ", " + std::to_string(hi) + "]");
  }
  *out = static_cast<T>(v);
  return Status::OK();
}

// [node]
Status ApplyNodeSection(const toml::table& node, DaemonConfig* config) {
  PTS_RETURN_IF_ERROR(CheckKeys(node, "node", {"id"}));
  PTS_RETURN_IF_ERROR(RangedField(node, "node", "id", 0, (1 << 24) - 1, &config->store.node_id));
  return Status::OK();
}

// [arena]
Status ApplyArenaSection(const toml::table& arena, DaemonConfig* config) {
  PTS_RETURN_IF_ERROR(CheckKeys(arena, "arena", {"size", "replica_share", "prefault", "huge_pages", "alignment"}));
  PTS_RETURN_IF_ERROR(SizeField(arena, "size", &config->store.arena_bytes));
  PTS_RETURN_IF_ERROR(SizeField(arena, "alignment", &config->store.alignment));
  PTS_RETURN_IF_ERROR(Field(arena, "replica_share", &config->store.replica_share));
  PTS_RETURN_IF_ERROR(Field(arena, "prefault", &config->store.prefault));
  PTS_RETURN_IF_ERROR(Field(arena, "huge_pages", &config->store.try_huge_pages));
  return Status::OK();
}

// [ssd]
Status ApplySsdSection(const toml::table& ssd, DaemonConfig* config) {
  PTS_RETURN_IF_ERROR(CheckKeys(ssd, "ssd",
                                {"dir", "capacity", "segment_size", "compress", "compress_level", "direct_io",
                                 "sync", "io_threads", "compact_dead_ratio", "verify_on_recovery",
                                 "persist_on_shutdown", "times_sync_ms"}));
  SsdOptions& o = config->store.ssd;
  PTS_RETURN_IF_ERROR(Field(ssd, "dir", &o.dir));
  PTS_RETURN_IF_ERROR(SizeField(ssd, "capacity", &o.capacity));
  PTS_RETURN_IF_ERROR(SizeField(ssd, "segment_size", &o.segment_bytes));
  PTS_RETURN_IF_ERROR(Field(ssd, "compress", &o.compress));
  PTS_RETURN_IF_ERROR(RangedField(ssd, "ssd", "compress_level", 1, 19, &o.compress_level));
  PTS_RETURN_IF_ERROR(Field(ssd, "direct_io", &o.direct_io));
  std::string sync = SyncName(o.sync);
  PTS_RETURN_IF_ERROR(Field(ssd, "sync", &sync));
  PTS_ASSIGN_OR_RETURN(o.sync, ParseSync(sync));
  PTS_RETURN_IF_ERROR(RangedField(ssd, "ssd", "io_threads", 1, 64, &o.io_threads));
  PTS_RETURN_IF_ERROR(Field(ssd, "compact_dead_ratio", &o.compact_dead_ratio));
  if (!(o.compact_dead_ratio > 0 && o.compact_dead_ratio <= 1)) {
    return InvalidArgument("config: ssd.compact_dead_ratio must be in (0, 1]");
  }
  PTS_RETURN_IF_ERROR(Field(ssd, "verify_on_recovery", &o.verify_on_recovery));
  PTS_RETURN_IF_ERROR(Field(ssd, "persist_on_shutdown", &config->persist_on_shutdown));
  int64_t times_sync = static_cast<int64_t>(config->store.times_sync_ms);
  PTS_RETURN_IF_ERROR(Field(ssd, "times_sync_ms", &times_sync));
  if (times_sync < 0) return InvalidArgument("config: ssd.times_sync_ms must not be negative");
  config->store.times_sync_ms = static_cast<uint64_t>(times_sync);
  return Status::OK();
}

// [server]
Status ApplyServerSection(const toml::table& server, DaemonConfig* config) {
  PTS_RETURN_IF_ERROR(CheckKeys(server, "server",
                                {"socket", "group", "lease_ms", "max_sessions", "max_sessions_per_uid",
                                 "frame_timeout_ms", "spin_us"}));
  PTS_RETURN_IF_ERROR(Field(server, "socket", &config->server.socket_path));
  PTS_RETURN_IF_ERROR(Field(server, "group", &config->trusted_group));
  int64_t lease = static_cast<int64_t>(config->store.default_lease_ms);
  PTS_RETURN_IF_ERROR(Field(server, "lease_ms", &lease));
  if (lease <= 0) return InvalidArgument("config: server.lease_ms must be positive");
  config->store.default_lease_ms = static_cast<uint64_t>(lease);
  int64_t sessions = config->server.max_sessions;
  PTS_RETURN_IF_ERROR(Field(server, "max_sessions", &sessions));
  if (sessions <= 0) return InvalidArgument("config: server.max_sessions must be positive");
  config->server.max_sessions = static_cast<uint32_t>(sessions);
  PTS_RETURN_IF_ERROR(RangedField(server, "server", "max_sessions_per_uid", 1, 1 << 20,
                                  &config->server.max_sessions_per_uid));
  PTS_RETURN_IF_ERROR(RangedField(server, "server", "frame_timeout_ms", 1, 3600000,
                                  &config->server.frame_timeout_ms));
  PTS_RETURN_IF_ERROR(RangedField(server, "server", "spin_us", 0, 10000, &config->server.spin_us));
  return Status::OK();
}

// [metrics]
Status ApplyMetricsSection(const toml::table& metrics, DaemonConfig* config) {
  PTS_RETURN_IF_ERROR(CheckKeys(metrics, "metrics", {"bind", "port"}));
  PTS_RETURN_IF_ERROR(Field(metrics, "bind", &config->metrics.bind));
  if (config->metrics.bind.empty()) return InvalidArgument("config: metrics.bind must not be empty");
  if (const toml::node* port = metrics.get("port")) {
    std::string text;
    if (auto i = port->value<int64_t>()) text = std::to_string(*i);
    else if (auto str = port->value<std::string>()) text = *str;
    else return InvalidArgument("config: metrics.port must be a port number or \"auto\"");
    PTS_RETURN_IF_ERROR(ParseMetricsPort(text, &config->metrics).WithContext("config"));
  }
  return Status::OK();
}

// [cluster]
Status ApplyClusterSection(const toml::table& cluster, DaemonConfig* config) {
  ClusterOptions& c = config->cluster;
  PTS_RETURN_IF_ERROR(CheckKeys(cluster, "cluster",
                                {"file", "secret_file", "data_path", "fabric_provider", "rpc_timeout_ms",
                                 "heartbeat_ms", "dead_after", "replicate_after", "negative_ttl_ms", "advertise",
                                 "etcd_lease_s", "require_integrity"}));
  PTS_RETURN_IF_ERROR(Field(cluster, "file", &c.cluster_file));
  PTS_RETURN_IF_ERROR(Field(cluster, "advertise", &c.advertise));
  PTS_RETURN_IF_ERROR(RangedField(cluster, "cluster", "etcd_lease_s", 2, 3600, &c.etcd_lease_s));
  PTS_RETURN_IF_ERROR(Field(cluster, "secret_file", &c.secret_file));
  std::string path;
  PTS_RETURN_IF_ERROR(Field(cluster, "data_path", &path));
  if (!path.empty()) {
    PTS_ASSIGN_OR_RETURN(c.data_path, ParseDataPath(path));
  }
  PTS_RETURN_IF_ERROR(Field(cluster, "fabric_provider", &c.fabric_provider));
  PTS_RETURN_IF_ERROR(Field(cluster, "require_integrity", &c.require_integrity));
  PTS_RETURN_IF_ERROR(RangedField(cluster, "cluster", "rpc_timeout_ms", 10, 600000, &c.rpc_timeout_ms));
  PTS_RETURN_IF_ERROR(RangedField(cluster, "cluster", "heartbeat_ms", 10, 600000, &c.heartbeat_ms));
  PTS_RETURN_IF_ERROR(RangedField(cluster, "cluster", "dead_after", 1, 1000, &c.dead_after));
  PTS_RETURN_IF_ERROR(RangedField(cluster, "cluster", "negative_ttl_ms", 0, 600000, &c.negative_ttl_ms));
  PTS_RETURN_IF_ERROR(
      RangedField(cluster, "cluster", "replicate_after", 0, 1000000, &config->store.replicate_after));
  return Status::OK();
}

// [events]
Status ApplyEventsSection(const toml::table& events, DaemonConfig* config) {
  KvEventsOptions& e = config->events;
  PTS_RETURN_IF_ERROR(CheckKeys(events, "events",
                                {"enabled", "bind", "port", "replay_port", "queue_events", "buffer_batches", "buffer_bytes",
                                 "hwm", "batch_events", "batch_delay_us", "salted_tokens", "block_hash", "exclude"}));
  PTS_RETURN_IF_ERROR(Field(events, "enabled", &e.enabled));
  PTS_RETURN_IF_ERROR(Field(events, "bind", &e.bind));
  if (e.bind.empty()) return InvalidArgument("config: events.bind must not be empty");
  PTS_RETURN_IF_ERROR(RangedField(events, "events", "port", 0, 65535, &e.port));
  PTS_RETURN_IF_ERROR(RangedField(events, "events", "replay_port", 0, 65535, &e.replay_port));
  if (e.port != 0 && e.port == e.replay_port) {
    return InvalidArgument("config: events.port and events.replay_port must differ");
  }
  PTS_RETURN_IF_ERROR(RangedField(events, "events", "queue_events", 1, int64_t{1} << 30, &e.queue_events));
  PTS_RETURN_IF_ERROR(RangedField(events, "events", "buffer_batches", 1, int64_t{1} << 24, &e.buffer_batches));
  PTS_RETURN_IF_ERROR(SizeField(events, "buffer_bytes", &e.buffer_bytes));
  if (e.buffer_bytes < (uint64_t{1} << 20) || e.buffer_bytes > (uint64_t{16} << 30)) {
    return InvalidArgument("config: events.buffer_bytes must be in [1MiB, 16GiB]");
  }
  PTS_RETURN_IF_ERROR(RangedField(events, "events", "hwm", 1, int64_t{1} << 30, &e.hwm));
  PTS_RETURN_IF_ERROR(RangedField(events, "events", "batch_events", 1, 1 << 20, &e.batch_events));
  PTS_RETURN_IF_ERROR(RangedField(events, "events", "batch_delay_us", 0, 1000000, &e.batch_delay_us));
  PTS_RETURN_IF_ERROR(Field(events, "salted_tokens", &e.codec.salted_tokens));
  std::string hash = e.codec.hash == KvHashFormat::kInt ? "int" : "bytes";
  PTS_RETURN_IF_ERROR(Field(events, "block_hash", &hash));
  Result<KvHashFormat> format = ParseBlockHashFormat(hash);
  if (!format.ok()) return format.status().WithContext("config: events.block_hash");
  e.codec.hash = *format;
  if (const toml::node* n = events.get("exclude")) {
    const toml::array* patterns = n->as_array();
    if (patterns == nullptr) return InvalidArgument("config: events.exclude must be an array of namespace patterns");
    for (const toml::node& p : *patterns) {
      std::optional<std::string> v = p.value<std::string>();
      if (!v || v->empty()) {
        return InvalidArgument("config: events.exclude must hold non-empty strings (fnmatch patterns of namespace names)");
      }
      e.exclude.push_back(*v);
    }
  }
  return Status::OK();
}

// [log]
Status ApplyLogSection(const toml::table& log, DaemonConfig* config) {
  PTS_RETURN_IF_ERROR(CheckKeys(log, "log", {"level"}));
  PTS_RETURN_IF_ERROR(Field(log, "level", &config->log_level));
  return Status::OK();
}

}  // namespace

Status LoadConfigFile(const std::string& path, DaemonConfig* config) {
  toml::table root;
  try {
    root = toml::parse_file(path);
  } catch (const toml::parse_error& e) {
    std::string where = e.source().begin ? " at line " + std::to_string(e.source().begin.line) : "";
    return InvalidArgument("config " + path + where + ": " + std::string(e.description()));
  }
  PTS_RETURN_IF_ERROR(CheckKeys(root, "top level", {"node", "arena", "ssd", "server", "log", "metrics", "cluster", "events"}));
  if (auto* node = root["node"].as_table()) PTS_RETURN_IF_ERROR(ApplyNodeSection(*node, config));
  if (auto* arena = root["arena"].as_table()) PTS_RETURN_IF_ERROR(ApplyArenaSection(*arena, config));
  if (auto* ssd = root["ssd"].as_table()) PTS_RETURN_IF_ERROR(ApplySsdSection(*ssd, config));
  if (auto* server = root["server"].as_table()) PTS_RETURN_IF_ERROR(ApplyServerSection(*server, config));
  if (auto* metrics = root["metrics"].as_table()) PTS_RETURN_IF_ERROR(ApplyMetricsSection(*metrics, config));
  if (auto* cluster = root["cluster"].as_table()) PTS_RETURN_IF_ERROR(ApplyClusterSection(*cluster, config));
  if (auto* events = root["events"].as_table()) PTS_RETURN_IF_ERROR(ApplyEventsSection(*events, config));
  if (auto* log = root["log"].as_table()) PTS_RETURN_IF_ERROR(ApplyLogSection(*log, config));
  return Status::OK();
}

Result<SsdOptions::Sync> ParseSync(std::string_view text) {
  if (text == "none") return SsdOptions::Sync::kNone;
  if (text == "segment") return SsdOptions::Sync::kSegment;
  if (text == "record") return SsdOptions::Sync::kRecord;
  return InvalidArgument("ssd sync mode '" + std::string(text) + "' is not none, segment or record");
}

Result<KvHashFormat> ParseBlockHashFormat(std::string_view text) {
  if (text == "int") return KvHashFormat::kInt;
  if (text == "bytes") return KvHashFormat::kBytes;
  return InvalidArgument("block hash format '" + std::string(text) + "' is not \"int\" or \"bytes\"");
}

Result<core::DataPath> ParseDataPath(std::string_view text) {
  if (text == "tcp") return core::DataPath::kTcp;
  if (text == "rma") return core::DataPath::kRma;
  return InvalidArgument("data path '" + std::string(text) + "' is not \"tcp\" or \"rma\"");
}

Status ParseMetricsPort(std::string_view text, MetricsConfig* metrics) {
  if (text == "auto") {
    metrics->enabled = true;
    metrics->port = 0;
    return Status::OK();
  }
  uint32_t port = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), port);
  if (ec != std::errc() || p != text.data() + text.size() || port > 65535) {
    return InvalidArgument("metrics port '" + std::string(text) + "' is not a port number (0-65535) or \"auto\"");
  }
  metrics->enabled = port != 0;
  metrics->port = static_cast<uint16_t>(port);
  return Status::OK();
}

Status CheckSsdConfig(const DaemonConfig& config) {
  const SsdOptions& o = config.store.ssd;
  if (o.dir.empty()) {
    if (o.capacity != 0) return InvalidArgument("an SSD capacity was given without an SSD directory (ssd.dir, --ssd-dir)");
    return Status::OK();
  }
  if (o.capacity == 0) {
    return InvalidArgument("the SSD tier at '" + o.dir + "' needs a capacity (ssd.capacity, --ssd-capacity)");
  }
  return Status::OK();
}

Status ResolveTrustedGroup(DaemonConfig* config) {
  const std::string& g = config->trusted_group;
  if (g.empty()) {
    config->server.trusted_gid = -1;
    return Status::OK();
  }
  uint32_t gid = 0;
  auto [p, ec] = std::from_chars(g.data(), g.data() + g.size(), gid);
  if (ec == std::errc() && p == g.data() + g.size()) {
    config->server.trusted_gid = gid;
    return Status::OK();
  }
  struct group* gr = getgrnam(g.c_str());
  if (gr == nullptr) return NotFound("store group '" + g + "' does not exist");
  config->server.trusted_gid = gr->gr_gid;
  return Status::OK();
}

}  // namespace ptstore::storage

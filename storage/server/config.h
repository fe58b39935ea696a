// ptstored's configuration: a TOML file (docs/configuration.md) overridden
// by command-line flags.
#pragma once

#include <string>

#include "ptstore/status.h"
#include "storage/cluster/cluster.h"
#include "storage/events/kv_event_publisher.h"
#include "storage/server/server.h"
#include "storage/cache/store.h"

namespace ptstore::storage {

// [metrics]: the Prometheus endpoint (storage/server/metrics_http.h).
struct MetricsConfig {
  bool enabled = false;           // a port was given: a number or "auto"
  std::string bind = "127.0.0.1";
  uint16_t port = 0;              // 0 while enabled: an ephemeral port (logged)
};

struct DaemonConfig {
  StoreOptions store;
  ServerOptions server;
  std::string trusted_group;  // name or number; empty: none
  std::string log_level = "info";
  // On SIGTERM, write what only DRAM holds to the SSD tier first.
  bool persist_on_shutdown = true;
  MetricsConfig metrics;
  // [cluster]: empty cluster.cluster_file means a single node.
  ClusterOptions cluster;
  // [events]: the KV-event stream (docs/kv-events.md).
  KvEventsOptions events;
};

// "4GiB", "512MiB", "64KiB", "1G", "1048576" -> bytes.
Result<uint64_t> ParseSize(std::string_view text);

// Reads `path` into `config` (fields not in the file keep their values).
// Unknown keys are errors, so a typo never goes unnoticed.
Status LoadConfigFile(const std::string& path, DaemonConfig* config);

// "none", "segment", "record".
Result<SsdOptions::Sync> ParseSync(std::string_view text);

// A metrics port: "1".."65535", "auto" (an ephemeral port) or "0" (no
// metrics endpoint).
Status ParseMetricsPort(std::string_view text, MetricsConfig* metrics);

// "tcp" or "rma".
Result<core::DataPath> ParseDataPath(std::string_view text);

// "int" or "bytes": how block hashes are written in KV events.
Result<KvHashFormat> ParseBlockHashFormat(std::string_view text);

// An SSD tier needs both a directory and a capacity.
Status CheckSsdConfig(const DaemonConfig& config);

// Resolves trusted_group into server.trusted_gid.
Status ResolveTrustedGroup(DaemonConfig* config);

}  // namespace ptstore::storage

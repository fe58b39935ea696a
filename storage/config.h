// ptstored's configuration: a TOML file (docs/configuration.md) overridden
// by command-line flags.
#pragma once

#include <string>

#include "ptstore/status.h"
#include "storage/server.h"
#include "storage/store.h"

namespace ptstore::storage {

struct DaemonConfig {
  StoreOptions store;
  ServerOptions server;
  std::string trusted_group;  // name or number; empty: none
  std::string log_level = "info";
  // On SIGTERM, write what only DRAM holds to the SSD tier first.
  bool persist_on_shutdown = true;
};

// "4GiB", "512MiB", "64KiB", "1G", "1048576" -> bytes.
Result<uint64_t> ParseSize(std::string_view text);

// Reads `path` into `config` (fields not in the file keep their values).
// Unknown keys are errors, so a typo never goes unnoticed.
Status LoadConfigFile(const std::string& path, DaemonConfig* config);

// "none", "segment", "record".
Result<SsdOptions::Sync> ParseSync(std::string_view text);

// An SSD tier needs both a directory and a capacity.
Status CheckSsdConfig(const DaemonConfig& config);

// Resolves trusted_group into server.trusted_gid.
Status ResolveTrustedGroup(DaemonConfig* config);

}  // namespace ptstore::storage

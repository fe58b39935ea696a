// What fabric this node has, for operators (ptstore-stat --fabric): the RDMA
// devices libibverbs sees, with their ports and GIDs; the libfabric
// providers that offer what PTStore needs (FI_EP_RDM with FI_RMA); and the
// one Fabric::Open would choose for given FabricOptions.
//
// ProbeFabric only queries (no endpoint is opened, nothing is registered)
// and needs no ptstored. A missing piece is a line in the report, not an
// error: no RDMA devices, no provider, no choice (its reason).
//
// Thread safety: ProbeFabric may run on any thread; the rest is pure.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "ptstore/status.h"
#include "rdma/fabric.h"

namespace ptstore::rdma {

struct RdmaGid {
  int index = 0;
  std::string gid;   // "fe80:0000:0000:0000:0c42:a1ff:fe65:8b2c"
  std::string type;  // "IB", "RoCE v1", "RoCE v2", or "" when unknown
};

struct RdmaPort {
  uint32_t port = 0;         // 1-based
  std::string state;         // "ACTIVE", "DOWN", "INIT", "ARMED", ...
  uint32_t active_mtu = 0;   // bytes (256 .. 4096); 0 when unknown
  std::string link_layer;    // "InfiniBand", "Ethernet", "unspecified"
  std::vector<RdmaGid> gids;  // the non-zero entries of the GID table
  std::string error;         // why the port could not be queried (else "")
};

struct RdmaDevice {
  std::string name;       // "mlx5_0"
  std::string node_guid;  // "0c42:a103:0065:8b2c"
  std::string firmware;   // "20.31.1014"
  std::vector<RdmaPort> ports;
  std::string error;  // why the device could not be opened or queried (else "")
};

// One fi_getinfo offer.
struct FabricOffer {
  std::string provider;       // "tcp;ofi_rxm"
  std::string fabric;         // "127.0.0.1/32"
  std::string domain;         // "lo"
  std::string endpoint_type;  // "FI_EP_RDM"
};

struct FabricReport {
  std::vector<RdmaDevice> rdma_devices;
  // Why rdma_devices is empty ("no RDMA devices", with libibverbs' reason
  // when it gave one); "" when there are devices.
  std::string rdma_note;
  std::string libfabric_version;  // of the library loaded, "1.17.0"
  // Every provider offering FI_EP_RDM with FI_RMA|FI_READ|FI_REMOTE_READ,
  // one entry per (provider, fabric, domain), in fi_getinfo's order.
  std::vector<FabricOffer> providers;
  std::string providers_note;  // why `providers` is empty (else "")
  FabricOptions options;       // what `choice` was asked for
  std::optional<FabricChoice> choice;
  std::string choice_error;  // why there is no choice (else "")
};

// Queries libibverbs and libfabric. Fails only on an internal error.
Result<FabricReport> ProbeFabric(const FabricOptions& options);

// Human text: three sections (RDMA devices, libfabric providers, PTStore's
// choice), "label  value" lines and tables; "no RDMA devices" when there are
// none.
std::string FormatFabricReport(const FabricReport& report);

// {"rdma_devices": [{"name", "node_guid", "firmware", "error"?, "ports":
//   [{"port", "state", "active_mtu", "link_layer", "gids": [{"index",
//   "gid", "type"}], "error"?}]}],
//  "rdma_note": string or null,
//  "libfabric_version",
//  "providers": [{"provider", "fabric", "domain", "endpoint_type"}],
//  "providers_note": string or null,
//  "choice": {"requested_provider", "node", "provider", "fabric", "domain",
//    "endpoint_type", "max_msg_size", "virtual_addresses", "provider_keys",
//    "local_registration", "manual_progress", "error"}}
// (in "choice", the offer's fields are null and "error" a string when there
// is none; "error" is null otherwise; max_msg_size is an exact integer).
nlohmann::ordered_json FabricReportJson(const FabricReport& report);

// 16 bytes of a GID as eight groups of four hex digits, colon-separated.
std::string FormatGid(const uint8_t (&raw)[16]);
// A GUID in network byte order as "xxxx:xxxx:xxxx:xxxx".
std::string FormatGuid(uint64_t guid_be);

}  // namespace ptstore::rdma

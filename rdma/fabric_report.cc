// The fabric report (rdma/fabric_report.h).
#include "rdma/fabric_report.h"

#include <infiniband/verbs.h>
#include <rdma/fabric.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <set>
#include <tuple>

namespace ptstore::rdma {
namespace {

std::string PortState(ibv_port_state s) {
  switch (s) {
    case IBV_PORT_NOP: return "NOP";
    case IBV_PORT_DOWN: return "DOWN";
    case IBV_PORT_INIT: return "INIT";
    case IBV_PORT_ARMED: return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    case IBV_PORT_ACTIVE_DEFER: return "ACTIVE_DEFER";
    default: return "state " + std::to_string(static_cast<int>(s));
  }
}

std::string LinkLayer(uint8_t l) {
  switch (l) {
    case IBV_LINK_LAYER_INFINIBAND: return "InfiniBand";
    case IBV_LINK_LAYER_ETHERNET: return "Ethernet";
    default: return "unspecified";
  }
}

std::string GidType(uint32_t t) {
  switch (t) {
    case IBV_GID_TYPE_IB: return "IB";
    case IBV_GID_TYPE_ROCE_V1: return "RoCE v1";
    case IBV_GID_TYPE_ROCE_V2: return "RoCE v2";
    default: return "";
  }
}

uint32_t MtuBytes(ibv_mtu m) { return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128u << m : 0; }

RdmaPort ProbePort(ibv_context* ctx, uint8_t port_num) {
  RdmaPort p;
  p.port = port_num;
  ibv_port_attr attr{};
  if (int rc = ibv_query_port(ctx, port_num, &attr); rc != 0) {
    p.error = std::string("ibv_query_port: ") + std::strerror(rc);
    return p;
  }
  p.state = PortState(attr.state);
  p.active_mtu = MtuBytes(attr.active_mtu);
  p.link_layer = LinkLayer(attr.link_layer);
  for (int i = 0; i < attr.gid_tbl_len; ++i) {
    ibv_gid_entry entry{};
    uint8_t raw[16];
    std::string type;
    if (ibv_query_gid_ex(ctx, port_num, i, &entry, 0) == 0) {
      std::memcpy(raw, entry.gid.raw, 16);
      type = GidType(entry.gid_type);
    } else {
      ibv_gid gid{};
      if (ibv_query_gid(ctx, port_num, i, &gid) != 0) continue;
      std::memcpy(raw, gid.raw, 16);
    }
    if (std::all_of(raw, raw + 16, [](uint8_t b) { return b == 0; })) continue;
    p.gids.push_back({i, FormatGid(raw), type});
  }
  return p;
}

void ProbeRdma(FabricReport& r) {
  int n = 0;
  errno = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (list == nullptr) {
    int err = errno;
    r.rdma_note = "no RDMA devices";
    if (err == ENOSYS) {
      r.rdma_note += " (libibverbs: no /sys/class/infiniband_verbs: no RDMA driver loaded)";
    } else if (err != 0) {
      r.rdma_note += std::string(" (libibverbs: ") + std::strerror(err) + ")";
    }
    return;
  }
  for (int d = 0; d < n; ++d) {
    RdmaDevice dev;
    dev.name = ibv_get_device_name(list[d]);
    dev.node_guid = FormatGuid(ibv_get_device_guid(list[d]));
    ibv_context* ctx = ibv_open_device(list[d]);
    if (ctx == nullptr) {
      dev.error = std::string("ibv_open_device: ") + std::strerror(errno);
      r.rdma_devices.push_back(std::move(dev));
      continue;
    }
    ibv_device_attr attr{};
    if (int rc = ibv_query_device(ctx, &attr); rc != 0) {
      dev.error = std::string("ibv_query_device: ") + std::strerror(rc);
    } else {
      dev.firmware = attr.fw_ver;
      for (uint8_t port = 1; port <= attr.phys_port_cnt; ++port) dev.ports.push_back(ProbePort(ctx, port));
    }
    ibv_close_device(ctx);
    r.rdma_devices.push_back(std::move(dev));
  }
  ibv_free_device_list(list);
  if (r.rdma_devices.empty()) r.rdma_note = "no RDMA devices";
}

void ProbeProviders(FabricReport& r) {
  fi_info* hints = fi_allocinfo();
  if (hints == nullptr) {
    r.providers_note = "fi_allocinfo failed";
    return;
  }
  // Broad on purpose: every provider with remote reads on reliable
  // datagram endpoints, whatever modes it needs from its users.
  hints->ep_attr->type = FI_EP_RDM;
  hints->caps = FI_RMA | FI_READ | FI_REMOTE_READ;
  hints->mode = ~0ULL;
  hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_RAW | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY |
                                FI_MR_MMU_NOTIFY | FI_MR_RMA_EVENT | FI_MR_ENDPOINT;
  fi_info* info = nullptr;
  int ret = fi_getinfo(FI_VERSION(FI_MAJOR_VERSION, FI_MINOR_VERSION), nullptr, nullptr, 0, hints, &info);
  fi_freeinfo(hints);
  if (ret != 0) {
    r.providers_note = std::string("no provider offers FI_EP_RDM with FI_RMA: ") + fi_strerror(-ret);
    return;
  }
  std::set<std::tuple<std::string, std::string, std::string>> seen;
  char buf[64];
  for (fi_info* i = info; i != nullptr; i = i->next) {
    FabricOffer o;
    o.provider = i->fabric_attr->prov_name ? i->fabric_attr->prov_name : "";
    o.fabric = i->fabric_attr->name ? i->fabric_attr->name : "";
    o.domain = i->domain_attr->name ? i->domain_attr->name : "";
    o.endpoint_type = fi_tostr_r(buf, sizeof(buf), &i->ep_attr->type, FI_TYPE_EP_TYPE);
    if (!seen.insert({o.provider, o.fabric, o.domain}).second) continue;
    r.providers.push_back(std::move(o));
  }
  fi_freeinfo(info);
  if (r.providers.empty()) r.providers_note = "no provider offers FI_EP_RDM with FI_RMA";
}

std::string Pad(const std::string& s, size_t width) {
  return s.size() >= width ? s : s + std::string(width - s.size(), ' ');
}

// Rows of cells, columns separated by two spaces, the last one unpadded.
std::string Table(const std::vector<std::vector<std::string>>& rows, const std::string& indent) {
  std::vector<size_t> width;
  for (const auto& row : rows) {
    if (width.size() < row.size()) width.resize(row.size(), 0);
    for (size_t c = 0; c < row.size(); ++c) width[c] = std::max(width[c], row[c].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line = indent;
    for (size_t c = 0; c < row.size(); ++c) line += c + 1 == row.size() ? row[c] : Pad(row[c], width[c] + 2);
    out += line + "\n";
  }
  return out;
}

std::string Registration(const FabricChoice& c) {
  std::string s = c.virtual_addresses ? "virtual addresses" : "offsets";
  s += c.provider_keys ? ", provider keys" : ", own keys";
  if (c.local_registration) s += ", local registration";
  return s;
}

nlohmann::ordered_json NullOr(const std::string& s) { return s.empty() ? nlohmann::ordered_json(nullptr) : nlohmann::ordered_json(s); }

}  // namespace

std::string FormatGid(const uint8_t (&raw)[16]) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x:%02x%02x", raw[0],
                raw[1], raw[2], raw[3], raw[4], raw[5], raw[6], raw[7], raw[8], raw[9], raw[10], raw[11], raw[12],
                raw[13], raw[14], raw[15]);
  return buf;
}

std::string FormatGuid(uint64_t guid_be) {
  uint8_t b[8];
  std::memcpy(b, &guid_be, 8);  // network byte order: b[0] is the most significant
  char buf[24];
  std::snprintf(buf, sizeof(buf), "%02x%02x:%02x%02x:%02x%02x:%02x%02x", b[0], b[1], b[2], b[3], b[4], b[5], b[6],
                b[7]);
  return buf;
}

Result<FabricReport> ProbeFabric(const FabricOptions& options) {
  FabricReport r;
  r.options = options;
  ProbeRdma(r);
  uint32_t v = fi_version();
  r.libfabric_version = std::to_string(FI_MAJOR(v)) + "." + std::to_string(FI_MINOR(v));
  ProbeProviders(r);
  auto choice = ChooseFabric(options);
  if (choice.ok()) {
    r.choice = *choice;
  } else {
    r.choice_error = choice.status().message();
  }
  return r;
}

std::string FormatFabricReport(const FabricReport& r) {
  std::string out = "RDMA devices (libibverbs)\n";
  if (r.rdma_devices.empty()) out += "  " + (r.rdma_note.empty() ? std::string("no RDMA devices") : r.rdma_note) + "\n";
  for (const RdmaDevice& d : r.rdma_devices) {
    out += "  " + d.name + "  node GUID " + d.node_guid;
    if (!d.firmware.empty()) out += "  firmware " + d.firmware;
    out += "\n";
    if (!d.error.empty()) out += "    error: " + d.error + "\n";
    for (const RdmaPort& p : d.ports) {
      out += "    port " + std::to_string(p.port);
      if (!p.error.empty()) {
        out += "  error: " + p.error + "\n";
        continue;
      }
      out += "  " + p.state + "  " + p.link_layer + "  MTU " +
             (p.active_mtu ? std::to_string(p.active_mtu) : std::string("unknown")) + "\n";
      std::vector<std::vector<std::string>> rows;
      for (const RdmaGid& g : p.gids) {
        std::vector<std::string> row = {"gid " + std::to_string(g.index), g.gid};
        if (!g.type.empty()) row.push_back(g.type);
        rows.push_back(std::move(row));
      }
      if (rows.empty()) {
        out += "      no GIDs\n";
      } else {
        out += Table(rows, "      ");
      }
    }
  }

  out += "\nlibfabric " + r.libfabric_version + " providers for FI_EP_RDM with FI_RMA\n";
  if (r.providers.empty()) {
    out += "  " + (r.providers_note.empty() ? std::string("none") : r.providers_note) + "\n";
  } else {
    std::vector<std::vector<std::string>> rows = {{"PROVIDER", "FABRIC", "DOMAIN", "ENDPOINT"}};
    for (const FabricOffer& o : r.providers) rows.push_back({o.provider, o.fabric, o.domain, o.endpoint_type});
    out += Table(rows, "  ");
  }

  const std::string asked = r.options.provider.empty() ? std::string("any") : r.options.provider;
  out += "\nPTStore's choice (provider " + asked + ", node " +
         (r.options.node.empty() ? std::string("any") : r.options.node) + ")\n";
  if (!r.choice) {
    out += "  none: " + r.choice_error + "\n";
    return out;
  }
  const FabricChoice& c = *r.choice;
  std::string max_msg = c.max_msg_size == UINT64_MAX || c.max_msg_size == SIZE_MAX ? std::string("unlimited")
                                                                                   : std::to_string(c.max_msg_size);
  out += Table({{"provider", c.provider},
                {"fabric", c.fabric},
                {"domain", c.domain},
                {"endpoint", c.endpoint_type},
                {"max message", max_msg},
                {"registration", Registration(c)},
                {"progress", c.manual_progress ? "manual (PTStore polls)" : "automatic"}},
               "  ");
  return out;
}

nlohmann::ordered_json FabricReportJson(const FabricReport& r) {
  using J = nlohmann::ordered_json;
  J devices = J::array();
  for (const RdmaDevice& d : r.rdma_devices) {
    J ports = J::array();
    for (const RdmaPort& p : d.ports) {
      J gids = J::array();
      for (const RdmaGid& g : p.gids) gids.push_back({{"index", g.index}, {"gid", g.gid}, {"type", NullOr(g.type)}});
      J port = {{"port", p.port},
                {"state", NullOr(p.state)},
                {"active_mtu", p.active_mtu},
                {"link_layer", NullOr(p.link_layer)},
                {"gids", gids}};
      if (!p.error.empty()) port["error"] = p.error;
      ports.push_back(std::move(port));
    }
    J dev = {{"name", d.name}, {"node_guid", d.node_guid}, {"firmware", NullOr(d.firmware)}};
    if (!d.error.empty()) dev["error"] = d.error;
    dev["ports"] = std::move(ports);
    devices.push_back(std::move(dev));
  }
  J providers = J::array();
  for (const FabricOffer& o : r.providers) {
    providers.push_back(
        {{"provider", o.provider}, {"fabric", o.fabric}, {"domain", o.domain}, {"endpoint_type", o.endpoint_type}});
  }
  J choice = {{"requested_provider", NullOr(r.options.provider)}, {"node", NullOr(r.options.node)}};
  if (r.choice) {
    const FabricChoice& c = *r.choice;
    choice["provider"] = c.provider;
    choice["fabric"] = c.fabric;
    choice["domain"] = c.domain;
    choice["endpoint_type"] = c.endpoint_type;
    choice["max_msg_size"] = c.max_msg_size;
    choice["virtual_addresses"] = c.virtual_addresses;
    choice["provider_keys"] = c.provider_keys;
    choice["local_registration"] = c.local_registration;
    choice["manual_progress"] = c.manual_progress;
    choice["error"] = nullptr;
  } else {
    for (const char* k : {"provider", "fabric", "domain", "endpoint_type", "max_msg_size", "virtual_addresses",
                          "provider_keys", "local_registration", "manual_progress"}) {
      choice[k] = nullptr;
    }
    choice["error"] = r.choice_error;
  }
  return J{{"rdma_devices", std::move(devices)},
           {"rdma_note", NullOr(r.rdma_note)},
           {"libfabric_version", r.libfabric_version},
           {"providers", std::move(providers)},
           {"providers_note", NullOr(r.providers_note)},
           {"choice", std::move(choice)}};
}

}  // namespace ptstore::rdma

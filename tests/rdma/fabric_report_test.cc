// Tests of the fabric report (rdma/fabric_report.h): on this machine (no
// RDMA device, libfabric's tcp provider) and on a made-up report with a
// device, for the text and JSON forms.
#include "rdma/fabric_report.h"
#include "tests/testing/status_matchers.h"

#include <gtest/gtest.h>

#include <cstring>
#include <iostream>

namespace ptstore::rdma {
namespace {

bool Has(const std::string& text, const std::string& needle) { return text.find(needle) != std::string::npos; }

TEST(FabricReportTest, ProbesThisMachine) {
  auto r = ProbeFabric(FabricOptions{});
  ASSERT_OK(r);
  EXPECT_TRUE(r->rdma_devices.empty());
  EXPECT_TRUE(Has(r->rdma_note, "no RDMA devices")) << r->rdma_note;
  bool tcp = false;
  for (const FabricOffer& o : r->providers) tcp = tcp || (o.provider == "tcp;ofi_rxm" && o.endpoint_type == "FI_EP_RDM");
  EXPECT_TRUE(tcp);
  ASSERT_TRUE(r->choice.has_value()) << r->choice_error;
  EXPECT_EQ(r->choice->provider, "tcp;ofi_rxm");
  EXPECT_EQ(r->choice->domain, "lo");
  EXPECT_FALSE(r->libfabric_version.empty());

  std::string text = FormatFabricReport(*r);
  std::cout << text;
  EXPECT_TRUE(Has(text, "no RDMA devices")) << text;
  EXPECT_TRUE(Has(text, "tcp;ofi_rxm")) << text;
  EXPECT_TRUE(Has(text, "FI_EP_RDM")) << text;
  EXPECT_TRUE(Has(text, "offsets, own keys")) << text;

  auto j = FabricReportJson(*r);
  EXPECT_TRUE(j["rdma_devices"].is_array());
  EXPECT_TRUE(j["rdma_devices"].empty());
  EXPECT_TRUE(Has(j["rdma_note"].get<std::string>(), "no RDMA devices"));
  EXPECT_EQ(j["choice"]["provider"], "tcp;ofi_rxm");
  EXPECT_EQ(j["choice"]["requested_provider"], "tcp");
  EXPECT_EQ(j["choice"]["max_msg_size"].get<uint64_t>(), r->choice->max_msg_size);
  EXPECT_TRUE(j["choice"]["error"].is_null());
  EXPECT_FALSE(j["providers"].empty());
}

TEST(FabricReportTest, NoChoiceForAnUnknownProvider) {
  FabricOptions o;
  o.provider = "no-such-provider";
  auto r = ProbeFabric(o);
  ASSERT_OK(r);
  EXPECT_FALSE(r->choice.has_value());
  std::string text = FormatFabricReport(*r);
  EXPECT_TRUE(Has(text, "none: ")) << text;
  EXPECT_TRUE(Has(text, "no-such-provider")) << text;
  auto j = FabricReportJson(*r);
  EXPECT_TRUE(j["choice"]["provider"].is_null());
  EXPECT_TRUE(Has(j["choice"]["error"].get<std::string>(), "no-such-provider"));
}

TEST(FabricReportTest, FormatsDevicesPortsAndGids) {
  FabricReport r;
  RdmaDevice d;
  d.name = "mlx5_0";
  uint8_t guid[8] = {0x0c, 0x42, 0xa1, 0x03, 0x00, 0x65, 0x8b, 0x2c};
  uint64_t guid_be;
  std::memcpy(&guid_be, guid, 8);
  d.node_guid = FormatGuid(guid_be);
  EXPECT_EQ(d.node_guid, "0c42:a103:0065:8b2c");
  d.firmware = "20.31.1014";
  uint8_t raw[16] = {0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x0c, 0x42, 0xa1, 0xff, 0xfe, 0x65, 0x8b, 0x2c};
  RdmaPort p;
  p.port = 1;
  p.state = "ACTIVE";
  p.active_mtu = 4096;
  p.link_layer = "InfiniBand";
  p.gids.push_back({0, FormatGid(raw), "IB"});
  EXPECT_EQ(p.gids[0].gid, "fe80:0000:0000:0000:0c42:a1ff:fe65:8b2c");
  d.ports.push_back(p);
  RdmaPort down;
  down.port = 2;
  down.state = "DOWN";
  down.link_layer = "Ethernet";
  d.ports.push_back(down);
  r.rdma_devices.push_back(d);
  r.libfabric_version = "1.17";
  r.providers.push_back({"verbs;ofi_rxm", "IB-0xfe80000000000000", "mlx5_0", "FI_EP_RDM"});
  FabricChoice c;
  c.provider = "verbs;ofi_rxm";
  c.fabric = "IB-0xfe80000000000000";
  c.domain = "mlx5_0";
  c.endpoint_type = "FI_EP_RDM";
  c.max_msg_size = 1 << 30;
  c.virtual_addresses = c.provider_keys = c.local_registration = true;
  r.choice = c;
  r.options.provider = "verbs";

  std::string text = FormatFabricReport(r);
  std::cout << text;
  EXPECT_FALSE(Has(text, "no RDMA devices")) << text;
  EXPECT_TRUE(Has(text, "mlx5_0  node GUID 0c42:a103:0065:8b2c  firmware 20.31.1014")) << text;
  EXPECT_TRUE(Has(text, "port 1  ACTIVE  InfiniBand  MTU 4096")) << text;
  EXPECT_TRUE(Has(text, "gid 0  fe80:0000:0000:0000:0c42:a1ff:fe65:8b2c  IB")) << text;
  EXPECT_TRUE(Has(text, "port 2  DOWN  Ethernet  MTU unknown")) << text;
  EXPECT_TRUE(Has(text, "no GIDs")) << text;
  EXPECT_TRUE(Has(text, "virtual addresses, provider keys, local registration")) << text;
  EXPECT_TRUE(Has(text, "1073741824")) << text;

  auto j = FabricReportJson(r);
  EXPECT_EQ(j["rdma_devices"][0]["name"], "mlx5_0");
  EXPECT_EQ(j["rdma_devices"][0]["ports"][0]["active_mtu"], 4096);
  EXPECT_EQ(j["rdma_devices"][0]["ports"][0]["gids"][0]["gid"], "fe80:0000:0000:0000:0c42:a1ff:fe65:8b2c");
  EXPECT_EQ(j["rdma_devices"][0]["ports"][1]["gids"].size(), 0u);
  EXPECT_TRUE(j["rdma_note"].is_null());
  EXPECT_EQ(j["choice"]["virtual_addresses"], true);
}

}  // namespace
}  // namespace ptstore::rdma

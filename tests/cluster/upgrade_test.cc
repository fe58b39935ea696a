// Rolling upgrades and integrity on the wire (docs/wire-format.md "Peer
// protocol versions", "Frame integrity"), with real ptstored processes on
// loopback:
//   - a mixed cluster, one node the ptstored-peer-v1 build (the same code
//     speaking only peer protocol 1, no frame MACs): saves and loads both
//     ways, every byte checked, each pair of nodes on the version it agreed;
//   - [cluster] require_integrity refusing that node, logged with both
//     ranges and counted;
//   - a real TCP proxy between two nodes that alters, replays or injects
//     one frame, or alters fetched bytes: each is refused, logged and
//     counted, the load that hit it gets right bytes or a miss, and the next
//     load all its bytes again.
#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <thread>

#include "core/messages.h"
#include "core/rendezvous.h"
#include "ptstore/client.h"
#include "ptstore/keys.h"
#include "tests/cluster/kv_check.h"
#include "tests/cluster/tamper_proxy.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/cluster.h"
#include "tests/testing/http_get.h"

namespace ptstore::testing {
namespace {

using storage::testkv::RandomTokens;
using storage::testkv::SmallLayout;

constexpr const char* kOldPtstored = PTSTORE_PTSTORED_PEER_V1_PATH;

std::vector<uint32_t> PromptShardedTo(uint32_t shard, std::vector<uint32_t> nodes, size_t n, uint64_t seed) {
  for (;; ++seed) {
    auto p = RandomTokens(seed, n);
    const ChainKey root = NextKey(RootKey(kNs, ""), std::span(p).first(SmallLayout().block_tokens));
    if (core::ShardOf(root, nodes) == shard) return p;
  }
}

// The value of the metric sample `line` ("name{labels}") on node i; -1 when
// it is not there.
double Metric(TestCluster& c, size_t i, const std::string& line) {
  const uint16_t port = MetricsPortFromLog(c.node(i));
  if (port == 0) return -1;
  auto r = HttpGet(port, "/metrics");
  if (!r.ok()) return -1;
  const std::string& text = r->body;
  for (size_t at = text.find(line + " "); at != std::string::npos; at = text.find(line + " ", at + 1)) {
    if (at == 0 || text[at - 1] == '\n') return std::stod(text.substr(at + line.size() + 1));
  }
  return -1;
}

// Waits until node i's log contains `what`.
bool WaitLog(TestCluster& c, size_t i, const std::string& what, int timeout_ms = 5000) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < until) {
    if (c.node(i).ReadLog().find(what) != std::string::npos) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

class UpgradeTest : public ::testing::TestWithParam<std::string> {
 protected:
  void TearDown() override {
    if (HasFailure() && cluster_) PrintLogs(*cluster_);
  }
  std::unique_ptr<TestCluster> cluster_;
  std::vector<std::unique_ptr<Client>> clients_;
};

TEST_P(UpgradeTest, AMixedClusterSavesAndLoadsEveryWayByteExact) {
  TestCluster::Options o;
  o.nodes = 3;
  o.data_path = GetParam();
  o.replicate_after = 1000;  // every load of another node's prompt is a fetch
  o.extra_args = {"--metrics-port", "auto"};
  o.binaries = {"", kOldPtstored, ""};  // node 1: the previous wire version
  cluster_ = std::make_unique<TestCluster>(o);
  ASSERT_TRUE(cluster_->Start().ok());
  ASSERT_TRUE(cluster_->WaitConverged().ok());
  ConnectEach(*cluster_, &clients_);
  // A prompt saved through each node, indexed by each node: every pair of
  // nodes looks up, announces and fetches in both directions.
  std::vector<std::vector<uint32_t>> prompts;
  uint64_t seed = 100;
  for (size_t saver = 0; saver < 3; ++saver) {
    for (uint32_t shard = 0; shard < 3; ++shard) {
      prompts.push_back(PromptShardedTo(shard, {0, 1, 2}, 64, seed));
      seed = seed * 7 + 13;
      SaveKv(*clients_[saver], prompts.back());
    }
  }
  for (size_t loader = 0; loader < 3; ++loader) {
    for (size_t k = 0; k < prompts.size(); ++k) {
      EXPECT_EQ(LoadAndCheck(*clients_[loader], prompts[k]), 64u) << "node " << loader << " prompt " << k;
    }
  }
  // The new nodes speak version 2 to each other and 1 to the old one; the
  // old one only 1.
  EXPECT_GT(Metric(*cluster_, 0, "ptstore_peer_sessions_total{version=\"1\"}"), 0);
  EXPECT_GT(Metric(*cluster_, 0, "ptstore_peer_sessions_total{version=\"2\"}"), 0);
  EXPECT_GT(Metric(*cluster_, 2, "ptstore_peer_sessions_total{version=\"2\"}"), 0);
  EXPECT_GT(Metric(*cluster_, 1, "ptstore_peer_sessions_total{version=\"1\"}"), 0);
  EXPECT_EQ(Metric(*cluster_, 1, "ptstore_peer_sessions_total{version=\"2\"}"), 0);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(Metric(*cluster_, i, "ptstore_peer_integrity_failures_total"), 0) << "node " << i;
    EXPECT_EQ(Metric(*cluster_, i, "ptstore_peer_version_refusals_total"), 0) << "node " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(DataPaths, UpgradeTest, ::testing::Values("tcp", "rma"),
                         [](const auto& info) { return info.param; });

TEST(RequireIntegrityTest, RefusesTheOldNodeWithBothRangesNamed) {
  TestCluster::Options o;
  o.nodes = 3;
  o.replicate_after = 1000;
  o.extra_args = {"--metrics-port", "auto"};
  o.binaries = {"", kOldPtstored, ""};
  o.cluster_config = {"require_integrity = true", "", "require_integrity = true"};
  TestCluster cluster(o);
  ASSERT_TRUE(cluster.Start().ok());
  ASSERT_TRUE(cluster.WaitState(0, 2, MemberState::kAlive).ok());
  ASSERT_TRUE(cluster.WaitState(2, 0, MemberState::kAlive).ok());
  ASSERT_TRUE(cluster.WaitState(0, 1, MemberState::kDead).ok());
  ASSERT_TRUE(cluster.WaitState(1, 0, MemberState::kDead).ok());
  std::vector<std::unique_ptr<Client>> clients;
  ConnectEach(cluster, &clients);
  // Between the upgraded nodes everything works; the old node's data is a
  // miss for them and theirs for it, never an error.
  const auto p02 = RandomTokens(7, 64), p1 = RandomTokens(8, 64);
  SaveKv(*clients[0], p02);
  SaveKv(*clients[1], p1);
  EXPECT_EQ(LoadAndCheck(*clients[2], p02), 64u);
  EXPECT_EQ(LoadAndCheck(*clients[0], p1), 0u);
  EXPECT_EQ(LoadAndCheck(*clients[1], p02), 0u);
  // Each side says why, naming both ranges: the new node where the old one
  // dialled it, the old one where the new one dialled it.
  EXPECT_TRUE(WaitLog(cluster, 0, "no common peer-protocol version: we speak [2, 2], it speaks [1, 1]"))
      << cluster.node(0).ReadLog();
  EXPECT_TRUE(WaitLog(cluster, 1, "no common peer-protocol version: we speak [1, 1], it speaks [2, 2]"))
      << cluster.node(1).ReadLog();
  EXPECT_GT(Metric(cluster, 0, "ptstore_peer_version_refusals_total"), 0);
  EXPECT_EQ(Metric(cluster, 0, "ptstore_peer_sessions_total{version=\"1\"}"), 0);
  if (HasFailure()) PrintLogs(cluster);
}

TEST(RequireIntegrityTest, AnOldBuildCannotRequireIt) {
  TestCluster::Options o;
  o.nodes = 1;
  o.binaries = {kOldPtstored};
  o.cluster_config = {"require_integrity = true"};
  TestCluster cluster(o);
  Status st = cluster.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("require_integrity needs peer protocol 2"), std::string::npos) << st.ToString();
}

TEST(RequireIntegrityTest, AValueThatIsNotABooleanIsRefusedNamingTheKey) {
  TestCluster::Options o;
  o.nodes = 1;
  o.cluster_config = {"require_integrity = \"yes\""};
  TestCluster cluster(o);
  Status st = cluster.Start();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("'require_integrity' has the wrong type"), std::string::npos) << st.ToString();
}

// Two nodes; node 0 reaches node 1 only through the proxy (node 1 reaches
// node 0 directly).
class TamperTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TestCluster::Options o;
    o.nodes = 2;
    o.replicate_after = 1000;
    o.extra_args = {"--metrics-port", "auto"};
    cluster_ = std::make_unique<TestCluster>(o);
    ASSERT_TRUE(cluster_->Start().ok());
    ASSERT_EQ(cluster_->Stop(0), 0);
    const std::string real = cluster_->address(1);
    proxy_ = std::make_unique<TamperProxy>(static_cast<uint16_t>(std::stoul(real.substr(real.rfind(':') + 1))));
    ASSERT_TRUE(proxy_->Start().ok());
    std::string text = cluster_->ClusterText({0, 1});
    text.replace(text.find(real), real.size(), "127.0.0.1:" + std::to_string(proxy_->port()));
    const std::string file = cluster_->dir() + "/cluster-via-proxy.toml";
    std::ofstream(file) << text;
    cluster_->SetClusterFileOf(0, file);
    ASSERT_TRUE(cluster_->StartNode(0).ok());
    ASSERT_TRUE(cluster_->WaitConverged().ok());
    ConnectEach(*cluster_, &clients_);
    // Indexed and owned by node 1: node 0's loads ask node 1 and fetch from
    // it, through the proxy.
    prompt_ = PromptShardedTo(1, {0, 1}, 64, 500);
    SaveKv(*clients_[1], prompt_);
    ASSERT_EQ(LoadAndCheck(*clients_[0], prompt_), 64u);
  }
  void TearDown() override {
    if ((HasFailure() || getenv("PTS_SHOW_LOGS")) && cluster_) PrintLogs(*cluster_);
  }

  // Arms the proxy, loads through node 0: right bytes (LoadAndCheck checks
  // every one) or a miss; then the tamper was refused on node `refuser`,
  // logged and counted, and later loads get every byte again. `retried`:
  // node 0 itself refused it, so its fetch was made again on another
  // connection and the load got every byte.
  void ExpectRefused(TamperProxy::Mode mode, core::MsgType type, size_t refuser, bool retried = false) {
    const double before = Metric(*cluster_, refuser, "ptstore_peer_integrity_failures_total");
    ASSERT_EQ(before, 0);
    proxy_->Arm(mode, static_cast<uint16_t>(type));
    const uint64_t got = LoadAndCheck(*clients_[0], prompt_);
    EXPECT_TRUE(got == 0 || got == 64u) << got;
    if (retried) {
      EXPECT_EQ(got, 64u);
      EXPECT_EQ(Metric(*cluster_, 0, "ptstore_fetch_retries_total"), 1);
    }
    EXPECT_EQ(proxy_->fired(), 1) << "the proxy never saw what it was armed for";
    EXPECT_TRUE(WaitLog(*cluster_, refuser, "frame integrity check failed")) << cluster_->node(refuser).ReadLog();
    EXPECT_EQ(Metric(*cluster_, refuser, "ptstore_peer_integrity_failures_total"), 1);
    // The connection was closed; a new one serves the next loads whole.
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    uint64_t again = 0;
    while (again != 64u && std::chrono::steady_clock::now() < until) {
      again = LoadAndCheck(*clients_[0], prompt_);
      if (again != 64u) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_EQ(again, 64u);
    EXPECT_EQ(proxy_->fired(), 1);
  }

  std::unique_ptr<TestCluster> cluster_;
  std::unique_ptr<TamperProxy> proxy_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<uint32_t> prompt_;
};

TEST_F(TamperTest, AnAlteredRequestIsRefusedByItsReceiver) {
  ExpectRefused(TamperProxy::Mode::kFlipRequest, core::MsgType::kPeerFetch, 1);
}

TEST_F(TamperTest, AReplayedRequestIsRefusedByItsReceiver) {
  ExpectRefused(TamperProxy::Mode::kReplayRequest, core::MsgType::kPeerFetch, 1);
}

TEST_F(TamperTest, AnInjectedReplyIsRefused) {
  ExpectRefused(TamperProxy::Mode::kInjectReply, core::MsgType::kPeerFetchReply, 0, /*retried=*/true);
}

TEST_F(TamperTest, AlteredFetchedBytesAreNeverServedAndTheFetchIsMadeAgain) {
  ExpectRefused(TamperProxy::Mode::kFlipBulk, core::MsgType::kPeerFetchReply, 0, /*retried=*/true);
  // The altered bytes reached node 0's arena but were never served.
  EXPECT_EQ(LoadAndCheck(*clients_[0], prompt_), 64u);
}

}  // namespace
}  // namespace ptstore::testing

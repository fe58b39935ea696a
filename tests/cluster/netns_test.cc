// A cluster of separate hosts: three ptstored in their own network
// namespaces, joined by veth pairs to a bridge (created and removed by the
// test). Cross-host loads, a partition (one host's link goes down) and its
// healing, with a removal made during the partition reaching the cut-off
// host afterwards.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "ptstore/client.h"
#include "tests/storage/kv_fixture.h"
#include "tests/cluster/kv_check.h"
#include "tests/testing/cluster.h"
#include "tests/testing/netns.h"

namespace ptstore::testing {
namespace {

using storage::testkv::Cat;
using storage::testkv::RandomTokens;
using storage::testkv::Kv;
using storage::testkv::kBpt;
using storage::testkv::SmallLayout;

class NetnsClusterTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (std::string why = NetnsLab::WhyNot(); !why.empty()) GTEST_SKIP() << why;
    ASSERT_TRUE(lab_.Create(3).ok());
    TestCluster::Options o;
    o.nodes = 3;
    o.data_path = GetParam();
    o.hosts = lab_.hosts();
    for (size_t i = 0; i < 3; ++i) o.wrappers.push_back(lab_.Wrapper(i));
    o.replicate_after = 1;  // every remote load leaves a replica
    cluster_ = std::make_unique<TestCluster>(o);
    ASSERT_TRUE(cluster_->Start().ok());
    ASSERT_TRUE(cluster_->WaitConverged().ok());
    ConnectEach(*cluster_, &clients_);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) PrintLogs(*cluster_);
    clients_.clear();
    cluster_.reset();  // before the lab's namespaces go
  }
  void Save(size_t node, const std::vector<uint32_t>& prompt) { SaveKv(*clients_[node], prompt); }

  NetnsLab lab_;
  std::unique_ptr<TestCluster> cluster_;
  std::vector<std::unique_ptr<Client>> clients_;
};

TEST_P(NetnsClusterTest, PartitionAndRecovery) {
  const auto doc = RandomTokens(1, 128);
  const auto other = RandomTokens(2, 96);
  Save(0, doc);
  Save(1, other);
  // Across hosts, byte-exact; host 2 keeps replicas of both.
  EXPECT_EQ(LoadAndCheck(*clients_[2], doc), doc.size());
  EXPECT_EQ(LoadAndCheck(*clients_[2], other), other.size());
  EXPECT_EQ(LoadAndCheck(*clients_[1], doc), doc.size());

  // Cut host 2 off. Nothing hangs: it serves what it holds (its replicas)
  // and misses the rest; the others carry on without it.
  ASSERT_TRUE(lab_.Cut(2).ok());
  const auto fresh = RandomTokens(3, 64);
  Save(0, fresh);
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(LoadAndCheck(*clients_[2], fresh), 0u);
  EXPECT_EQ(LoadAndCheck(*clients_[2], doc), doc.size());  // its replica
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  // Once hosts 0 and 1 see host 2 dead, its roots have moved to them and
  // what it was the shard of is announced again.
  ASSERT_TRUE(cluster_->WaitState(0, 2, MemberState::kDead).ok());
  ASSERT_TRUE(cluster_->WaitState(1, 2, MemberState::kDead).ok());
  ASSERT_TRUE(cluster_->WaitState(2, 0, MemberState::kDead).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(LoadAndCheck(*clients_[1], fresh), fresh.size());
  // A removal while host 2 cannot hear it.
  ASSERT_TRUE(clients_[0]->Remove(kNs, doc).ok());
  EXPECT_EQ(LoadAndCheck(*clients_[1], doc), 0u);

  // Heal: host 2 rejoins, gets the removal, and loads what it missed.
  ASSERT_TRUE(lab_.Heal(2).ok());
  ASSERT_TRUE(cluster_->WaitConverged().ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (clients_[2]->Lookup(kNs, doc)->matched_tokens != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(LoadAndCheck(*clients_[2], doc), 0u) << "the removed prefix is still served after healing";
  EXPECT_EQ(LoadAndCheck(*clients_[2], fresh), fresh.size());
  EXPECT_EQ(LoadAndCheck(*clients_[2], other), other.size());
}

INSTANTIATE_TEST_SUITE_P(DataPaths, NetnsClusterTest, ::testing::Values("tcp", "rma"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ptstore::testing

// A whole cluster in one process (tests/cluster/in_process_cluster.h): real
// Stores and real storage::Clusters over the in-process loopback transport
// and over the real TCP and RMA transports. The same promises as the real-process
// tests (cluster_test.cc: fetch, removal, death, restart, replica adoption),
// and, over the loopback net, faults real processes cannot time: an owner
// dying between its pin and the copy, a fetch answered past its deadline,
// lost messages, a partition that heals while a load runs. Every load is
// checked byte for byte (Load returns Corruption for wrong bytes); a miss
// is a short load with an OK status, never an error.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "core/logging.h"
#include "core/rendezvous.h"
#include "ptstore/keys.h"
#include "tests/cluster/in_process_cluster.h"
#include "tests/storage/kv_fixture.h"

namespace ptstore::testing {
namespace {

using storage::testkv::RandomTokens;
using storage::testkv::kBt;
using storage::testkv::Tokens;
using Link = InProcessCluster::Link;
using core::MsgType;

constexpr size_t kPrompt = 16 * kBt;  // 16 blocks, 16 KiB

// A prompt whose root's shard (all of `alive` alive) is `shard`.
Tokens PromptShardedTo(uint32_t shard, const std::vector<uint32_t>& alive, uint64_t seed) {
  for (;; ++seed) {
    Tokens p = RandomTokens(seed, kPrompt);
    const ChainKey root = NextKey(RootKey(InProcessCluster::kNs, ""), std::span(p).first(kBt));
    if (core::ShardOf(root, alive) == shard) return p;
  }
}

uint64_t LoadOk(InProcessCluster& c, uint32_t node, const Tokens& t) {
  Result<uint64_t> n = c.Load(node, t);
  EXPECT_TRUE(n.ok()) << "a load on node " << node << ": " << n.status().ToString();
  return n.ok() ? *n : 0;
}

class InProcessClusterTest : public ::testing::TestWithParam<Link> {
 protected:
  void SetUp() override {
    level_ = core::GetLogLevel();
    core::SetLogLevel(core::LogLevel::kError);  // three nodes' INFO lines per test
  }
  void TearDown() override {
    cluster_.reset();
    core::SetLogLevel(level_);
  }
  InProcessCluster& StartCluster(InProcessCluster::Options o = {}) {
    o.link = GetParam();
    cluster_ = std::make_unique<InProcessCluster>(o);
    Status st = cluster_->Start();
    EXPECT_TRUE(st.ok()) << st.ToString();
    st = cluster_->WaitConverged();
    EXPECT_TRUE(st.ok()) << st.ToString();
    return *cluster_;
  }
  std::unique_ptr<InProcessCluster> cluster_;
  core::LogLevel level_ = core::LogLevel::kInfo;
};

// ------------------------------------------------ what the real processes cover

TEST_P(InProcessClusterTest, ASaveOnOneNodeLoadsByteExactOnTheOthers) {
  InProcessCluster& c = StartCluster();
  const Tokens p = RandomTokens(1, kPrompt);
  ASSERT_TRUE(c.Save(0, p).ok());
  EXPECT_EQ(LoadOk(c, 1, p), kPrompt);
  EXPECT_EQ(LoadOk(c, 2, p), kPrompt);
  // The bytes stayed the owner's: fetched, not stored again.
  EXPECT_GE(c.cluster(1).counters().fetch_requests.load(), 1u);
  EXPECT_EQ(c.store(1).Stats().owned_bytes, 0u);
  // Counted by the path that carried them: the whole prompt, once per node.
  for (uint32_t n : {1u, 2u}) {
    const storage::ClusterCounters& k = c.cluster(n).counters();
    const uint64_t prompt_bytes = kPrompt / kBt * storage::testkv::kBb;
    EXPECT_EQ(k.bytes_loopback.load(), GetParam() == Link::kLoopback ? prompt_bytes : 0u) << n;
    EXPECT_EQ(k.bytes_tcp.load(), GetParam() == Link::kTcp ? prompt_bytes : 0u) << n;
    EXPECT_EQ(k.bytes_rma.load(), GetParam() == Link::kRma ? prompt_bytes : 0u) << n;
  }
}

TEST_P(InProcessClusterTest, RemovalReachesEveryNode) {
  InProcessCluster& c = StartCluster();
  const Tokens p = RandomTokens(2, kPrompt);
  ASSERT_TRUE(c.Save(0, p).ok());
  ASSERT_EQ(LoadOk(c, 1, p), kPrompt);
  // On a node that knows the prompt (it loaded it), as in cluster_test.cc.
  ASSERT_TRUE(c.Remove(1, p).ok());
  for (uint32_t n = 0; n < 3; ++n) EXPECT_EQ(LoadOk(c, n, p), 0u) << "node " << n;
}

// A removal sent to a node that never saved, loaded or looked the prompt up
// (and is not its root's shard) asks the shard first, as a load would, and
// removes it everywhere.
TEST_P(InProcessClusterTest, RemovalFromANodeThatNeverSawThePromptReachesEveryNode) {
  InProcessCluster& c = StartCluster();
  const Tokens p = PromptShardedTo(1, {0, 1, 2}, 6);
  ASSERT_TRUE(c.Save(0, p).ok());
  ASSERT_EQ(LoadOk(c, 1, p), kPrompt);
  Result<RemoveResult> r = c.Remove(2, p);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->nodes, 0u);
  for (uint32_t n = 0; n < 3; ++n) EXPECT_EQ(LoadOk(c, n, p), 0u) << "node " << n;
}

TEST_P(InProcessClusterTest, ADeadOwnerIsAMissNeverAnError) {
  InProcessCluster& c = StartCluster();
  const Tokens p = PromptShardedTo(1, {0, 1, 2}, 3);  // the shard survives
  ASSERT_TRUE(c.Save(0, p).ok());
  ASSERT_EQ(LoadOk(c, 2, p), kPrompt);
  c.Kill(0);
  EXPECT_EQ(LoadOk(c, 2, p), 0u);
  ASSERT_TRUE(c.WaitConverged().ok());
  EXPECT_EQ(LoadOk(c, 1, p), 0u);
}

// As cluster_test.cc's AReplicaOfARestartedOwnersDataStaysLoadableEverywhere:
// the owner restarts empty while another node keeps a replica, which is
// then the only copy; a save of a question on it through the replica's
// node leaves the whole prompt loadable everywhere.
TEST_P(InProcessClusterTest, AReplicaOfARestartedOwnersDataIsAdoptedAndLoadsEverywhere) {
  InProcessCluster::Options o;
  o.replicate_after = 1;  // the first load keeps a replica
  InProcessCluster& c = StartCluster(o);
  const Tokens doc = PromptShardedTo(1, {0, 1, 2}, 4);
  ASSERT_TRUE(c.Save(1, doc).ok());  // owned and indexed by node 1
  ASSERT_EQ(LoadOk(c, 0, doc), kPrompt);
  ASSERT_GT(c.store(0).Stats().replica_bytes, 0u);
  c.Kill(1);
  ASSERT_TRUE(c.WaitConverged().ok());  // node 1 dead everywhere
  ASSERT_TRUE(c.Restart(1).ok());       // empty: the document is gone there
  ASSERT_TRUE(c.WaitConverged().ok());
  const Tokens question = storage::testkv::Cat(doc, RandomTokens(5, 4 * kBt));
  ASSERT_TRUE(c.Save(0, question).ok());
  EXPECT_EQ(LoadOk(c, 0, question), question.size());
  EXPECT_EQ(LoadOk(c, 2, question), question.size());
  EXPECT_EQ(LoadOk(c, 1, question), question.size());
  EXPECT_EQ(c.store(0).Stats().replica_bytes, 0u) << "the replica is node 0's own now";
}

TEST_P(InProcessClusterTest, ARestartedOwnerIsAMissUntilSavedAgainThenLoads) {
  InProcessCluster& c = StartCluster();
  const Tokens p = PromptShardedTo(1, {0, 1, 2}, 5);
  ASSERT_TRUE(c.Save(0, p).ok());
  ASSERT_EQ(LoadOk(c, 2, p), kPrompt);
  c.Kill(0);
  ASSERT_TRUE(c.Restart(0).ok());
  ASSERT_TRUE(c.WaitConverged().ok());
  EXPECT_EQ(LoadOk(c, 2, p), 0u);  // its DRAM is gone: a miss
  Result<SaveResult> again = c.Save(2, p);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(again->stored_tokens, kPrompt);  // stored again, not counted as held by node 0
  EXPECT_EQ(LoadOk(c, 0, p), kPrompt);
}

INSTANTIATE_TEST_SUITE_P(Links, InProcessClusterTest, ::testing::Values(Link::kLoopback, Link::kTcp, Link::kRma),
                         [](const auto& info) {
                           return info.param == Link::kTcp ? "tcp" : info.param == Link::kRma ? "rma" : "loopback";
                         });

// ------------------------------------------------ faults at the transport

class LoopbackFaultTest : public InProcessClusterTest {};

TEST_P(LoopbackFaultTest, AnOwnerDyingBetweenItsPinAndTheCopyIsAMissAndItsPinsGo) {
  InProcessCluster& c = StartCluster();
  const Tokens p = PromptShardedTo(1, {0, 1, 2}, 6);
  ASSERT_TRUE(c.Save(0, p).ok());
  std::atomic<uint64_t> leases_at_pin{0};
  c.net().OnFetchPinned([&](uint32_t owner) {
    leases_at_pin = c.store(owner).Stats().active_leases;
    c.net().Kill(owner);  // gone after pinning, before a byte moved
  });
  EXPECT_EQ(LoadOk(c, 2, p), 0u);
  c.net().OnFetchPinned(nullptr);
  EXPECT_GE(leases_at_pin.load(), 1u) << "the hook ran after the owner pinned";
  EXPECT_EQ(c.store(0).Stats().active_leases, 0u) << "the dead fetch's pins were released";
  EXPECT_EQ(c.store(2).Stats().owned_bytes + c.store(2).Stats().replica_bytes, 0u) << "nothing kept of it";
}

TEST_P(LoopbackFaultTest, AFetchAnsweredPastItsDeadlineIsAMissThenLoadsAgain) {
  InProcessCluster& c = StartCluster();
  const Tokens p = PromptShardedTo(1, {0, 1, 2}, 7);
  ASSERT_TRUE(c.Save(0, p).ok());
  c.net().Delay(2, 0, MsgType::kPeerFetch, std::chrono::milliseconds(2000));  // past rpc_timeout_ms
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_EQ(LoadOk(c, 2, p), 0u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(1500)) << "the deadline held";
  EXPECT_EQ(c.store(0).Stats().active_leases, 0u) << "the late answer's pins were released";
  c.net().Delay(2, 0, MsgType::kPeerFetch, std::chrono::milliseconds(0));
  ASSERT_TRUE(c.WaitConverged().ok());
  EXPECT_EQ(LoadOk(c, 2, p), kPrompt);
}

TEST_P(LoopbackFaultTest, ALostFetchIsAMissAndTheNextLoadHits) {
  InProcessCluster& c = StartCluster();
  const Tokens p = PromptShardedTo(1, {0, 1, 2}, 8);
  ASSERT_TRUE(c.Save(0, p).ok());
  const uint64_t delivered = c.net().Delivered(MsgType::kPeerFetch);
  c.net().Drop(2, 0, MsgType::kPeerFetch, 1);
  EXPECT_EQ(LoadOk(c, 2, p), 0u);
  EXPECT_EQ(c.net().Delivered(MsgType::kPeerFetch), delivered) << "the fetch was lost on the way";
  ASSERT_TRUE(c.WaitConverged().ok());
  EXPECT_EQ(LoadOk(c, 2, p), kPrompt);
}

TEST_P(LoopbackFaultTest, APartitionThatHealsMidLoadCostsAMissThenLoads) {
  InProcessCluster& c = StartCluster();
  const Tokens p = PromptShardedTo(1, {0, 1, 2}, 9);
  ASSERT_TRUE(c.Save(0, p).ok());
  c.net().Partition(2, 0);
  std::thread heal([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // inside the fetch's deadline
    c.net().Heal(2, 0);
  });
  EXPECT_EQ(LoadOk(c, 2, p), 0u);  // the request was lost before the heal
  heal.join();
  ASSERT_TRUE(c.WaitConverged().ok());
  EXPECT_EQ(LoadOk(c, 2, p), kPrompt);
}

TEST_P(LoopbackFaultTest, APartitionedPairSeesEachOtherDeadAndTheRestServes) {
  InProcessCluster& c = StartCluster();
  const Tokens p = PromptShardedTo(1, {0, 1, 2}, 10);
  ASSERT_TRUE(c.Save(0, p).ok());
  c.net().Partition(2, 0);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto state_of = [&](uint32_t at, uint32_t of) {
    for (const auto& m : c.cluster(at).MemberStatus().members) {
      if (m.id == of) return m.state;
    }
    return core::MemberState::kSelf;
  };
  while (state_of(2, 0) != core::MemberState::kDead && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(state_of(2, 0), core::MemberState::kDead);
  EXPECT_EQ(state_of(1, 0), core::MemberState::kAlive);
  EXPECT_EQ(LoadOk(c, 2, p), 0u);       // node 2 cannot reach the owner: a miss
  EXPECT_EQ(LoadOk(c, 1, p), kPrompt);  // node 1 can
  c.net().Heal(2, 0);
  ASSERT_TRUE(c.WaitConverged().ok());
  EXPECT_EQ(LoadOk(c, 2, p), kPrompt);
}

TEST_P(LoopbackFaultTest, AnOwnerKilledDuringManyLoadsCostsMissesNeverWrongBytesOrErrors) {
  InProcessCluster& c = StartCluster();
  std::vector<Tokens> prompts;
  for (uint64_t s = 0; s < 8; ++s) {
    prompts.push_back(PromptShardedTo(1, {0, 1, 2}, 100 + s * 50));
    ASSERT_TRUE(c.Save(0, prompts.back()).ok());
  }
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> loads{0}, errors{0};
  std::thread loader([&] {
    for (size_t i = 0; !stop.load(); ++i) {
      Result<uint64_t> n = c.Load(2, prompts[i % prompts.size()]);
      loads++;
      if (!n.ok() || (*n != 0 && *n != kPrompt)) errors++;
    }
  });
  while (loads.load() < 20) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  c.net().Kill(0);  // mid-load: fetches in flight fail before their copy
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  stop = true;
  loader.join();
  EXPECT_EQ(errors.load(), 0u) << "of " << loads.load() << " loads";
  EXPECT_EQ(LoadOk(c, 2, prompts[0]), 0u);
}

INSTANTIATE_TEST_SUITE_P(Loopback, LoopbackFaultTest, ::testing::Values(Link::kLoopback),
                         [](const auto&) { return "loopback"; });

}  // namespace
}  // namespace ptstore::testing

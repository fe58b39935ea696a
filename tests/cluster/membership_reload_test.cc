// Elastic membership by SIGHUP (storage/cluster/cluster.h, Reload), with real
// ptstored processes on loopback ports: a node that joins is refused until
// its peers re-read the cluster file, then serves and fetches; a node taken
// out of the file stops being asked (although it still runs) and the others
// refuse it; a node at a new address is reached there; a bad file changes
// nothing. Every loaded byte is checked: after any change a load returns the
// right bytes or a miss, never other bytes.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "core/rendezvous.h"
#include "ptstore/client.h"
#include "ptstore/keys.h"
#include "tests/cluster/kv_check.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/client.h"
#include "tests/testing/cluster.h"
#include "tests/testing/http_get.h"

namespace ptstore::testing {
namespace {

using storage::testkv::RandomTokens;
using storage::testkv::SmallLayout;
using Prompt = std::vector<uint32_t>;

constexpr size_t kTokens = 64;

// A prompt whose root's shard, with all of `nodes` alive, is `shard`.
Prompt PromptShardedTo(uint32_t shard, std::vector<uint32_t> nodes, uint64_t seed) {
  for (;; ++seed) {
    Prompt p = RandomTokens(seed, kTokens);
    const ChainKey root = NextKey(RootKey(kNs, ""), std::span(p).first(SmallLayout().block_tokens));
    if (core::ShardOf(root, nodes) == shard) return p;
  }
}

// Loads `p` through `c` (every byte checked each time) until it loads whole
// or `timeout_ms` passes; returns the tokens of the last load.
uint64_t LoadWhole(Client& c, const Prompt& p, int timeout_ms = 10000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  uint64_t n = 0;
  do {
    n = LoadAndCheck(c, p);
    if (n == p.size() || ::testing::Test::HasFailure()) return n;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (std::chrono::steady_clock::now() < deadline);
  return n;
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) n++;
  return n;
}

// Waits until node i's log holds `what` at least `times` times.
bool WaitLog(TestCluster& cluster, size_t i, const std::string& what, size_t times = 1, int timeout_ms = 10000) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    if (Count(cluster.node(i).ReadLog(), what) >= times) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

class MembershipReloadTest : public ::testing::Test {
 protected:
  // `nodes` nodes of which the first `listed` are in the cluster file and
  // running. Replicas off: a load of another node's data is a fetch from its
  // owner every time, so whom a node asks shows in what it loads.
  void StartCluster(size_t nodes, size_t listed, std::vector<std::string> extra_args = {}) {
    TestCluster::Options o;
    o.extra_args = std::move(extra_args);
    o.nodes = nodes;
    o.listed = listed;
    o.replicate_after = 0;
    o.negative_ttl_ms = 0;
    cluster_ = std::make_unique<TestCluster>(o);
    ASSERT_TRUE(cluster_->Start().ok());
    std::vector<size_t> members;
    for (size_t i = 0; i < listed; ++i) members.push_back(i);
    for (size_t i = 0; i < listed; ++i) ASSERT_TRUE(cluster_->WaitMembers(i, members).ok());
    clients_.resize(nodes);
    for (size_t i = 0; i < listed; ++i) Connect(i);
  }
  void Connect(size_t i) {
    auto c = cluster_->Connect(i);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    Status st = (*c)->CreateNamespace(kNs, SmallLayout()).status();
    // A peer's request may have created it here already, with this layout.
    ASSERT_TRUE(st.ok() || st.code() == Code::kAlreadyExists) << st.ToString();
    clients_[i] = std::move(*c);
  }
  Client& client(size_t i) { return *clients_[i]; }
  void TearDown() override {
    if (HasFailure() && cluster_) PrintLogs(*cluster_);
  }

  std::unique_ptr<TestCluster> cluster_;
  std::vector<std::unique_ptr<Client>> clients_;
};

TEST_F(MembershipReloadTest, AJoinerIsRefusedUntilSighupThenServesAndFetches) {
  StartCluster(3, 2);
  // Prompts saved by nodes 0 and 1, half of them with roots that node 2
  // will be the shard of once it is a member (seeds far apart: the search
  // for such a root walks up from its seed, and two prompts must differ).
  std::vector<Prompt> from0, from1;
  for (uint64_t i = 0; i < 6; ++i) {
    from0.push_back(i % 2 ? PromptShardedTo(2, {0, 1, 2}, 1000 * i + 1) : RandomTokens(1000 * i + 250, kTokens));
    from1.push_back(i % 2 ? PromptShardedTo(2, {0, 1, 2}, 1000 * i + 500) : RandomTokens(1000 * i + 750, kTokens));
    SaveKv(client(0), from0.back());
    SaveKv(client(1), from1.back());
  }
  for (const Prompt& p : from0) EXPECT_EQ(LoadWhole(client(1), p), p.size());
  for (const Prompt& p : from1) EXPECT_EQ(LoadWhole(client(0), p), p.size());

  // Node 2 starts with a file that lists it; 0 and 1 still have the old one.
  ASSERT_TRUE(cluster_->WriteClusterFile({0, 1, 2}).ok());
  ASSERT_TRUE(cluster_->StartNode(2).ok());
  EXPECT_TRUE(WaitLog(*cluster_, 0, "refusing node 2")) << "node 0 did not refuse node 2 before its SIGHUP";
  {
    auto st = client(0).GetClusterStatus();
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st->members.size(), 2u) << "node 0 took node 2 in without a SIGHUP";
  }

  ASSERT_TRUE(cluster_->Hangup(0).ok());
  ASSERT_TRUE(cluster_->Hangup(1).ok());
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(cluster_->WaitMembers(i, {0, 1, 2}).ok()) << "node " << i;
  EXPECT_TRUE(WaitLog(*cluster_, 0, "reloaded: 3 members; joined 2; left none; moved none"));
  Connect(2);

  // Node 2 fetches what the others saved (roots it is now the shard of
  // included: their owners announced them to it).
  for (const Prompt& p : from0) EXPECT_EQ(LoadWhole(client(2), p), p.size());
  for (const Prompt& p : from1) EXPECT_EQ(LoadWhole(client(2), p), p.size());
  // And serves what it saves, to both.
  std::vector<Prompt> from2;
  for (uint64_t i = 0; i < 6; ++i) {
    from2.push_back(PromptShardedTo(static_cast<uint32_t>(i % 3), {0, 1, 2}, 50000 + 1000 * i));
    SaveKv(client(2), from2.back());
  }
  for (const Prompt& p : from2) {
    EXPECT_EQ(LoadWhole(client(0), p), p.size());
    EXPECT_EQ(LoadWhole(client(1), p), p.size());
  }
  // What 0 and 1 had still loads between them.
  for (const Prompt& p : from0) EXPECT_EQ(LoadWhole(client(1), p), p.size());
  for (const Prompt& p : from1) EXPECT_EQ(LoadWhole(client(0), p), p.size());

  // Node 1 leaves the file (it keeps running, with its old file).
  ASSERT_TRUE(cluster_->WriteClusterFile({0, 2}).ok());
  ASSERT_TRUE(cluster_->Hangup(0).ok());
  ASSERT_TRUE(cluster_->Hangup(2).ok());
  ASSERT_TRUE(cluster_->WaitMembers(0, {0, 2}).ok());
  ASSERT_TRUE(cluster_->WaitMembers(2, {0, 2}).ok());
  EXPECT_TRUE(WaitLog(*cluster_, 0, "refusing node 1")) << "node 0 still admits node 1";
  // Nobody asks node 1 for its data any more: a miss (right bytes of what
  // loads, if anything), although node 1 still holds all of it.
  for (const Prompt& p : from1) {
    EXPECT_LT(LoadAndCheck(client(0), p), p.size()) << "node 0 still fetches from node 1";
    EXPECT_LT(LoadAndCheck(client(2), p), p.size()) << "node 2 still fetches from node 1";
    EXPECT_EQ(LoadAndCheck(client(1), p), p.size());  // its own
  }
  // Everything 0 and 2 own still loads on both.
  for (const Prompt& p : from0) EXPECT_EQ(LoadWhole(client(2), p), p.size());
  for (const Prompt& p : from2) EXPECT_EQ(LoadWhole(client(0), p), p.size());
  // A save of what only the departed node held stores it again, for everyone.
  for (const Prompt& p : from1) {
    SaveKv(client(0), p);
    EXPECT_EQ(LoadAndCheck(client(0), p), p.size());
    EXPECT_EQ(LoadWhole(client(2), p), p.size());
  }
}

TEST_F(MembershipReloadTest, LoadsWhileNodesJoinLeaveAndComeBackAreRightBytesOrAMiss) {
  StartCluster(3, 2);
  std::vector<Prompt> prompts;
  for (uint64_t i = 0; i < 12; ++i) {
    prompts.push_back(i % 3 == 2 ? PromptShardedTo(2, {0, 1, 2}, 90000 + 1000 * i)
                                 : RandomTokens(90000 + 1000 * i + 500, kTokens));
    SaveKv(client(i % 2), prompts.back());
  }
  // Readers on nodes 0 and 1, each with its own connection, load every
  // prompt over and over while the membership changes under them; every
  // byte that loads is checked (LoadAndCheck).
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> loads{0}, whole{0};
  std::vector<std::thread> readers;
  // Stops and joins the readers however the test ends (an ASSERT returns early).
  struct Joiner {
    std::atomic<bool>& stop;
    std::vector<std::thread>& threads;
    ~Joiner() {
      stop = true;
      for (std::thread& t : threads) {
        if (t.joinable()) t.join();
      }
    }
  } joiner{stop, readers};
  for (size_t node : {0, 1}) {
    auto c = cluster_->Connect(node);
    ASSERT_TRUE(c.ok());
    readers.emplace_back([&, c = std::shared_ptr<Client>(std::move(*c))] {
      while (!stop.load()) {
        for (const Prompt& p : prompts) {
          const uint64_t n = LoadAndCheck(*c, p);
          loads++;
          if (n == p.size()) whole++;
        }
      }
    });
  }
  auto settle = [&](size_t i, const std::vector<size_t>& members) {
    ASSERT_TRUE(cluster_->WaitMembers(i, members).ok()) << "node " << i;
  };
  // Node 2 joins.
  ASSERT_TRUE(cluster_->WriteClusterFile({0, 1, 2}).ok());
  ASSERT_TRUE(cluster_->StartNode(2).ok());
  ASSERT_TRUE(cluster_->Hangup(0).ok());
  ASSERT_TRUE(cluster_->Hangup(1).ok());
  for (size_t i : {0, 1, 2}) settle(i, {0, 1, 2});
  Connect(2);
  for (const Prompt& p : prompts) EXPECT_EQ(LoadWhole(client(2), p), p.size());
  // Node 1 leaves (and keeps running).
  ASSERT_TRUE(cluster_->WriteClusterFile({0, 2}).ok());
  ASSERT_TRUE(cluster_->Hangup(0).ok());
  ASSERT_TRUE(cluster_->Hangup(2).ok());
  for (size_t i : {0, 2}) settle(i, {0, 2});
  for (const Prompt& p : prompts) LoadAndCheck(client(2), p);
  // And comes back: its data is reachable again.
  ASSERT_TRUE(cluster_->WriteClusterFile({0, 1, 2}).ok());
  ASSERT_TRUE(cluster_->Hangup(0).ok());
  ASSERT_TRUE(cluster_->Hangup(2).ok());
  for (size_t i : {0, 1, 2}) settle(i, {0, 1, 2});
  for (size_t i : {0, 1, 2}) {
    for (const Prompt& p : prompts) EXPECT_EQ(LoadWhole(client(i), p), p.size()) << "node " << i;
  }
  stop = true;
  for (std::thread& t : readers) t.join();
  EXPECT_GT(loads.load(), 0u);
  EXPECT_GT(whole.load(), 0u);
}

TEST_F(MembershipReloadTest, ABadClusterFileIsRefusedAndChangesNothing) {
  StartCluster(2, 2, {"--metrics-port", "auto"});
  std::vector<Prompt> from1;
  for (uint64_t i = 0; i < 4; ++i) {
    from1.push_back(RandomTokens(7000 + i, kTokens));
    SaveKv(client(1), from1.back());
  }
  for (const Prompt& p : from1) EXPECT_EQ(LoadWhole(client(0), p), p.size());
  const std::string good = cluster_->ClusterText({0, 1});
  struct Bad {
    std::string what, text, reason;
  };
  std::vector<Bad> bad = {
      {"a parse error", good + "[[node]\nid = 5\n", "line"},
      {"this node missing", cluster_->ClusterText({1}), "node id 0 is not in cluster file"},
      {"a duplicate id", good + "[[node]]\nid = 1\naddress = \"127.0.0.1:1\"\n", "duplicate node id 1"},
      {"a duplicate address",
       good + "[[node]]\nid = 9\naddress = \"" + cluster_->address(1) + "\"\n", "duplicate address"},
      {"no nodes", "secret_file = \"" + cluster_->secret_file() + "\"\n", "no [[node]] entries"},
  };
  // This node moved: it cannot follow without a restart.
  {
    std::string moved = good;
    const std::string a0 = cluster_->address(0);
    moved.replace(moved.find(a0), a0.size(), "127.0.0.1:1");
    bad.push_back({"this node moved", moved, "restart ptstored to listen at a new address"});
  }
  size_t refusals = 0;
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.what);
    ASSERT_TRUE(cluster_->WriteClusterText(b.text).ok());
    ASSERT_TRUE(cluster_->Hangup(0).ok());
    ASSERT_TRUE(WaitLog(*cluster_, 0, "refused, membership unchanged", ++refusals));
    const std::string log = cluster_->node(0).ReadLog();
    const std::string line = log.substr(log.rfind("refused, membership unchanged"));
    EXPECT_NE(line.substr(0, line.find('\n')).find(b.reason), std::string::npos) << line.substr(0, line.find('\n'));
    EXPECT_TRUE(cluster_->WaitMembers(0, {0, 1}, 2000).ok());
    for (const Prompt& p : from1) EXPECT_EQ(LoadAndCheck(client(0), p), p.size());
  }
  // A missing file, too.
  ASSERT_EQ(std::remove(cluster_->cluster_file().c_str()), 0);
  ASSERT_TRUE(cluster_->Hangup(0).ok());
  ASSERT_TRUE(WaitLog(*cluster_, 0, "refused, membership unchanged", ++refusals));
  EXPECT_TRUE(cluster_->WaitMembers(0, {0, 1}, 2000).ok());
  // The good file again: a reload that changes nothing, and everything as before.
  ASSERT_TRUE(cluster_->WriteClusterText(good).ok());
  ASSERT_TRUE(cluster_->Hangup(0).ok());
  EXPECT_TRUE(WaitLog(*cluster_, 0, "reloaded: 2 members; joined none; left none; moved none"));
  EXPECT_EQ(Count(cluster_->node(0).ReadLog(), "refused, membership unchanged"), refusals);
  for (const Prompt& p : from1) EXPECT_EQ(LoadAndCheck(client(0), p), p.size());
  Prompt q = RandomTokens(9999, kTokens);
  SaveKv(client(0), q);
  EXPECT_EQ(LoadWhole(client(1), q), q.size());
  // The metrics count both kinds.
  const uint16_t port = MetricsPortFromLog(cluster_->node(0));
  ASSERT_NE(port, 0) << cluster_->node(0).ReadLog();
  auto r = HttpGet(port, "/metrics");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_NE(r->body.find("ptstore_cluster_reloads_total{result=\"refused\"} " + std::to_string(refusals)),
            std::string::npos)
      << r->body;
  EXPECT_NE(r->body.find("ptstore_cluster_reloads_total{result=\"applied\"} 1"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("ptstore_cluster_members 2"), std::string::npos) << r->body;
}

TEST_F(MembershipReloadTest, ANodeAtANewAddressIsReachedThere) {
  StartCluster(2, 2);
  Prompt p0 = RandomTokens(31, kTokens);
  SaveKv(client(0), p0);
  // Node 1 restarts on another port; node 0 learns of it by SIGHUP.
  clients_[1].reset();
  ASSERT_EQ(cluster_->Stop(1), 0);
  cluster_->MovePort(1);
  ASSERT_TRUE(cluster_->WriteClusterFile({0, 1}).ok());
  ASSERT_TRUE(cluster_->StartNode(1).ok());
  ASSERT_TRUE(cluster_->Hangup(0).ok());
  ASSERT_TRUE(cluster_->WaitMembers(0, {0, 1}).ok());
  ASSERT_TRUE(cluster_->WaitMembers(1, {0, 1}).ok());
  EXPECT_TRUE(WaitLog(*cluster_, 0, "joined none; left none; moved 1"));
  auto st = client(0).GetClusterStatus();
  ASSERT_TRUE(st.ok());
  for (const ClusterMember& m : st->members) {
    if (m.id == 1) {
      EXPECT_EQ(m.address, cluster_->address(1));
    }
  }
  Connect(1);
  EXPECT_EQ(LoadWhole(client(1), p0), p0.size());
  Prompt p1 = RandomTokens(32, kTokens);
  SaveKv(client(1), p1);
  EXPECT_EQ(LoadWhole(client(0), p1), p1.size());
}

TEST(SighupTest, OneNodeAloneHasNothingToReloadAndKeepsServing) {
  Daemon d;
  ASSERT_TRUE(d.Start().ok());
  ASSERT_EQ(kill(d.pid(), SIGHUP), 0);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (d.ReadLog().find("nothing to reload") == std::string::npos && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_NE(d.ReadLog().find("no cluster file (one node alone): nothing to reload"), std::string::npos) << d.ReadLog();
  auto c = ConnectTo(d.socket_path());
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE((*c)->Stats().ok());
  EXPECT_EQ(d.Stop(), 0);
}

}  // namespace
}  // namespace ptstore::testing

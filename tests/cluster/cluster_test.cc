// Several real ptstored processes on loopback ports forming one cluster:
// cross-node loads, dedup, removals, failures, authentication, both data
// paths.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <chrono>
#include <thread>

#include "core/rendezvous.h"
#include "ptstore/client.h"
#include "ptstore/keys.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/client.h"
#include "tests/cluster/kv_check.h"
#include "tests/testing/cluster.h"
#include "tests/testing/http_get.h"
#include "tests/testing/mount.h"
#include "tests/testing/run_tool.h"

namespace ptstore::testing {
namespace {

using storage::testkv::Cat;
using storage::testkv::RandomTokens;
using storage::testkv::Kv;
using storage::testkv::kBpt;
using storage::testkv::SmallLayout;

// A prompt of `n` tokens whose root's shard (all of `nodes` alive) is `shard`.
std::vector<uint32_t> PromptShardedTo(uint32_t shard, std::vector<uint32_t> nodes, size_t n, uint64_t seed) {
  for (;; ++seed) {
    auto p = RandomTokens(seed, n);
    const ChainKey root = NextKey(RootKey(kNs, ""), std::span(p).first(SmallLayout().block_tokens));
    if (core::ShardOf(root, nodes) == shard) return p;
  }
}

void Save(Client& c, const std::vector<uint32_t>& prompt) { SaveKv(c, prompt); }

class ClusterTest : public ::testing::TestWithParam<std::string> {
 protected:
  void StartCluster(size_t n, uint32_t replicate_after = 2) {
    TestCluster::Options o;
    o.nodes = n;
    o.data_path = GetParam();
    o.replicate_after = replicate_after;
    o.extra_args = {"--metrics-port", "auto"};
    cluster_ = std::make_unique<TestCluster>(o);
    ASSERT_TRUE(cluster_->Start().ok());
    ASSERT_TRUE(cluster_->WaitConverged().ok());
    ConnectEach(*cluster_, &clients_);
  }
  Client& client(size_t i) { return *clients_[i]; }
  // Two nodes; node 0 with an SSD tier (stopped and started again with one).
  void StartTwoWithSsdOnNode0() {
    TestCluster::Options o;
    o.nodes = 2;
    o.data_path = GetParam();
    cluster_ = std::make_unique<TestCluster>(o);
    ASSERT_TRUE(cluster_->Start().ok());
    ASSERT_EQ(cluster_->Stop(0), 0);
    cluster_->SetNodeArgs(0, {"--ssd-dir", cluster_->dir() + "/ssd0", "--ssd-capacity", "256MiB"});
    ASSERT_TRUE(cluster_->StartNode(0).ok());
    ASSERT_TRUE(cluster_->WaitConverged().ok());
    ConnectEach(*cluster_, &clients_);
  }
  void TearDown() override {
    if (HasFailure() && cluster_) PrintLogs(*cluster_);
  }

  std::unique_ptr<TestCluster> cluster_;
  std::vector<std::unique_ptr<Client>> clients_;
};

TEST_P(ClusterTest, SaveOnOneNodeLoadsByteExactOnTheOthers) {
  StartCluster(3);
  const auto prompt = RandomTokens(1, 64);
  Save(client(0), prompt);
  for (size_t i : {1, 2}) {
    auto look = client(i).Lookup(kNs, prompt);
    ASSERT_TRUE(look.ok());
    EXPECT_EQ(look->matched_tokens, 64u) << "node " << i;
    EXPECT_EQ(LoadAndCheck(client(i), prompt), 64u) << "node " << i;
  }
  auto s1 = client(1).Stats();
  ASSERT_TRUE(s1.ok());
  EXPECT_GE(s1->remote_fetches, 1u);
  EXPECT_GE(s1->remote_fetch_bytes, 64 * kBpt);
  auto s0 = client(0).Stats();
  EXPECT_GE(s0->peer_served_bytes, 2 * 64 * kBpt);
  // The loader's metrics: bytes by data path, fetch latency, members up.
  const uint16_t port = MetricsPortFromLog(cluster_->node(1));
  ASSERT_NE(port, 0) << cluster_->node(1).ReadLog();
  auto r = HttpGet(port, "/metrics");
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const std::string& text = r->body;
  const std::string bytes_line = "ptstore_fetched_bytes_total{path=\"" + GetParam() + "\"} " + std::to_string(64 * kBpt);
  EXPECT_NE(text.find(bytes_line), std::string::npos) << text;
  EXPECT_NE(text.find("ptstore_rpc_latency_seconds_count{rpc=\"fetch\"} 1"), std::string::npos) << text;
  EXPECT_NE(text.find("ptstore_member_up{node=\"0\",state=\"alive\"} 1"), std::string::npos) << text;
}

// ptstore(7) "Times": a load served to another node is a use at the owner,
// so an owner's `find -amin` does not take what other nodes load.
TEST_P(ClusterTest, ALoadOnAnotherNodeIsAUseAtTheOwner) {
  StartCluster(2, /*replicate_after=*/0);  // never a replica: every load fetches from the owner
  const auto prompt = RandomTokens(3, 64);
  Save(client(0), prompt);
  auto owned = client(0).ListTree(kNs, {}, true);
  ASSERT_TRUE(owned.ok());
  ASSERT_EQ(owned->size(), 1u);
  const ChainKey key = owned->front().key;
  const uint64_t hour_ago = WallClockNs() - 3600ull * 1000000000;
  ASSERT_TRUE(client(0).SetTimes(kNs, key, hour_ago, 0).ok());
  // Node 1's listing and lookups are not a use at the owner; its load is.
  ASSERT_TRUE(client(1).ListTree(kNs, {}, true).ok());
  EXPECT_EQ(client(0).GetIncrement(kNs, key)->node.times.atime_ns, hour_ago);
  const uint64_t before = WallClockNs();
  EXPECT_EQ(LoadAndCheck(client(1), prompt), 64u);
  auto s1 = client(1).Stats();
  ASSERT_TRUE(s1.ok());
  ASSERT_GE(s1->remote_fetches, 1u) << "the bytes came from node 0";
  const Times at_owner = client(0).GetIncrement(kNs, key)->node.times;
  EXPECT_GE(at_owner.atime_ns, before);
  EXPECT_LT(at_owner.mtime_ns, before) << "a use, not a store";
}

// A hybrid model's namespace (a grouped layout) across nodes: the layout
// travels in the peer messages' namespace definitions, and the blocks (its
// groups' slices and padding) are fetched like any others, byte for byte.
TEST_P(ClusterTest, GroupedNamespaceLoadsByteExactOnTheOtherNodes) {
  StartCluster(3);
  const Layout grouped = Layout::FromGroups(
      {LayoutGroup::Full(2, 2, 16, DType::kBF16), LayoutGroup::Window(2, 2, 16, DType::kBF16, 8),
       LayoutGroup::Latent(2, 24, DType::kFP16), LayoutGroup::State(2, 100)},
      SmallLayout().block_tokens);
  ASSERT_TRUE(grouped.Validate().ok());
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(client(i).CreateNamespace("hybrid", grouped).ok()) << i;
  const auto prompt = RandomTokens(7, 64);
  std::vector<uint8_t> kv(prompt.size() * grouped.BytesPerToken());
  for (size_t i = 0; i < kv.size(); ++i) kv[i] = static_cast<uint8_t>(storage::testkv::Mix(i ^ prompt[i % 64]));
  ASSERT_TRUE(client(0).Save("hybrid", prompt, kv.data(), kv.size()).ok());
  for (size_t i : {1, 2}) {
    std::vector<uint8_t> out(kv.size(), 0);
    auto n = client(i).Load("hybrid", prompt, out.data(), out.size());
    ASSERT_TRUE(n.ok()) << n.status().ToString();
    EXPECT_EQ(*n, 64u) << "node " << i;
    EXPECT_EQ(out, kv) << "node " << i;
    EXPECT_EQ(client(i).GetNamespace("hybrid")->layout, grouped);
  }
  EXPECT_GE(client(1).Stats()->remote_fetch_bytes, kv.size());
}

TEST_P(ClusterTest, ManyPromptsFromManyNodesAllLoadEverywhere) {
  StartCluster(3);
  std::vector<std::vector<uint32_t>> prompts;
  for (int i = 0; i < 24; ++i) prompts.push_back(RandomTokens(100 + i, 32 + 4 * (i % 5)));
  for (size_t i = 0; i < prompts.size(); ++i) Save(client(i % 3), prompts[i]);
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (size_t n = 0; n < 3; ++n) {
      EXPECT_EQ(LoadAndCheck(client(n), prompts[i]), prompts[i].size()) << "prompt " << i << " on node " << n;
    }
  }
}

TEST_P(ClusterTest, ASharedPrefixIsStoredOnceAcrossNodes) {
  StartCluster(3);
  const auto doc = RandomTokens(7, 256);
  Save(client(0), doc);
  // Node 1 saves the document plus a question: only the question is new.
  const auto q1 = Cat(doc, RandomTokens(8, 16));
  auto kv = Kv(q1, 0, q1.size());
  auto r = client(1).Save(kNs, q1, kv.data(), kv.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->matched_tokens, 256u);
  EXPECT_EQ(r->stored_tokens, 16u);
  EXPECT_EQ(r->new_bytes, 16 * kBpt);
  // Node 2 loads the whole q1: document from node 0, question from node 1.
  EXPECT_EQ(LoadAndCheck(client(2), q1), q1.size());
  uint64_t owned = 0;
  for (size_t i = 0; i < 3; ++i) owned += client(i).Stats()->owned_bytes;
  EXPECT_LE(owned, (256 + 16) * kBpt + 3 * 4096) << "bytes stored more than once";
}

TEST_P(ClusterTest, ReplicasAfterEnoughLoadsServeLocally) {
  StartCluster(2, /*replicate_after=*/2);
  const auto prompt = RandomTokens(11, 128);
  Save(client(0), prompt);
  EXPECT_EQ(LoadAndCheck(client(1), prompt), 128u);  // transient
  EXPECT_EQ(client(1).Stats()->replica_bytes, 0u);
  EXPECT_EQ(LoadAndCheck(client(1), prompt), 128u);  // kept
  auto s = client(1).Stats();
  EXPECT_GT(s->replica_bytes, 0u);
  EXPECT_EQ(s->replicas_kept, 1u);
  const uint64_t fetched = s->remote_fetch_bytes;
  EXPECT_EQ(LoadAndCheck(client(1), prompt), 128u);  // from the replica
  EXPECT_EQ(client(1).Stats()->remote_fetch_bytes, fetched);
  // The owner dies: the replica still serves.
  cluster_->Kill(0);
  EXPECT_EQ(LoadAndCheck(client(1), prompt), 128u);
}

// The owner of a document restarts without it (killed, no SSD tier) while
// another node keeps a replica of it. That replica is then the document's
// only copy: a save of a question on it through the replica's node must
// leave the whole prompt loadable everywhere, as any save does.
TEST_P(ClusterTest, AReplicaOfARestartedOwnersDataStaysLoadableEverywhere) {
  StartCluster(3, /*replicate_after=*/1);
  const auto doc = PromptShardedTo(1, {0, 1, 2}, 128, 3000);
  Save(client(1), doc);                              // owned by node 1, indexed by node 1
  ASSERT_EQ(LoadAndCheck(client(0), doc), 128u);     // node 0 keeps a replica
  ASSERT_GT(client(0).Stats()->replica_bytes, 0u);
  cluster_->Kill(1);
  ASSERT_TRUE(cluster_->WaitState(0, 1, MemberState::kDead).ok());
  ASSERT_TRUE(cluster_->StartNode(1).ok());          // empty: the document is gone there
  ASSERT_TRUE(cluster_->WaitConverged().ok());
  auto c1 = cluster_->Connect(1);
  ASSERT_TRUE(c1.ok());
  ASSERT_TRUE((*c1)->CreateNamespace(kNs, SmallLayout()).ok());

  const auto question = Cat(doc, RandomTokens(3001, 16));
  Save(client(0), question);
  EXPECT_EQ(LoadAndCheck(client(0), question), question.size());
  EXPECT_EQ(LoadAndCheck(client(2), question), question.size());
  EXPECT_EQ(LoadAndCheck(**c1, question), question.size());
}

// The owner of a document restarts without it (killed, no SSD tier) and no
// node keeps a copy: the index of the shard and of other nodes still name it
// as the owner. A save of a question on the document through another node
// must not count the document as stored: it stores it, and the whole
// prompt loads everywhere at once.
TEST_P(ClusterTest, ASaveOverDataItsOwnerLostStoresItAgain) {
  StartCluster(3, /*replicate_after=*/0);  // no replicas: nothing to adopt
  const auto doc = PromptShardedTo(2, {0, 1, 2}, 128, 6000);
  Save(client(1), doc);                             // owned by node 1, indexed by node 2
  ASSERT_EQ(client(0).Lookup(kNs, doc)->matched_tokens, 128u);  // node 0 learns of it
  cluster_->Kill(1);
  ASSERT_TRUE(cluster_->WaitState(0, 1, MemberState::kDead).ok());
  ASSERT_TRUE(cluster_->StartNode(1).ok());         // empty
  ASSERT_TRUE(cluster_->WaitConverged().ok());
  auto c1 = cluster_->Connect(1);
  ASSERT_TRUE(c1.ok());
  ASSERT_TRUE((*c1)->CreateNamespace(kNs, SmallLayout()).ok());

  const auto question = Cat(doc, RandomTokens(6001, 16));
  auto kv = Kv(question, 0, question.size());
  auto r = client(0).Save(kNs, question, kv.data(), kv.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->stored_tokens, question.size());  // the document too: nobody holds it any more
  EXPECT_EQ(LoadAndCheck(client(0), question), question.size());
  EXPECT_EQ(LoadAndCheck(client(2), question), question.size());
  EXPECT_EQ(LoadAndCheck(**c1, question), question.size());
}

// Node 1 learns a document and a question on it, both node 0's, from one
// shard answer: one remote increment, one run of node 0's blocks. Node 0 is
// killed with the document on its SSD tier and the question in DRAM only: it
// comes back with the document alone, and nobody tells node 1 that the
// question is gone. Node 0 saves another question on the document; node 1
// files it below the document, splitting its remote increment, which keeps
// the first question as its tail. Node 1's load of the new question fetches
// the document as that increment, named by the first question's tokens, of
// which the owner holds only the document: before the fix it got none of
// it, load after load, and its own save of the prompt stored nothing (the
// owner does hold the document). The soak's final check met this
// (docs/soak.md).
TEST_P(ClusterTest, ARunWhoseBranchItsRestartedOwnerLostStillLoads) {
  StartTwoWithSsdOnNode0();
  if (HasFatalFailure()) return;
  const auto doc = PromptShardedTo(0, {0, 1}, 128, 9000);  // indexed by node 0
  Save(client(0), doc);
  clients_[0].reset();
  ASSERT_EQ(cluster_->Stop(0), 0);  // SIGTERM: the document goes to SSD
  ASSERT_TRUE(cluster_->StartNode(0).ok());
  ASSERT_TRUE(cluster_->WaitConverged().ok());
  auto c0 = cluster_->Connect(0);
  ASSERT_TRUE(c0.ok());
  const auto q1 = Cat(doc, RandomTokens(9001, 32));
  Save(**c0, q1);  // the question in DRAM only
  ASSERT_EQ(client(1).Lookup(kNs, q1)->matched_tokens, q1.size());
  ASSERT_EQ(client(1).Stats()->remote_tensors, 1u);  // the document and the question as one
  c0->reset();
  cluster_->Kill(0);
  ASSERT_TRUE(cluster_->WaitState(1, 0, MemberState::kDead).ok());
  ASSERT_TRUE(cluster_->StartNode(0).ok());
  ASSERT_TRUE(cluster_->WaitConverged().ok());
  c0 = cluster_->Connect(0);
  ASSERT_TRUE(c0.ok());
  ASSERT_EQ((*c0)->Lookup(kNs, q1)->matched_tokens, doc.size());  // the question is gone

  const auto q2 = Cat(doc, RandomTokens(9002, 32));
  Save(**c0, q2);
  EXPECT_EQ(LoadAndCheck(client(1), q2), q2.size());
  auto kv = Kv(q2, 0, q2.size());
  auto r = client(1).Save(kNs, q2, kv.data(), kv.size());
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(LoadAndCheck(client(1), q2), q2.size());
  EXPECT_EQ(LoadAndCheck(client(1), q1), doc.size());  // the document, not the lost question
  EXPECT_EQ(LoadAndCheck(client(1), q2), q2.size());
}

// An owner frozen (SIGSTOP) while another node loads from it, then woken:
// the loads after it get its data again, whatever the data path. (Frozen
// means every thread stopped: kill() returns before that, and an owner
// still running answers the load.)
TEST_P(ClusterTest, LoadsFromAnOwnerThatWasFrozenWorkAgain) {
  StartCluster(2, /*replicate_after=*/0);
  const auto doc = RandomTokens(7000, 256);
  Save(client(0), doc);
  ASSERT_EQ(LoadAndCheck(client(1), doc), 256u);
  ASSERT_TRUE(cluster_->node(0).Freeze().ok());
  EXPECT_EQ(LoadAndCheck(client(1), doc), 0u);  // a miss, not an error or a hang
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  ASSERT_TRUE(cluster_->node(0).Thaw().ok());
  ASSERT_TRUE(cluster_->WaitState(1, 0, MemberState::kAlive).ok());
  uint64_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (got != 256u && std::chrono::steady_clock::now() < deadline) {
    got = LoadAndCheck(client(1), doc);
    if (got != 256u) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(got, 256u);
}

// The negative cache (the shard lately knew nothing past this node's match)
// covers every prompt that continues the match only when the shard knew no
// continuation of it at all: a system prompt this node holds, a document
// under it that another node saved, then a miss on another document, then
// the saved one asked: a hit. And a new document's many new questions ask the
// shard once.
TEST_P(ClusterTest, AMissOnOnePromptDoesNotHideAnotherThatSharesItsStart) {
  TestCluster::Options o;
  o.nodes = 3;
  o.data_path = GetParam();
  o.negative_ttl_ms = 60000;  // a whole minute: the second ask must not be answered by the first miss
  o.extra_args = {"--metrics-port", "auto"};
  cluster_ = std::make_unique<TestCluster>(o);
  ASSERT_TRUE(cluster_->Start().ok());
  ASSERT_TRUE(cluster_->WaitConverged().ok());
  ConnectEach(*cluster_, &clients_);
  const auto system = PromptShardedTo(1, {0, 1, 2}, 32, 4000);  // indexed by node 1
  Save(client(0), system);                                       // node 0 holds it
  const auto unknown = Cat(system, RandomTokens(4001, 64));
  const auto known = Cat(system, RandomTokens(4002, 64));
  Save(client(2), known);
  EXPECT_EQ(LoadAndCheck(client(0), unknown), 32u);  // the shard knows another document, not this one
  EXPECT_EQ(LoadAndCheck(client(0), known), known.size());
  // The same prompt asked again within the time to live is the cached miss.
  EXPECT_EQ(LoadAndCheck(client(0), unknown), 32u);

  // A prefix the shard knows nothing past at all (a new document): its many
  // new questions ask the shard once, not once each.
  const uint16_t port = MetricsPortFromLog(cluster_->node(0));
  ASSERT_NE(port, 0);
  auto shard_lookups = [&]() -> uint64_t {
    auto r = HttpGet(port, "/metrics");
    if (!r.ok()) return 0;
    const std::string name = "\nptstore_shard_lookups_total ";
    const size_t at = r->body.find(name);
    return at == std::string::npos ? 0 : std::stoull(r->body.substr(at + name.size()));
  };
  const auto doc = PromptShardedTo(1, {0, 1, 2}, 64, 5000);
  Save(client(0), doc);
  const uint64_t before = shard_lookups();
  for (uint64_t q = 0; q < 5; ++q) EXPECT_EQ(LoadAndCheck(client(0), Cat(doc, RandomTokens(5001 + q, 16))), 64u);
  EXPECT_EQ(shard_lookups(), before + 1);
}

TEST_P(ClusterTest, LocateNamesTheOwnerAndEveryReplica) {
  StartCluster(3, /*replicate_after=*/1);
  const auto p = RandomTokens(71, 64);
  Save(client(0), p);
  EXPECT_EQ(LoadAndCheck(client(2), p), 64u);  // node 2 keeps a replica
  for (size_t asker : {0, 1, 2}) {
    if (asker == 1) {
      EXPECT_EQ(client(1).Lookup(kNs, p)->matched_tokens, 64u);  // node 1 learns of it
    }
    auto nodes = client(asker).ListTree(kNs, {}, true);
    ASSERT_TRUE(nodes.ok());
    ASSERT_EQ(nodes->size(), 1u) << "asker " << asker;
    auto where = client(asker).Locate(kNs, {(*nodes)[0].key});
    ASSERT_TRUE(where.ok()) << where.status().ToString();
    ASSERT_EQ(where->size(), 1u);
    EXPECT_EQ((*where)[0].owner, 0u) << "asker " << asker;
    EXPECT_EQ((*where)[0].nodes, (std::vector<uint32_t>{0, 2})) << "asker " << asker;
    EXPECT_EQ((*nodes)[0].tensor.owner().value, 0u);
  }
  // The same through ptstore-ls -w (NODES column).
  auto out = RunTool(PTSTORE_LS_PATH, {"-s", cluster_->node(1).socket_path(), "-w", kNs});
  EXPECT_EQ(out.rc, 0) << out.err;
  EXPECT_NE(out.out.find("NODES"), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("0,2"), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("remote"), std::string::npos) << out.out;  // node 1 holds none of it
  // user.ptstore.replicas on a mount of node 1 agrees: one copy besides the owner's (node 2's).
  if (access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/fuse for the mount part";
  Mount mount;
  ASSERT_TRUE(mount.Start(cluster_->node(1).socket_path()).ok()) << mount.ReadLog();
  const std::string key = client(1).ListTree(kNs, {}, false)->front().key.ToHex();
  char v[32];
  const ssize_t n = getxattr(mount.Join(std::string(kNs) + "/" + key).c_str(), "user.ptstore.replicas", v, sizeof v);
  ASSERT_GT(n, 0) << strerror(errno);
  EXPECT_EQ(std::string(v, n), "1");
  EXPECT_EQ(mount.Unmount(), 0) << mount.ReadLog();
}

TEST_P(ClusterTest, RemovalReachesEveryNode) {
  StartCluster(3, /*replicate_after=*/1);
  const auto doc = RandomTokens(21, 128);
  const auto longer = Cat(doc, RandomTokens(22, 32));
  Save(client(0), doc);
  Save(client(1), longer);
  EXPECT_EQ(LoadAndCheck(client(2), longer), longer.size());  // replicas on node 2
  EXPECT_GT(client(2).Stats()->replica_bytes, 0u);
  // Remove the document's increment on node 1 (a metadata node for it).
  auto rm = client(1).Remove(kNs, doc);
  ASSERT_TRUE(rm.ok()) << rm.status().ToString();
  for (size_t i = 0; i < 3; ++i) {
    auto look = client(i).Lookup(kNs, longer);
    ASSERT_TRUE(look.ok());
    EXPECT_EQ(look->matched_tokens, 0u) << "node " << i << " still knows the removed prefix";
    EXPECT_EQ(LoadAndCheck(client(i), longer), 0u) << "node " << i << " still serves removed bytes";
  }
  EXPECT_EQ(client(2).Stats()->replica_bytes, 0u);
  EXPECT_EQ(client(0).Stats()->owned_bytes, 0u);
}

// A mount of node 1 keeps names and attributes in the kernel for an hour
// (the default timeouts) and polls node 1's change log every 100 ms: a
// removal made on node 0 reaches node 1's store (PeerRemove), its change
// log, and the kernel's cache within the bound of ptstore(7) "Caching"
// (one interval plus one poll; four intervals allowed here).
TEST_P(ClusterTest, ARemovalOnAnotherNodeReachesAMountsKernelCacheWithinThePollBound) {
  if (access("/dev/fuse", R_OK | W_OK) != 0) GTEST_SKIP() << "no /dev/fuse";
  StartCluster(2, /*replicate_after=*/1);
  const auto doc = RandomTokens(81, 64);
  Save(client(0), doc);
  EXPECT_EQ(LoadAndCheck(client(1), doc), 64u);  // node 1 keeps a replica: it is in its tree
  Mount mount;
  Mount::Options mo;
  mo.options = "allow_other,change_poll_ms=100";
  ASSERT_TRUE(mount.Start(cluster_->node(1).socket_path(), mo).ok()) << mount.ReadLog();
  auto top = client(1).ListTree(kNs, {}, false);
  ASSERT_TRUE(top.ok());
  ASSERT_EQ(top->size(), 1u);
  const std::string dir = mount.Join(std::string(kNs) + "/" + top->front().key.ToHex());
  struct stat st {};
  ASSERT_EQ(stat((dir + "/kv").c_str(), &st), 0) << strerror(errno);  // cached for an hour
  ASSERT_TRUE(client(0).Remove(kNs, doc).ok());
  const auto bound = std::chrono::milliseconds(4 * 100);
  const auto deadline = std::chrono::steady_clock::now() + bound;
  bool gone = false;
  while (!gone) {
    gone = stat(dir.c_str(), &st) != 0 && errno == ENOENT;
    if (gone || std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_TRUE(gone) << dir << " still on node 1's mount " << bound.count() << " ms after the removal on node 0";
  EXPECT_EQ(mount.Unmount(), 0) << mount.ReadLog();
}

TEST_P(ClusterTest, ADeadOwnerIsAMissNeverAnErrorOrAHang) {
  StartCluster(3);
  const auto a = RandomTokens(31, 64);
  const auto b = Cat(a, RandomTokens(32, 64));
  Save(client(0), a);
  Save(client(1), b);
  ASSERT_EQ(client(2).Lookup(kNs, b)->matched_tokens, 128u);
  cluster_->Kill(1);
  const auto t0 = std::chrono::steady_clock::now();
  // Node 1's half is missing; node 0's half still loads.
  EXPECT_EQ(LoadAndCheck(client(2), b), 64u);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ASSERT_TRUE(cluster_->WaitState(2, 1, MemberState::kDead).ok());
  EXPECT_EQ(LoadAndCheck(client(2), b), 64u);
  // It comes back (empty): the cluster carries on.
  ASSERT_TRUE(cluster_->StartNode(1).ok());
  ASSERT_TRUE(cluster_->WaitConverged().ok());
  auto c1 = cluster_->Connect(1);
  ASSERT_TRUE(c1.ok());
  ASSERT_TRUE((*c1)->CreateNamespace(kNs, SmallLayout()).ok());
  EXPECT_EQ(LoadAndCheck(**c1, a), 64u);
  Save(**c1, b);
  EXPECT_EQ(LoadAndCheck(client(2), b), 128u);
}

TEST_P(ClusterTest, ANodeKilledMidLoadCostsAMiss) {
  StartCluster(2);
  // Big enough that the load takes a while (16 MiB).
  TestCluster::Options big;
  const auto prompt = RandomTokens(41, 16 * 1024 * 1024 / kBpt);
  Save(client(0), prompt);
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    cluster_->Kill(0);
  });
  std::vector<uint8_t> out(prompt.size() * kBpt);
  auto n = client(1).Load(kNs, prompt, out.data(), out.size());
  killer.join();
  ASSERT_TRUE(n.ok()) << n.status().ToString();
  EXPECT_TRUE(*n == 0 || *n == prompt.size()) << *n;
  if (*n > 0) {
    auto want = Kv(prompt, 0, *n);
    EXPECT_EQ(0, std::memcmp(out.data(), want.data(), want.size()));
  }
  // Afterwards: a miss, fast.
  EXPECT_EQ(LoadAndCheck(client(1), prompt), *n == 0 ? 0u : prompt.size());
}

TEST_P(ClusterTest, ARestartedShardLearnsAgainWhatOthersHold) {
  StartCluster(3);
  // Saved on node 0, indexed by shard node 1.
  const auto p = PromptShardedTo(1, {0, 1, 2}, 64, 1000);
  Save(client(0), p);
  ASSERT_EQ(LoadAndCheck(client(2), p), 64u);
  // Node 1 restarts empty (no SSD tier): node 0 announces again what it owns.
  ASSERT_EQ(cluster_->Stop(1), 0);
  ASSERT_TRUE(cluster_->StartNode(1).ok());
  ASSERT_TRUE(cluster_->WaitConverged().ok());
  auto c1 = cluster_->Connect(1);
  ASSERT_TRUE(c1.ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  uint64_t matched = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    auto ns = (*c1)->GetNamespace(kNs);  // created by node 0's announcement
    if (ns.ok()) {
      matched = (*c1)->Lookup(kNs, p)->matched_tokens;
      if (matched == 64) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(matched, 64u);
  EXPECT_EQ(LoadAndCheck(**c1, p), 64u);
}

TEST_P(ClusterTest, ARestartedOwnerWithAnSsdTierServesItsDataAgain) {
  StartTwoWithSsdOnNode0();
  if (HasFatalFailure()) return;
  const auto p = PromptShardedTo(1, {0, 1}, 64, 2000);
  Save(client(0), p);
  ASSERT_EQ(LoadAndCheck(client(1), p), 64u);
  // A planned restart: SIGTERM persists to SSD, the restart recovers.
  clients_[0].reset();
  ASSERT_EQ(cluster_->Stop(0), 0);
  EXPECT_EQ(LoadAndCheck(client(1), p), 0u);  // its owner is down: a miss
  ASSERT_TRUE(cluster_->StartNode(0).ok());
  ASSERT_TRUE(cluster_->WaitConverged().ok());
  EXPECT_EQ(LoadAndCheck(client(1), p), 64u);
}

TEST_P(ClusterTest, OwnedDataBelowAnotherNodesPrefixSurvivesARestart) {
  StartTwoWithSsdOnNode0();
  if (HasFatalFailure()) return;
  // Node 1 owns the document; node 0 owns only the question below it.
  const auto doc = RandomTokens(81, 128);
  const auto q = Cat(doc, RandomTokens(82, 32));
  Save(client(1), doc);
  auto kv = Kv(q, 0, q.size());
  auto r = client(0).Save(kNs, q, kv.data(), kv.size());
  ASSERT_TRUE(r.ok());
  ASSERT_EQ(r->stored_tokens, 32u);
  // Node 0 restarts: the question comes back from its SSD tier, below the
  // document it knows again as node 1's.
  clients_[0].reset();
  ASSERT_EQ(cluster_->Stop(0), 0);
  ASSERT_TRUE(cluster_->StartNode(0).ok());
  const std::string log = cluster_->node(0).ReadLog();
  EXPECT_NE(log.find("recovered 1 namespace(s) and 1 tensor(s)"), std::string::npos) << log;
  ASSERT_TRUE(cluster_->WaitConverged().ok());
  auto c0 = cluster_->Connect(0);
  ASSERT_TRUE(c0.ok());
  EXPECT_EQ((*c0)->Stats()->remote_tensors, 1u);
  EXPECT_EQ(LoadAndCheck(**c0, q), q.size());
  EXPECT_EQ(LoadAndCheck(client(1), q), q.size());
}

TEST_P(ClusterTest, ANodeWithTheWrongSecretIsRefused) {
  StartCluster(3);
  const auto prompt = RandomTokens(51, 64);
  Save(client(0), prompt);
  cluster_->Stop(2);
  ASSERT_TRUE(cluster_->StartNode(2, cluster_->WriteOtherSecret()).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(800));
  auto c2 = cluster_->Connect(2);
  ASSERT_TRUE(c2.ok());
  auto st = (*c2)->GetClusterStatus();
  ASSERT_TRUE(st.ok());
  for (const auto& m : st->members) {
    if (m.id != 2) {
      EXPECT_EQ(m.state, MemberState::kDead) << "node 2 reached node " << m.id;
    }
  }
  ASSERT_TRUE((*c2)->CreateNamespace(kNs, SmallLayout()).ok());
  EXPECT_EQ(LoadAndCheck(**c2, prompt), 0u);  // a miss, not an error
  ASSERT_TRUE(cluster_->WaitState(0, 2, MemberState::kDead).ok());
  const std::string log0 = cluster_->node(0).ReadLog();
  EXPECT_NE(log0.find("authentication"), std::string::npos) << log0;
}

TEST_P(ClusterTest, ClusterStatusListsMembersAndBytes) {
  StartCluster(3);
  Save(client(1), RandomTokens(61, 64));
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  auto st = client(0).GetClusterStatus();
  ASSERT_TRUE(st.ok());
  EXPECT_TRUE(st->enabled);
  EXPECT_EQ(st->self_id, 0u);
  EXPECT_EQ(st->data_path, GetParam());
  ASSERT_EQ(st->members.size(), 3u);
  EXPECT_EQ(st->members[0].state, MemberState::kSelf);
  EXPECT_EQ(st->members[1].state, MemberState::kAlive);
  EXPECT_EQ(st->members[1].address, cluster_->address(1));
  EXPECT_GE(st->members[1].owned_bytes, 64 * kBpt);
  // ptstore-stat shows them.
  auto out = RunTool(PTSTORE_STAT_PATH, {"-s", cluster_->node(0).socket_path()});
  EXPECT_EQ(out.rc, 0) << out.err;
  EXPECT_NE(out.out.find("cluster: 3 nodes, loads over " + GetParam()), std::string::npos) << out.out;
  EXPECT_NE(out.out.find(cluster_->address(2)), std::string::npos) << out.out;
  EXPECT_NE(out.out.find("alive"), std::string::npos) << out.out;
  auto json = RunTool(PTSTORE_STAT_PATH, {"-s", cluster_->node(0).socket_path(), "--json"});
  EXPECT_NE(json.out.find("\"members\""), std::string::npos) << json.out;
}

INSTANTIATE_TEST_SUITE_P(DataPaths, ClusterTest, ::testing::Values("tcp", "rma"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace ptstore::testing

// Elastic membership in etcd (storage/cluster/etcd_membership.h) with a real etcd
// (Debian's etcd-server, started by the test: one member, or three forming
// one etcd cluster) and real ptstored processes on loopback ports: nodes
// register and find each other, a node joins under load, a graceful leave is
// seen at once and a killed node when its lease expires, etcd dies and comes
// back, one of three etcd members dies, and bad input is refused with a clear
// error. Every loaded byte is checked: a load returns the right bytes or a
// miss, never other bytes.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ptstore/client.h"
#include "storage/cluster/etcd_client.h"
#include "tests/cluster/kv_check.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/cluster.h"
#include "tests/testing/etcd.h"
#include "tests/testing/http_get.h"
#include "tests/testing/netns.h"
#include "tests/testing/prometheus_text.h"

namespace ptstore::testing {
namespace {

using storage::testkv::RandomTokens;
using Prompt = std::vector<uint32_t>;
using Clock = std::chrono::steady_clock;

constexpr size_t kTokens = 64;
constexpr int kLeaseS = 3;

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Node i's member ids as its cluster status lists them (sorted), empty
// when it does not answer.
std::vector<uint32_t> MemberIds(TestCluster& cluster, size_t i) {
  std::vector<uint32_t> ids;
  auto c = cluster.Connect(i);
  if (!c.ok()) return ids;
  auto st = (*c)->GetClusterStatus();
  if (!st.ok()) return ids;
  for (const ClusterMember& m : st->members) ids.push_back(m.id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

// Waits until node i's member list is `want` (alive or not); the seconds it took, or < 0.
double WaitMemberIds(TestCluster& cluster, size_t i, const std::vector<uint32_t>& want, int timeout_ms) {
  const auto t0 = Clock::now();
  while (SecondsSince(t0) * 1000 < timeout_ms) {
    if (MemberIds(cluster, i) == want) return SecondsSince(t0);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

// Metric `name` of node i (its metrics port from its log); NaN when absent.
double Metric(TestCluster& cluster, size_t i, const std::string& name) {
  const uint16_t port = MetricsPortFromLog(cluster.node(i));
  EXPECT_NE(port, 0) << "no metrics port in node " << i << "'s log";
  auto r = HttpGet(port, "/metrics");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  if (!r.ok()) return std::nan("");
  auto prom = ParsePromText(r->body);
  EXPECT_TRUE(prom.ok()) << prom.status().ToString();
  return prom.ok() ? prom->Value(name) : std::nan("");
}

// Loads `p` through `c` (every byte checked) until it loads whole.
uint64_t LoadWhole(Client& c, const Prompt& p, int timeout_ms = 10000) {
  const auto t0 = Clock::now();
  uint64_t n = 0;
  do {
    n = LoadAndCheck(c, p);
    if (n == p.size() || ::testing::Test::HasFailure()) return n;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  } while (SecondsSince(t0) * 1000 < timeout_ms);
  return n;
}

// The keys under PREFIX/members/ in etcd.
std::vector<std::string> RegisteredKeys(const std::string& url) {
  auto u = storage::EtcdUrl::Parse(url);
  EXPECT_TRUE(u.ok());
  storage::EtcdClient client(*u, 2000);
  auto r = client.RangePrefix(u->prefix + "members/");
  EXPECT_TRUE(r.ok()) << r.status().ToString();
  std::vector<std::string> keys;
  if (r.ok()) {
    for (const auto& kv : r->kvs) keys.push_back(kv.key.substr(u->prefix.size()));
  }
  return keys;
}

class EtcdMembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (EtcdBinary().empty()) {
      GTEST_SKIP() << "no etcd binary at /usr/bin/etcd (scripts/setup installs Debian's etcd-server; "
                      "or set PTSTORE_ETCD): the etcd membership tests need a real etcd";
    }
  }
  void StartEtcd(size_t members) {
    etcd_ = std::make_unique<EtcdServer>(members);
    Status st = etcd_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  // `nodes` nodes, the first `running` started, members in etcd under `prefix`.
  void StartCluster(size_t nodes, size_t running, const std::string& prefix = "ptstore-test",
                    std::vector<std::string> extra_args = {}) {
    TestCluster::Options o;
    o.extra_args = std::move(extra_args);
    o.nodes = nodes;
    o.listed = running;
    o.replicate_after = 0;  // a load of another node's data is a fetch from its owner every time
    o.negative_ttl_ms = 0;
    o.etcd_url = etcd_->Url(prefix);
    o.etcd_lease_s = kLeaseS;
    cluster_ = std::make_unique<TestCluster>(o);
    Status st = cluster_->Start();
    ASSERT_TRUE(st.ok()) << st.ToString();
    std::vector<size_t> members;
    for (size_t i = 0; i < running; ++i) members.push_back(i);
    for (size_t i = 0; i < running; ++i) ASSERT_TRUE(cluster_->WaitMembers(i, members).ok()) << "node " << i;
    clients_.resize(nodes);
    for (size_t i = 0; i < running; ++i) Connect(i);
  }
  void Connect(size_t i) {
    auto c = cluster_->Connect(i);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    Status st = (*c)->CreateNamespace(kNs, storage::testkv::SmallLayout()).status();
    ASSERT_TRUE(st.ok() || st.code() == Code::kAlreadyExists) << st.ToString();
    clients_[i] = std::move(*c);
  }
  Client& client(size_t i) { return *clients_[i]; }
  void TearDown() override {
    if (HasFailure() && cluster_) PrintLogs(*cluster_);
  }

  std::unique_ptr<EtcdServer> etcd_;
  std::unique_ptr<TestCluster> cluster_;
  std::vector<std::unique_ptr<Client>> clients_;
};

TEST_F(EtcdMembershipTest, NodesRegisterServeAndFollowAJoinUnderLoadALeaveAndADeath) {
  ASSERT_NO_FATAL_FAILURE(StartEtcd(1));
  ASSERT_NO_FATAL_FAILURE(StartCluster(4, 3));
  EXPECT_EQ(RegisteredKeys(etcd_->Url("ptstore-test")),
            (std::vector<std::string>{"members/0", "members/1", "members/2"}));
  std::vector<Prompt> prompts;
  for (size_t i = 0; i < 3; ++i) {
    for (uint64_t k = 0; k < 4; ++k) {
      prompts.push_back(RandomTokens(100 * i + k + 1, kTokens));
      SaveKv(client(i), prompts.back());
    }
  }
  for (size_t i = 0; i < 3; ++i) {
    for (const Prompt& p : prompts) EXPECT_EQ(LoadWhole(client(i), p), p.size()) << "node " << i;
  }

  // Load from node 1 all along: every byte right, or a miss.
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> loads{0}, whole{0};
  std::thread loader([&] {
    auto c = cluster_->Connect(1);
    ASSERT_TRUE(c.ok());
    while (!stop.load()) {
      for (const Prompt& p : prompts) {
        if (LoadAndCheck(**c, p) == p.size()) whole++;
        loads++;
      }
    }
  });

  // Node 3 joins: everyone takes it in, it serves and fetches.
  ASSERT_TRUE(cluster_->StartNode(3).ok());
  for (size_t i = 0; i < 4; ++i) ASSERT_TRUE(cluster_->WaitMembers(i, {0, 1, 2, 3}).ok()) << "node " << i;
  Connect(3);
  for (const Prompt& p : prompts) EXPECT_EQ(LoadWhole(client(3), p), p.size());
  const Prompt own = RandomTokens(999, kTokens);
  SaveKv(client(3), own);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(LoadWhole(client(i), own), own.size()) << "node " << i;

  // A graceful leave (SIGTERM) is seen at once, well before the lease would expire.
  clients_[3].reset();
  const auto t_leave = Clock::now();
  EXPECT_EQ(cluster_->Stop(3), 0);
  const bool dropped = WaitMemberIds(*cluster_, 0, {0, 1, 2}, 10000) >= 0;
  const double left_after = SecondsSince(t_leave);
  EXPECT_TRUE(dropped) << "node 0 never dropped the leaving node";
  EXPECT_LT(left_after, kLeaseS / 2.0) << "node 0 dropped the leaving node only after " << left_after << " s";

  // A killed node stays a member until its lease expires, then goes.
  const auto t_kill = Clock::now();
  cluster_->Kill(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(1000));
  EXPECT_EQ(MemberIds(*cluster_, 0), (std::vector<uint32_t>{0, 1, 2})) << "dropped before its lease expired";
  EXPECT_GE(WaitMemberIds(*cluster_, 0, {0, 1}, (kLeaseS + 5) * 1000), 0) << "the dead node's lease never expired";
  EXPECT_GE(WaitMemberIds(*cluster_, 1, {0, 1}, 5000), 0);
  EXPECT_LT(SecondsSince(t_kill), kLeaseS + 5.0);
  EXPECT_EQ(RegisteredKeys(etcd_->Url("ptstore-test")), (std::vector<std::string>{"members/0", "members/1"}));

  stop.store(true);
  loader.join();
  EXPECT_GT(loads.load(), 0u);
  EXPECT_GT(whole.load(), 0u);
  // What nodes 0 and 1 own still loads whole on both.
  for (size_t i = 0; i < 2; ++i) {
    for (size_t k = 0; k < 8; ++k) EXPECT_EQ(LoadWhole(client(i), prompts[k]), kTokens) << "node " << i;
  }
}

TEST_F(EtcdMembershipTest, EtcdDownKeepsTheMembersAndAfterItComesBackNodesJoinAgain) {
  ASSERT_NO_FATAL_FAILURE(StartEtcd(1));
  ASSERT_NO_FATAL_FAILURE(StartCluster(3, 2, "ptstore-test", {"--metrics-port", "auto"}));
  const Prompt p0 = RandomTokens(11, kTokens), p1 = RandomTokens(12, kTokens);
  SaveKv(client(0), p0);
  SaveKv(client(1), p1);
  EXPECT_EQ(Metric(*cluster_, 0, "ptstore_etcd_reachable"), 1);
  EXPECT_EQ(Metric(*cluster_, 0, "ptstore_etcd_registrations_total"), 1);
  EXPECT_GE(Metric(*cluster_, 0, "ptstore_etcd_membership_updates_total"), 1);
  EXPECT_EQ(Metric(*cluster_, 0, "ptstore_etcd_failures_total"), 0);

  etcd_->Kill(0);
  // Longer than a lease: nobody drops anybody, loads go on.
  std::this_thread::sleep_for(std::chrono::milliseconds(kLeaseS * 1000 + 1500));
  EXPECT_EQ(MemberIds(*cluster_, 0), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(MemberIds(*cluster_, 1), (std::vector<uint32_t>{0, 1}));
  EXPECT_EQ(LoadWhole(client(0), p1), p1.size());
  EXPECT_EQ(LoadWhole(client(1), p0), p0.size());
  EXPECT_NE(cluster_->node(0).ReadLog().find("etcd unreachable"), std::string::npos);
  EXPECT_EQ(Metric(*cluster_, 0, "ptstore_etcd_reachable"), 0);
  EXPECT_GT(Metric(*cluster_, 0, "ptstore_etcd_failures_total"), 0);
  // A node cannot join while etcd is down, and says why.
  EXPECT_FALSE(cluster_->StartNode(2).ok());
  EXPECT_NE(cluster_->node(2).ReadLog().find("no endpoint answered"), std::string::npos)
      << cluster_->node(2).ReadLog();

  ASSERT_TRUE(etcd_->Restart(0).ok());
  ASSERT_TRUE(cluster_->StartNode(2).ok());
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(cluster_->WaitMembers(i, {0, 1, 2}, 15000).ok()) << "node " << i;
  Connect(2);
  EXPECT_EQ(LoadWhole(client(2), p0), p0.size());
  EXPECT_EQ(LoadWhole(client(2), p1), p1.size());
  // 0 and 1 are registered again (their leases kept or granted anew).
  const auto t0 = Clock::now();
  std::vector<std::string> keys;
  while (SecondsSince(t0) < kLeaseS + 5) {
    keys = RegisteredKeys(etcd_->Url("ptstore-test"));
    if (keys.size() == 3) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(keys, (std::vector<std::string>{"members/0", "members/1", "members/2"}));
  // Reachable again at node 0's next renewal.
  while (Metric(*cluster_, 0, "ptstore_etcd_reachable") != 1 && SecondsSince(t0) < 2 * kLeaseS + 5) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_EQ(Metric(*cluster_, 0, "ptstore_etcd_reachable"), 1);
}

TEST_F(EtcdMembershipTest, OneOfThreeEtcdMembersDiesAndMembershipGoesOn) {
  ASSERT_NO_FATAL_FAILURE(StartEtcd(3));
  ASSERT_NO_FATAL_FAILURE(StartCluster(3, 2));
  const Prompt p = RandomTokens(21, kTokens);
  SaveKv(client(0), p);
  // The member the nodes ask first.
  etcd_->Kill(0);
  ASSERT_TRUE(cluster_->StartNode(2).ok());
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(cluster_->WaitMembers(i, {0, 1, 2}, 15000).ok()) << "node " << i;
  Connect(2);
  EXPECT_EQ(LoadWhole(client(2), p), p.size());
  clients_[2].reset();
  EXPECT_EQ(cluster_->Stop(2), 0);
  EXPECT_GE(WaitMemberIds(*cluster_, 0, {0, 1}, kLeaseS * 1000 / 2), 0) << "the leave was not seen at once";
}

// Separate hosts (network namespaces on a bridge; etcd in the test's own
// namespace on the bridge). Host 2 is cut off from etcd and the others: the
// others drop it when its lease expires, it keeps its last member list and
// serves what it holds; healed, it registers again and everyone takes it back.
TEST_F(EtcdMembershipTest, APartitionedNodeIsDroppedAtLeaseExpiryAndRegistersAgainWhenHealed) {
  if (std::string why = NetnsLab::WhyNot(); !why.empty()) GTEST_SKIP() << why;
  NetnsLab lab;
  ASSERT_TRUE(lab.Create(3).ok());
  auto bridge = lab.BridgeAddress();
  ASSERT_TRUE(bridge.ok()) << bridge.status().ToString();
  etcd_ = std::make_unique<EtcdServer>(1, *bridge);
  Status est = etcd_->Start();
  ASSERT_TRUE(est.ok()) << est.ToString();
  TestCluster::Options o;
  o.nodes = 3;
  o.replicate_after = 0;
  o.negative_ttl_ms = 0;
  o.hosts = lab.hosts();
  for (size_t i = 0; i < 3; ++i) o.wrappers.push_back(lab.Wrapper(i));
  o.etcd_url = etcd_->Url("partition");
  o.etcd_lease_s = kLeaseS;
  cluster_ = std::make_unique<TestCluster>(o);
  Status cst = cluster_->Start();
  ASSERT_TRUE(cst.ok()) << cst.ToString();
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(cluster_->WaitMembers(i, {0, 1, 2}).ok()) << "node " << i;
  clients_.resize(3);
  for (size_t i = 0; i < 3; ++i) ASSERT_NO_FATAL_FAILURE(Connect(i));
  const Prompt p0 = RandomTokens(31, kTokens), p2 = RandomTokens(32, kTokens);
  SaveKv(client(0), p0);
  SaveKv(client(2), p2);
  EXPECT_EQ(LoadWhole(client(1), p2), p2.size());

  ASSERT_TRUE(lab.Cut(2).ok());
  EXPECT_GE(WaitMemberIds(*cluster_, 0, {0, 1}, (kLeaseS + 6) * 1000), 0) << "host 2's lease never expired";
  EXPECT_GE(WaitMemberIds(*cluster_, 1, {0, 1}, 5000), 0);
  EXPECT_EQ(MemberIds(*cluster_, 2), (std::vector<uint32_t>{0, 1, 2})) << "cut off, host 2 keeps its last list";
  EXPECT_EQ(LoadAndCheck(client(1), p2), 0u) << "host 2 is gone: a miss";
  EXPECT_EQ(LoadAndCheck(client(2), p2), p2.size()) << "host 2 serves what it holds";

  ASSERT_TRUE(lab.Heal(2).ok());
  for (size_t i = 0; i < 3; ++i) ASSERT_TRUE(cluster_->WaitMembers(i, {0, 1, 2}, 20000).ok()) << "node " << i;
  EXPECT_EQ(LoadWhole(client(1), p2), p2.size());
  EXPECT_EQ(LoadWhole(client(2), p0), p0.size());
  EXPECT_NE(cluster_->node(2).ReadLog().find("registering again"), std::string::npos);
  clients_.clear();
  cluster_.reset();  // before the lab's namespaces go
}

TEST_F(EtcdMembershipTest, BadInputIsRefusedWithAClearError) {
  ASSERT_NO_FATAL_FAILURE(StartEtcd(1));
  ASSERT_NO_FATAL_FAILURE(StartCluster(1, 1, "bad-input", {"--metrics-port", "auto"}));
  const std::string url = etcd_->Url("bad-input");

  // Entries that are not a member's: logged once, skipped, nothing else changes.
  auto u = storage::EtcdUrl::Parse(url);
  ASSERT_TRUE(u.ok());
  storage::EtcdClient etcd(*u, 2000);
  auto always = [](const std::string&) { return true; };
  ASSERT_TRUE(etcd.PutIfAbsentOrSame(u->prefix + "members/7", "not json", 0, always).ok());
  ASSERT_TRUE(etcd.PutIfAbsentOrSame(u->prefix + "members/8", R"({"id": 9, "address": "127.0.0.1:1"})", 0, always).ok());
  ASSERT_TRUE(etcd.PutIfAbsentOrSame(u->prefix + "members/9", R"({"id": 9, "address": "nowhere:0"})", 0, always).ok());
  const std::string self_address = cluster_->address(0);
  ASSERT_TRUE(etcd.PutIfAbsentOrSame(u->prefix + "members/10",
                                     R"({"id": 10, "address": ")" + self_address + R"("})", 0, always)
                  .ok());
  for (const char* what : {"members/7 skipped: the value is not JSON", "members/8 skipped: id 9 is not the key's (8)",
                           "members/9 skipped:", "members/10 skipped: address " }) {
    const auto t0 = Clock::now();
    while (cluster_->node(0).ReadLog().find(what) == std::string::npos && SecondsSince(t0) < 10) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    EXPECT_NE(cluster_->node(0).ReadLog().find(what), std::string::npos) << what;
  }
  EXPECT_EQ(MemberIds(*cluster_, 0), (std::vector<uint32_t>{0}));
  EXPECT_GE(Metric(*cluster_, 0, "ptstore_etcd_bad_entries_total"), 4);

  // No --advertise, a bad URL, and an etcd nobody listens at: each refused.
  const std::string ptstored = PTSTORE_PTSTORED_PATH;
  auto run = [&](const std::string& args) {
    std::string out;
    FILE* f = ::popen((ptstored + " --socket " + cluster_->dir() + "/x.sock --arena-size 8MiB --no-prefault " +
                       "--secret-file " + cluster_->secret_file() + " " + args + " 2>&1")
                          .c_str(),
                      "r");
    char buf[4096];
    for (size_t n; (n = fread(buf, 1, sizeof(buf), f)) > 0;) out.append(buf, n);
    const int rc = ::pclose(f);
    return std::make_pair(WEXITSTATUS(rc), out);
  };
  // Node 0's id from another address: refused, naming who holds it.
  auto [rc0, out0] = run("--node-id 0 --cluster " + url + " --advertise 127.0.0.1:" + std::to_string(FreePort()));
  EXPECT_EQ(rc0, 1);
  EXPECT_NE(out0.find("node id 0 is registered by another node"), std::string::npos) << out0;
  EXPECT_NE(out0.find(self_address), std::string::npos) << out0;
  EXPECT_EQ(MemberIds(*cluster_, 0), (std::vector<uint32_t>{0}));
  auto [rc1, out1] = run("--node-id 5 --cluster " + url);
  EXPECT_EQ(rc1, 1);
  EXPECT_NE(out1.find("needs this node's address: set [cluster] advertise or --advertise HOST:PORT"),
            std::string::npos) << out1;
  auto [rc2, out2] = run("--node-id 5 --cluster etcd://127.0.0.1:2379 --advertise 127.0.0.1:1");
  EXPECT_EQ(rc2, 1);
  EXPECT_NE(out2.find("no /PREFIX after the endpoints"), std::string::npos) << out2;
  const std::string dead = "127.0.0.1:" + std::to_string(FreePort());
  const std::string short_lease = cluster_->dir() + "/short-lease.toml";
  std::ofstream(short_lease) << "[cluster]\netcd_lease_s = 2\n";  // gives up after 4 s
  auto [rc3, out3] = run("--node-id 5 --config " + short_lease + " --cluster etcd://" + dead +
                         "/p --advertise 127.0.0.1:" + std::to_string(FreePort()));
  EXPECT_EQ(rc3, 1);
  EXPECT_NE(out3.find("no endpoint answered (" + dead), std::string::npos) << out3;
}

}  // namespace
}  // namespace ptstore::testing

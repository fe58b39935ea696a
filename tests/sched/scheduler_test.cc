// The scheduler library against real ptstored processes: the prefix probe
// (Client::LocatePrefix, StoreIndex over a cluster and over independent
// stores), every routing policy, the load bound, the elastic pool
// operations and the load advisor.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <map>
#include <set>
#include <thread>

#include "sched/load_advisor.h"
#include "sched/pool.h"
#include "sched/scheduler.h"
#include "sched/store_index.h"
#include "tests/cluster/kv_check.h"
#include "tests/sched/test_model.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/cluster.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::sched {
namespace {

using storage::testkv::Cat;
using storage::testkv::RandomTokens;
using storage::testkv::Kv;
using storage::testkv::kBpt;
using testing::kNs;
using testing::TestCluster;

class SchedulerTest : public ::testing::Test {
 protected:
  void StartCluster(size_t n, uint32_t replicate_after = 2) {
    TestCluster::Options o;
    o.nodes = n;
    o.replicate_after = replicate_after;
    cluster_ = std::make_unique<TestCluster>(o);
    ASSERT_OK(cluster_->Start());
    ASSERT_OK(cluster_->WaitConverged());
    std::vector<std::unique_ptr<Client>> clients;
    testing::ConnectEach(*cluster_, &clients);
    for (size_t i = 0; i < clients.size(); ++i) nodes_.push_back({uint32_t(i), std::move(clients[i])});
  }
  void TearDown() override {
    if (HasFailure() && cluster_) testing::PrintLogs(*cluster_);
  }
  Client& client(size_t i) { return *nodes_[i].client; }
  // One instance per node, "i<node>".
  std::unique_ptr<Scheduler> MakeScheduler(Policy p, PrefixIndex* index, double load_bound_s = 1.0) {
    SchedulerOptions o;
    o.policy = p;
    o.load_bound_s = load_bound_s;
    o.cost = TestModel();
    auto s = std::make_unique<Scheduler>(o, index);
    for (const StoreIndex::Node& n : nodes_) {
      EXPECT_OK(s->Register({"i" + std::to_string(n.id), n.id, "node" + std::to_string(n.id)}));
    }
    return s;
  }

  std::unique_ptr<TestCluster> cluster_;
  std::vector<StoreIndex::Node> nodes_;
};

TEST_F(SchedulerTest, LocatePrefixNamesOwnersAndHolders) {
  StartCluster(3);
  const auto doc = RandomTokens(1, 64);
  const auto longer = Cat(doc, RandomTokens(2, 32));
  testing::SaveKv(client(0), doc);
  testing::SaveKv(client(1), longer);  // node 1 owns only the 32 new tokens
  for (size_t asker = 0; asker < 3; ++asker) {
    auto loc = client(asker).LocatePrefix(kNs, Cat(longer, RandomTokens(3, 16)));
    ASSERT_OK(loc);
    EXPECT_EQ(loc->matched_tokens, 96u) << asker;
    ASSERT_EQ(loc->spans.size(), 2u) << asker;
    EXPECT_EQ(loc->spans[0].end_token, 64u);
    EXPECT_EQ(loc->spans[0].owner, 0u);
    EXPECT_EQ(loc->spans[0].nodes, std::vector<uint32_t>{0});
    EXPECT_EQ(loc->spans[1].end_token, 96u);
    EXPECT_EQ(loc->spans[1].owner, 1u);
    EXPECT_EQ(loc->spans[1].nodes, std::vector<uint32_t>{1});
    EXPECT_EQ(loc->HeldBy(0), 64u);
    EXPECT_EQ(loc->HeldBy(1), 0u);  // node 1 lacks the first 64 tokens' bytes
    EXPECT_EQ(loc->TokensHeldBy(1), 32u);  // but holds the last 32
    EXPECT_EQ(loc->HeldBy(2), 0u);
  }
  // The probe is no lookup: the nodes' request counters do not move.
  auto before = client(2).Stats();
  ASSERT_OK(client(2).LocatePrefix(kNs, longer));
  auto after = client(2).Stats();
  EXPECT_EQ(after->lookups, before->lookups);
  EXPECT_EQ(after->hits, before->hits);
  // Node 2 loads the prompt twice: the second load keeps replicas there.
  EXPECT_EQ(testing::LoadAndCheck(client(2), longer), 96u);
  EXPECT_EQ(testing::LoadAndCheck(client(2), longer), 96u);
  auto loc = client(0).LocatePrefix(kNs, longer);
  ASSERT_OK(loc);
  EXPECT_EQ(loc->HeldBy(2), 96u);
  EXPECT_EQ(loc->spans[0].nodes, (std::vector<uint32_t>{0, 2}));
  // A miss, and an unknown namespace.
  auto miss = client(1).LocatePrefix(kNs, RandomTokens(99, 64));
  ASSERT_OK(miss);
  EXPECT_EQ(miss->matched_tokens, 0u);
  EXPECT_TRUE(miss->spans.empty());
  EXPECT_ERROR(client(1).LocatePrefix("no-such-ns", doc), Code::kNotFound);
}

TEST_F(SchedulerTest, PrefixLocalityRoutesToTheNodeThatHoldsTheLongestPrefix) {
  StartCluster(3);
  StoreIndex index(nodes_, /*cluster=*/true);
  auto s = MakeScheduler(Policy::kPrefixLocality, &index);
  const auto doc = RandomTokens(7, 128);
  testing::SaveKv(client(2), doc);
  for (int k = 0; k < 4; ++k) {
    auto d = s->Route({kNs, Cat(doc, RandomTokens(100 + k, 20)), ""});
    ASSERT_OK(d);
    EXPECT_EQ(d->instance, "i2");
    EXPECT_EQ(d->local_tokens, 128u);
    EXPECT_EQ(d->cluster_tokens, 128u);
    EXPECT_EQ(d->plan.load_tokens, 128u);
    EXPECT_EQ(d->reason, "longest prefix");
    ASSERT_OK(s->Finished(d->ticket));
  }
  // Nothing cached: least-load, spread over the instances.
  std::set<std::string> used;
  std::vector<uint64_t> tickets;
  for (int k = 0; k < 3; ++k) {
    auto d = s->Route({kNs, RandomTokens(200 + k, 64), ""});
    ASSERT_OK(d);
    EXPECT_EQ(d->local_tokens, 0u);
    EXPECT_NE(d->reason.find("least-load"), std::string::npos) << d->reason;
    used.insert(d->instance);
    tickets.push_back(d->ticket);
  }
  EXPECT_EQ(used.size(), 3u);
  for (uint64_t t : tickets) ASSERT_OK(s->Finished(t));
}

TEST_F(SchedulerTest, PrefixLocalityFollowsTheDocumentNotTheSharedSystemPrompt) {
  // Every prompt starts with one system prompt, stored (owned) on node 0;
  // the documents after it are owned by the nodes that saved them. A node
  // that holds a document but not the system prompt is still the best
  // place for the document's questions (the 16 shared tokens come over the
  // network), and the plan there loads both.
  StartCluster(3);
  StoreIndex index(nodes_, true);
  auto s = MakeScheduler(Policy::kPrefixLocality, &index);
  const auto system = RandomTokens(40, 16);
  testing::SaveKv(client(0), system);
  const auto doc1 = Cat(system, RandomTokens(41, 128)), doc2 = Cat(system, RandomTokens(42, 128));
  testing::SaveKv(client(1), doc1);
  testing::SaveKv(client(2), doc2);
  for (int k = 0; k < 3; ++k) {
    auto d1 = s->Route({kNs, Cat(doc1, RandomTokens(50 + k, 16)), ""});
    auto d2 = s->Route({kNs, Cat(doc2, RandomTokens(60 + k, 16)), ""});
    ASSERT_TRUE(d1.ok() && d2.ok());
    EXPECT_EQ(d1->instance, "i1");
    EXPECT_EQ(d2->instance, "i2");
    EXPECT_EQ(d1->local_tokens, 128u);
    EXPECT_EQ(d1->cluster_tokens, 144u);
    EXPECT_EQ(d1->plan.load_tokens, 144u);
    ASSERT_OK(s->Finished(d1->ticket));
    ASSERT_OK(s->Finished(d2->ticket));
  }
}

TEST_F(SchedulerTest, PrefixLocalityGivesUpAnOverloadedNode) {
  StartCluster(2);
  StoreIndex index(nodes_, true);
  // A bound of 0.2 s of queued prefill: a few 4k-token requests exceed it.
  auto s = MakeScheduler(Policy::kPrefixLocality, &index, 0.2);
  const auto doc = RandomTokens(9, 64);
  testing::SaveKv(client(1), doc);
  // Long prompts on the same document (the suffix is computed: queued work).
  std::map<std::string, int> where;
  std::vector<uint64_t> tickets;
  for (int k = 0; k < 12; ++k) {
    auto d = s->Route({kNs, Cat(doc, RandomTokens(300 + k, 4096)), ""});
    ASSERT_OK(d);
    where[d->instance]++;
    tickets.push_back(d->ticket);
    if (d->instance == "i0") {
      EXPECT_EQ(d->reason, "least-load (longest prefix over load bound)");
    }
  }
  EXPECT_GT(where["i1"], 0);
  EXPECT_GT(where["i0"], 0) << "the holder took every request despite the load bound";
  // Prefilled and finished requests leave the queues.
  for (uint64_t t : tickets) ASSERT_OK(s->PrefillDone(t));
  for (const InstanceState& in : s->Instances()) EXPECT_NEAR(in.queued_s, 0.0, 1e-9) << in.spec.id;
  for (uint64_t t : tickets) ASSERT_OK(s->Finished(t));
  for (const InstanceState& in : s->Instances()) EXPECT_EQ(in.running, 0u) << in.spec.id;
  EXPECT_ERROR(s->Finished(tickets[0]), Code::kNotFound);
  EXPECT_ERROR(s->PrefillDone(987654), Code::kNotFound);
  // Back under the bound: the holder again.
  auto d = s->Route({kNs, Cat(doc, RandomTokens(400, 16)), ""});
  ASSERT_OK(d);
  EXPECT_EQ(d->instance, "i1");
}

TEST_F(SchedulerTest, RoundRobinLeastLoadAndSessionAffinity) {
  StartCluster(3);
  auto rr = MakeScheduler(Policy::kRoundRobin, nullptr);
  std::vector<std::string> order;
  for (int k = 0; k < 6; ++k) order.push_back(rr->Route({kNs, RandomTokens(k, 32), ""})->instance);
  EXPECT_EQ(order, (std::vector<std::string>{"i0", "i1", "i2", "i0", "i1", "i2"}));

  auto ll = MakeScheduler(Policy::kLeastLoad, nullptr);
  auto a = ll->Route({kNs, RandomTokens(1, 4096), ""});
  auto b = ll->Route({kNs, RandomTokens(2, 4096), ""});
  auto c = ll->Route({kNs, RandomTokens(3, 4096), ""});
  std::set<std::string> three = {a->instance, b->instance, c->instance};
  EXPECT_EQ(three.size(), 3u);
  ASSERT_OK(ll->PrefillDone(b->ticket));
  EXPECT_EQ(ll->Route({kNs, RandomTokens(4, 4096), ""})->instance, b->instance);  // the one whose queue emptied

  auto sa = MakeScheduler(Policy::kSessionAffinity, nullptr);
  std::map<std::string, std::string> first;
  std::set<std::string> spread;
  for (int round = 0; round < 3; ++round) {
    for (int u = 0; u < 30; ++u) {
      const std::string session = "user-" + std::to_string(u);
      auto d = sa->Route({kNs, RandomTokens(u * 10 + round, 32), session});
      ASSERT_OK(d);
      EXPECT_EQ(d->reason, "session");
      if (round == 0) first[session] = d->instance;
      EXPECT_EQ(d->instance, first[session]) << session;  // sticky
      spread.insert(d->instance);
    }
  }
  EXPECT_EQ(spread.size(), 3u);  // 30 sessions land on every instance
  // Another instance joins: rendezvous hashing moves only the sessions it wins.
  ASSERT_OK(sa->Register({"i9", 0, "node0-b"}));
  int moved = 0;
  for (int u = 0; u < 30; ++u) {
    const std::string session = "user-" + std::to_string(u);
    const std::string now = sa->Route({kNs, RandomTokens(u, 32), session})->instance;
    if (now != first[session]) {
      ++moved;
      EXPECT_EQ(now, "i9");
    }
  }
  EXPECT_GT(moved, 0);
  EXPECT_LT(moved, 20);
}

TEST_F(SchedulerTest, RegistrationErrors) {
  Scheduler s({}, nullptr);
  EXPECT_ERROR(s.Route({kNs, RandomTokens(1, 16), ""}), Code::kUnavailable);
  EXPECT_ERROR(s.Register({"", 0, "x"}), Code::kInvalidArgument);
  ASSERT_OK(s.Register({"a", 0, "x"}));
  EXPECT_OK(s.Register({"a", 0, "x"}));  // the same again: a no-op
  Status dup = s.Register({"a", 1, "y"});
  EXPECT_ERROR(dup, Code::kAlreadyExists);
  EXPECT_NE(dup.message().find("instance a"), std::string::npos) << dup.message();
  EXPECT_ERROR(s.Unregister("b"), Code::kNotFound);
  auto d = s.Route({kNs, RandomTokens(1, 16), ""});
  ASSERT_OK(d);
  ASSERT_OK(s.Unregister("a"));
  EXPECT_ERROR(s.Finished(d->ticket), Code::kNotFound);  // forgotten with its instance
  EXPECT_ERROR(ParsePolicy("random"), Code::kInvalidArgument);
  EXPECT_EQ(*ParsePolicy("prefix"), Policy::kPrefixLocality);
}

TEST_F(SchedulerTest, ForgottenRequestsExpire) {
  // A caller that dies before Finished must not leave its load behind.
  SchedulerOptions o;
  o.policy = Policy::kLeastLoad;
  o.cost = TestModel();
  o.ticket_ttl_s = 0.05;
  Scheduler s(o, nullptr);
  ASSERT_OK(s.Register({"a", 0, "x"}));
  auto first = s.Route({kNs, RandomTokens(1, 4096), ""});
  ASSERT_OK(first);
  EXPECT_EQ(s.Instances()[0].running, 1u);
  EXPECT_GT(s.Instances()[0].queued_s, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  auto second = s.Route({kNs, RandomTokens(2, 16), ""});
  ASSERT_OK(second);
  EXPECT_EQ(s.Instances()[0].running, 1u);  // the second only
  EXPECT_ERROR(s.Finished(first->ticket), Code::kNotFound);
  EXPECT_OK(s.Finished(second->ticket));
  EXPECT_EQ(s.Instances()[0].running, 0u);
  EXPECT_NEAR(s.Instances()[0].queued_s, 0, 1e-9);
}

TEST_F(SchedulerTest, IndependentStoresAreMergedByHeldLength) {
  // Node-local reuse: two ptstored without a cluster, each knowing only itself.
  std::vector<std::unique_ptr<testing::Daemon>> daemons;
  for (uint32_t i = 0; i < 2; ++i) {
    daemons.push_back(std::make_unique<testing::Daemon>());
    testing::Daemon::Options o;
    o.extra_args = {"--node-id", std::to_string(i)};
    ASSERT_OK(daemons.back()->Start(o));
    ClientOptions co;
    co.socket_path = daemons.back()->socket_path();
    auto c = Client::Connect(co);
    ASSERT_OK(c);
    ASSERT_OK((*c)->CreateNamespace(kNs, storage::testkv::SmallLayout()));
    nodes_.push_back({i, std::move(*c)});
  }
  const auto doc = RandomTokens(5, 64);
  testing::SaveKv(client(0), doc);
  testing::SaveKv(client(1), Cat(doc, RandomTokens(6, 32)));  // independent: node 1 stores all 96
  StoreIndex index(nodes_, /*cluster=*/false);
  auto loc = index.Locate(kNs, Cat(doc, RandomTokens(6, 48)));
  ASSERT_OK(loc);
  EXPECT_EQ(loc->matched_tokens, 96u);
  EXPECT_EQ(loc->HeldBy(0), 64u);
  EXPECT_EQ(loc->HeldBy(1), 96u);
  auto s = MakeScheduler(Policy::kPrefixLocality, &index);
  EXPECT_EQ(s->Route({kNs, Cat(doc, RandomTokens(6, 48)), ""})->instance, "i1");
  EXPECT_EQ(s->Route({kNs, Cat(doc, RandomTokens(8, 48)), ""})->instance, "i0");  // 64 on both; i1 is busier
  // Merge rules on their own.
  PrefixLocation m = MergeIndependent({{0, 32}, {1, 0}, {2, 64}, {3, 32}});
  EXPECT_EQ(m.matched_tokens, 64u);
  ASSERT_EQ(m.spans.size(), 2u);
  EXPECT_EQ(m.spans[0].nodes, (std::vector<uint32_t>{0, 2, 3}));
  EXPECT_EQ(m.spans[1].nodes, (std::vector<uint32_t>{2}));
  EXPECT_EQ(MergeIndependent({}).matched_tokens, 0u);
}

TEST_F(SchedulerTest, ElasticPoolOperations) {
  StartCluster(2, /*replicate_after=*/1);
  ElasticPool pool(nodes_);
  const auto prompt = RandomTokens(11, 96);
  const auto kv = Kv(prompt, 0, prompt.size());
  // allocate + insert from the shared buffer on node 0
  auto buf = pool.Allocate(0, kv.size());
  ASSERT_OK(buf);
  std::memcpy(buf->data(), kv.data(), kv.size());
  auto saved = pool.Insert(0, kNs, prompt, *buf, 0, kv.size());
  ASSERT_OK(saved);
  EXPECT_EQ(saved->stored_tokens, 96u);
  // match
  auto m = pool.Match(kNs, prompt);
  ASSERT_OK(m);
  EXPECT_EQ(m->HeldBy(0), 96u);
  EXPECT_EQ(m->HeldBy(1), 0u);
  // transfer to node 1: pinned there, byte-exact; kept as a replica
  {
    auto pin = pool.Transfer(kNs, prompt, 1);
    ASSERT_OK(pin);
    ASSERT_EQ(pin->tokens(), 96u);
    std::vector<uint8_t> out(pin->bytes());
    ASSERT_OK(pin->CopyTo(out.data(), out.size()));
    EXPECT_EQ(out, kv);
  }
  m = pool.Match(kNs, prompt);
  ASSERT_OK(m);
  EXPECT_EQ(m->HeldBy(1), 96u);
  // prefill on node 0 -> decode on node 1
  const auto p2 = Cat(prompt, RandomTokens(12, 64));
  const auto kv2 = Kv(p2, 0, p2.size());
  std::vector<uint8_t> dst(kv2.size());
  auto h = pool.PrefillToDecode(kNs, p2, kv2.data(), kv2.size(), 0, 1, dst.data(), dst.size());
  ASSERT_OK(h);
  EXPECT_EQ(h->saved.stored_tokens, 64u);  // the prompt's first 96 were there already
  EXPECT_EQ(h->loaded_tokens, 160u);
  EXPECT_EQ(dst, kv2);
  // errors
  EXPECT_ERROR(pool.Allocate(7, 100), Code::kNotFound);
  EXPECT_ERROR(pool.Insert(1, kNs, prompt, kv.data(), kv.size() - 1), Code::kInvalidArgument);
  auto none = pool.Match("no-such-ns", prompt);
  ASSERT_OK(none);
  EXPECT_EQ(none->matched_tokens, 0u);
}

TEST_F(SchedulerTest, LoadAdvisorPlansFromWhereThePrefixIs) {
  StartCluster(2);
  const auto doc = RandomTokens(21, 256);
  testing::SaveKv(client(0), doc);
  const auto prompt = Cat(doc, RandomTokens(22, 16));
  LoadAdvisor local(&client(0), TestModel(), LoadPath::kTcp);
  auto p = local.Advise(kNs, prompt);
  ASSERT_OK(p);
  EXPECT_EQ(p->load_tokens, 256u);
  EXPECT_LT(p->total_s(), local.model().PrefillSeconds(prompt.size()));
  LoadAdvisor remote(&client(1), TestModel(), LoadPath::kTcp);
  auto q = remote.Advise(kNs, prompt);
  ASSERT_OK(q);
  EXPECT_EQ(q->load_tokens, 256u);
  EXPECT_GT(q->load_s, p->load_s);  // over the network it costs more
  // A network so slow that node 1 recomputes.
  Profile slow = TestModel().profile();
  slow.paths[size_t(LoadPath::kTcp)].bandwidth_bytes_per_s = 1e6;
  LoadAdvisor crawl(&client(1), CostModel(slow), LoadPath::kTcp);
  EXPECT_EQ(crawl.Advise(kNs, prompt)->load_tokens, 0u);
  EXPECT_EQ(crawl.Advise("no-such-ns", prompt)->load_tokens, 0u);
}

}  // namespace
}  // namespace ptstore::sched

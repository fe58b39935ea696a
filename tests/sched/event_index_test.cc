// ptstore-sched's event index (sched/event_index.h) against real ptstored
// processes publishing KV events: the same answers as the store's own
// LocatePrefix, without an RPC; the fallback while a stream is unknown; a
// restart (a new incarnation) and removals followed.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <regex>
#include <thread>

#include "sched/event_index.h"
#include "sched/store_index.h"
#include "tests/cluster/kv_check.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/daemon.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::sched {
namespace {

using storage::testkv::Cat;
using storage::testkv::RandomTokens;
using testing::kNs;

EventIndex::Source SourceOf(uint32_t node, const testing::Daemon& d) {
  std::smatch m;
  const std::string log = d.ReadLog();
  static const std::regex re("kv events on (tcp://\\S+) replay (tcp://\\S+) incarnation");
  EventIndex::Source s;
  s.node = node;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), re); it != std::sregex_iterator(); ++it) {
    s.pub = (*it)[1];
    s.replay = (*it)[2];
  }
  return s;
}

template <typename F>
bool WaitFor(F f, int ms = 10000) {
  for (int i = 0; i < ms / 10; i++) {
    if (f()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return f();
}

using testing::FreePort;

class EventIndexTest : public ::testing::Test {
 protected:
  void StartNode(uint32_t i) {
    testing::Daemon::Options o;
    // Fixed ports: a restarted node is found where it was (its new incarnation tells the restart).
    o.extra_args = {"--node-id", std::to_string(i), "--events-port", std::to_string(ports_[i].first),
                    "--events-replay-port", std::to_string(ports_[i].second), "--ssd-dir", ssd_[i],
                    "--ssd-capacity", "64MiB"};
    daemons_[i] = std::make_unique<testing::Daemon>();
    ASSERT_OK(daemons_[i]->Start(o));
    ClientOptions co;
    co.socket_path = daemons_[i]->socket_path();
    auto c = Client::Connect(co);
    ASSERT_OK(c);
    ASSERT_OK((*c)->CreateNamespace(kNs, storage::testkv::SmallLayout()));
    nodes_[i] = {i, std::move(*c)};
  }
  void SetUp() override {
    for (uint32_t i = 0; i < 2; i++) ssd_.push_back(testing::MakeTempDir("ptstore-evidx"));
    for (uint32_t i = 0; i < 2; i++) ports_.push_back({FreePort(), FreePort()});
    daemons_.resize(2);
    nodes_.resize(2);
    for (uint32_t i = 0; i < 2; i++) StartNode(i);
  }
  void TearDown() override {
    for (auto& d : daemons_) d->Stop();
    for (auto& s : ssd_) std::filesystem::remove_all(s);
  }
  std::vector<std::string> ssd_;
  std::vector<std::pair<uint16_t, uint16_t>> ports_;
  std::vector<std::unique_ptr<testing::Daemon>> daemons_;
  std::vector<StoreIndex::Node> nodes_;
};

bool Same(const Result<PrefixLocation>& a, const Result<PrefixLocation>& b) {
  return a.ok() && b.ok() && a->matched_tokens == b->matched_tokens && a->HeldBy(0) == b->HeldBy(0) &&
         a->HeldBy(1) == b->HeldBy(1);
}

TEST_F(EventIndexTest, AnswersAsLocatePrefixDoesAndFollowsRestartsAndRemovals) {
  const auto doc = RandomTokens(5, 64);
  testing::SaveKv(*nodes_[0].client, doc);
  testing::SaveKv(*nodes_[1].client, Cat(doc, RandomTokens(6, 32)));
  StoreIndex store_index(nodes_, /*cluster=*/false);
  EventIndex events({SourceOf(0, *daemons_[0]), SourceOf(1, *daemons_[1])}, &store_index);
  ASSERT_TRUE(WaitFor([&] { return events.AllKnown(); }));
  const auto q1 = Cat(doc, RandomTokens(6, 48)), q2 = Cat(doc, RandomTokens(8, 48)), q3 = RandomTokens(99, 64);
  for (const auto& q : {q1, q2, q3}) {
    ASSERT_TRUE(WaitFor([&] { return Same(events.Locate(kNs, q), store_index.Locate(kNs, q)); }));
  }
  auto loc = events.Locate(kNs, q1);
  EXPECT_EQ(loc->HeldBy(0), 64u);
  EXPECT_EQ(loc->HeldBy(1), 96u);
  EXPECT_GT(events.stats().from_events, 0u);
  // A removal on node 1, a restart of node 0 (SSD: what it persisted comes back as a new incarnation).
  ASSERT_OK(nodes_[1].client->Remove(kNs, Cat(doc, RandomTokens(6, 32))));
  const uint64_t restarts = events.stats().restarts;
  daemons_[0]->Stop();
  StartNode(0);
  StoreIndex store_index2(nodes_, /*cluster=*/false);
  ASSERT_TRUE(WaitFor([&] { return events.stats().restarts > restarts; })) << "the new incarnation was seen";
  for (const auto& q : {q1, q2, q3}) {
    ASSERT_TRUE(WaitFor([&] { return Same(events.Locate(kNs, q), store_index2.Locate(kNs, q)); }))
        << events.Locate(kNs, q)->HeldBy(0) << " vs " << store_index2.Locate(kNs, q)->HeldBy(0);
  }
  // Node 1 stored the 96 tokens as one increment: the removal took all of them; node 0's came back from SSD.
  EXPECT_EQ(events.Locate(kNs, q1)->HeldBy(1), 0u);
  EXPECT_EQ(events.Locate(kNs, q1)->HeldBy(0), 64u);
}

TEST_F(EventIndexTest, AnUnknownStreamFallsBackToLocatePrefix) {
  testing::SaveKv(*nodes_[0].client, RandomTokens(5, 64));
  StoreIndex store_index(nodes_, /*cluster=*/false);
  EventIndex::Source dead{1, "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"};
  EventIndex events({SourceOf(0, *daemons_[0]), dead}, &store_index);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_FALSE(events.AllKnown());
  auto loc = events.Locate(kNs, RandomTokens(5, 64));
  ASSERT_OK(loc);
  EXPECT_EQ(loc->HeldBy(0), 64u);
  EXPECT_GT(events.stats().from_fallback, 0u);
  EXPECT_EQ(events.stats().from_events, 0u);
  EXPECT_FALSE(EventIndex::ParseSource("0=tcp://a:1").ok());
  EXPECT_FALSE(EventIndex::ParseSource("x=tcp://a:1,tcp://a:2").ok());
  EXPECT_OK(EventIndex::ParseSource("3=tcp://a:1,tcp://a:2"));
}

}  // namespace
}  // namespace ptstore::sched

// ptstore-sched's API (sched/service.h) through SchedClient and raw sockets:
// a real two-node ptstored cluster as the prefix index, the service
// in-process on an ephemeral port; routing by prefix and round-robin, every
// error's HTTP status and Status code, the metrics; then the real
// ptstore-sched binary: it starts, answers, routes by the stores' index,
// stops on SIGTERM, and refuses bad flags with a clear message.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <regex>
#include <thread>

#include <gtest/gtest.h>

#include "sched/sched_client.h"
#include "sched/scheduler.h"
#include "sched/service.h"
#include "sched/store_index.h"
#include "tests/cluster/kv_check.h"
#include "tests/sched/test_model.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/cluster.h"
#include "tests/testing/http_get.h"
#include "tests/testing/prometheus_text.h"
#include "tests/testing/run_tool.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::sched {
namespace {

using namespace std::chrono_literals;
using storage::testkv::Cat;
using storage::testkv::RandomTokens;
using testing::kNs;
using testing::TestCluster;

const std::string kSchedBinary = PTSTORE_SCHED_PATH;

// One two-node cluster for the whole suite (node ids 0 and 1).
class SchedServiceTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    TestCluster::Options o;
    o.nodes = 2;
    cluster_ = new TestCluster(o);
    Status st = cluster_->Start();
    if (st.ok()) st = cluster_->WaitConverged();
    ASSERT_OK(st);
    std::vector<std::unique_ptr<Client>> clients;
    testing::ConnectEach(*cluster_, &clients);
    nodes_ = new std::vector<StoreIndex::Node>;
    for (size_t i = 0; i < clients.size(); ++i) nodes_->push_back({uint32_t(i), std::move(clients[i])});
  }
  static void TearDownTestSuite() {
    delete nodes_;
    nodes_ = nullptr;
    delete cluster_;
    cluster_ = nullptr;
  }
  void TearDown() override {
    if (service_) service_->Stop();
    if (HasFailure() && cluster_) testing::PrintLogs(*cluster_);
  }

  // The service over a scheduler with `policy`, asking the cluster's index
  // when `with_index`.
  void StartService(Policy policy, bool with_index, SchedServiceOptions so = {}) {
    ASSERT_NE(cluster_, nullptr);
    if (with_index) index_ = std::make_unique<StoreIndex>(*nodes_, /*cluster=*/true);
    SchedulerOptions o;
    o.policy = policy;
    o.cost = TestModel();
    scheduler_ = std::make_unique<Scheduler>(o, index_.get());
    so.port = 0;
    service_ = std::make_unique<SchedService>(scheduler_.get(), so);
    Status st = service_->Start();
    ASSERT_OK(st);
    ASSERT_NE(service_->port(), 0);
    SchedClientOptions co;
    co.address = service_->address();
    client_ = std::make_unique<SchedClient>(co);
  }
  Client& store(size_t i) { return *(*nodes_)[i].client; }
  uint16_t port() const { return service_->port(); }

  static TestCluster* cluster_;
  static std::vector<StoreIndex::Node>* nodes_;
  std::unique_ptr<StoreIndex> index_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unique_ptr<SchedService> service_;
  std::unique_ptr<SchedClient> client_;
};

TestCluster* SchedServiceTest::cluster_ = nullptr;
std::vector<StoreIndex::Node>* SchedServiceTest::nodes_ = nullptr;

TEST_F(SchedServiceTest, PrefixRoutesToTheNodeHoldingThePrompt) {
  StartService(Policy::kPrefixLocality, true);
  ASSERT_OK(client_->Register({"i0", 0, "http://node0:8000"}));
  ASSERT_OK(client_->Register({"i1", 1, "http://node1:8000"}));
  // Registering the same spec again is a no-op (an instance re-registering).
  ASSERT_OK(client_->Register({"i1", 1, "http://node1:8000"}));

  const auto doc = RandomTokens(7, 128);
  testing::SaveKv(store(1), doc);
  for (int k = 0; k < 3; ++k) {
    auto d = client_->Route({kNs, Cat(doc, RandomTokens(100 + k, 20)), "s" + std::to_string(k)});
    ASSERT_OK(d);
    EXPECT_EQ(d->instance, "i1");
    EXPECT_EQ(d->node, 1u);
    EXPECT_EQ(d->local_tokens, 128u);
    EXPECT_EQ(d->cluster_tokens, 128u);
    EXPECT_EQ(d->plan.load_tokens, 128u);
    EXPECT_GT(d->plan.compute_s, 0);
    EXPECT_EQ(d->reason, "longest prefix");
    EXPECT_OK(client_->PrefillDone(d->ticket));
    EXPECT_OK(client_->PrefillDone(d->ticket));  // twice is fine
    EXPECT_OK(client_->Finished(d->ticket));
    EXPECT_ERROR(client_->Finished(d->ticket), Code::kNotFound);
  }
  // A prompt nobody holds goes to the least loaded instance.
  auto miss = client_->Route({kNs, RandomTokens(55, 64), ""});
  ASSERT_OK(miss);
  EXPECT_EQ(miss->local_tokens, 0u);
  EXPECT_NE(miss->reason.find("least-load"), std::string::npos) << miss->reason;

  auto list = client_->Instances();
  ASSERT_OK(list);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[0].spec.id, "i0");
  EXPECT_EQ((*list)[1].spec.id, "i1");
  EXPECT_EQ((*list)[1].spec.endpoint, "http://node1:8000");
  EXPECT_EQ((*list)[1].spec.node, 1u);
  EXPECT_EQ((*list)[0].routed + (*list)[1].routed, 4u);
  EXPECT_GE((*list)[1].routed, 3u);
  EXPECT_EQ((*list)[0].running + (*list)[1].running, 1u);  // the miss is not finished

  // The metrics count routes by instance and reason.
  auto m = testing::HttpGet(port(), "/metrics");
  ASSERT_OK(m);
  EXPECT_EQ(m->code, 200);
  auto parsed = testing::ParsePromText(m->body);
  ASSERT_OK(parsed) << "\n" << m->body;
  EXPECT_EQ(parsed->Value("ptstore_sched_routed_total", {{"instance", "i1"}, {"reason", "longest prefix"}}), 3);
  EXPECT_EQ(parsed->Value("ptstore_sched_instances"), 2);
  EXPECT_EQ(parsed->Value("ptstore_sched_route_seconds_count"), 4);
  EXPECT_EQ(parsed->Value("ptstore_sched_info", {{"policy", "prefix"}, {"model", "mistral-7b"}, {"gpu", "h100-80g"}}),
            1);

  auto policy = client_->Policy();
  ASSERT_OK(policy);
  EXPECT_EQ(policy->policy, "prefix");
  EXPECT_EQ(policy->model, "mistral-7b");
  EXPECT_EQ(policy->gpu, "h100-80g");
  EXPECT_EQ(policy->remote_path, "rma");
  EXPECT_DOUBLE_EQ(policy->load_bound_s, -1.0);  // automatic

  EXPECT_OK(client_->Unregister("i1"));
  EXPECT_ERROR(client_->Unregister("i1"), Code::kNotFound);
  auto after = client_->Route({kNs, Cat(doc, RandomTokens(9, 4)), ""});
  ASSERT_OK(after);
  EXPECT_EQ(after->instance, "i0");
}

TEST_F(SchedServiceTest, RoundRobinAlternates) {
  StartService(Policy::kRoundRobin, false);
  ASSERT_OK(client_->Register({"a", 0, ""}));
  ASSERT_OK(client_->Register({"b", 1, ""}));
  std::vector<std::string> got;
  for (int k = 0; k < 6; ++k) {
    auto d = client_->Route({kNs, RandomTokens(k, 16), ""});
    ASSERT_OK(d);
    EXPECT_EQ(d->reason, "round-robin");
    got.push_back(d->instance);
  }
  EXPECT_EQ(got, (std::vector<std::string>{"a", "b", "a", "b", "a", "b"}));
}

TEST_F(SchedServiceTest, ErrorsMapToStatusesAndCodes) {
  StartService(Policy::kRoundRobin, false);
  // No instance registered: 503, Unavailable.
  auto none = client_->Route({kNs, {1, 2, 3}, ""});
  EXPECT_ERROR(none, Code::kUnavailable);
  auto raw = client_->Call("POST", "/v1/route", R"({"ns":"kv","tokens":[1,2,3]})");
  ASSERT_OK(raw);
  EXPECT_EQ(raw->status, 503);
  EXPECT_EQ(raw->content_type, "application/json");
  EXPECT_NE(raw->body.find("\"code\":\"unavailable\""), std::string::npos) << raw->body;

  // A duplicate registration with another node: 409, AlreadyExists.
  ASSERT_OK(client_->Register({"a", 0, "x"}));
  Status dup = client_->Register({"a", 1, "x"});
  EXPECT_ERROR(dup, Code::kAlreadyExists);
  auto dup_raw = client_->Call("POST", "/v1/instances", R"({"id":"a","node":1,"endpoint":"x"})");
  ASSERT_OK(dup_raw);
  EXPECT_EQ(dup_raw->status, 409);

  // Unknown tickets and instances: 404, NotFound.
  EXPECT_ERROR(client_->PrefillDone(987654), Code::kNotFound);
  EXPECT_ERROR(client_->Finished(987654), Code::kNotFound);
  EXPECT_ERROR(client_->Unregister("nobody"), Code::kNotFound);
  auto t404 = client_->Call("POST", "/v1/requests/987654/finished");
  ASSERT_OK(t404);
  EXPECT_EQ(t404->status, 404);
  // An id with a space and a slash survives the path (percent-encoded).
  ASSERT_OK(client_->Register({"odd id/1", 0, ""}));
  EXPECT_OK(client_->Unregister("odd id/1"));

  // Bad requests: 400 naming what is wrong, never a crash.
  struct Case {
    std::string path;
    std::string body;
    int status;
    std::string mention;
  };
  const std::vector<Case> cases = {
      {"/v1/instances", "{\"id\":\"b\",", 400, "malformed JSON"},
      {"/v1/instances", "[1,2]", 400, "object"},
      {"/v1/instances", "", 400, "body"},
      {"/v1/instances", R"({"node":1})", 400, "'id'"},
      {"/v1/instances", R"({"id":"","node":1})", 400, "'id'"},
      {"/v1/instances", R"({"id":7,"node":1})", 400, "'id'"},
      {"/v1/instances", R"({"id":"b"})", 400, "'node'"},
      {"/v1/instances", R"({"id":"b","node":-1})", 400, "'node'"},
      {"/v1/instances", R"({"id":"b","node":4294967296})", 400, "'node'"},
      {"/v1/instances", R"({"id":"b","node":"1"})", 400, "'node'"},
      {"/v1/instances", R"({"id":"b","node":1,"endpoint":5})", 400, "'endpoint'"},
      {"/v1/route", R"({"tokens":[1]})", 400, "'ns'"},
      {"/v1/route", R"({"ns":"kv"})", 400, "'tokens'"},
      {"/v1/route", R"({"ns":"kv","tokens":"1 2 3"})", 400, "'tokens'"},
      {"/v1/route", R"({"ns":"kv","tokens":[1,-2]})", 400, "element 1"},
      {"/v1/route", R"({"ns":"kv","tokens":[1,4294967296]})", 400, "element 1"},
      {"/v1/route", R"({"ns":"kv","tokens":[1.5]})", 400, "element 0"},
      {"/v1/route", R"({"ns":"kv","tokens":[[1]]})", 400, "element 0"},
      {"/v1/route", R"({"ns":"kv","tokens":[1],"session":[]})", 400, "'session'"},
      {"/v1/route", std::string(100000, '[') + std::string(100000, ']'), 400, "nests"},
      {"/v1/route", "{\"ns\":\"\xff\xfe\",\"tokens\":[1]}", 400, "malformed JSON"},
      {"/v1/requests/abc/finished", "", 400, "ticket"},
      {"/v1/requests/99999999999999999999999/finished", "", 400, "ticket"},
      {"/v1/nothing", "", 404, "no such endpoint"},
      {"/v1/requests/1/started", "", 404, "no such endpoint"},
  };
  for (const Case& c : cases) {
    auto r = client_->Call("POST", c.path, c.body);
    ASSERT_OK(r) << c.path << " " << c.body.substr(0, 60) << ": " << r.status().ToString();
    EXPECT_EQ(r->status, c.status) << c.path << " " << c.body.substr(0, 60) << ": " << r->body;
    EXPECT_NE(r->body.find(c.mention), std::string::npos) << c.path << " " << c.body.substr(0, 60) << ": " << r->body;
    EXPECT_EQ(r->content_type, "application/json");
  }
  Status bad = client_->Register({"", 0, ""});
  EXPECT_ERROR(bad, Code::kInvalidArgument);

  // Wrong methods: 405 with Allow.
  auto m = testing::HttpExchange(port(), "GET /v1/route HTTP/1.1\r\n\r\n");
  ASSERT_OK(m);
  EXPECT_EQ(m->code, 405);
  EXPECT_EQ(m->headers["allow"], "POST");
  auto m2 = testing::HttpExchange(port(), "PUT /v1/instances HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}");
  ASSERT_OK(m2);
  EXPECT_EQ(m2->code, 405);
  EXPECT_EQ(m2->headers["allow"], "GET, POST");

  // Malformed JSON and malformed HTTP, as raw bytes.
  auto j = testing::HttpExchange(port(), "POST /v1/route HTTP/1.1\r\nContent-Length: 9\r\n\r\n{\"ns\":}}}");
  ASSERT_OK(j);
  EXPECT_EQ(j->code, 400);
  EXPECT_NE(j->body.find("\"code\":\"invalid_argument\""), std::string::npos) << j->body;
  auto h = testing::HttpExchange(port(), "POST /v1/route HTTP/1.1\r\nContent-Length: nine\r\n\r\n");
  ASSERT_OK(h);
  EXPECT_EQ(h->code, 400);
  EXPECT_NE(h->body.find("\"error\""), std::string::npos) << h->body;

  // A body over the 4 MiB cap: 413, refused before it is read.
  std::string huge = "{\"ns\":\"kv\",\"tokens\":[" + std::string(5 << 20, '1') + "]}";
  auto big = testing::HttpExchange(port(), "POST /v1/route HTTP/1.1\r\nContent-Length: " +
                                               std::to_string(huge.size()) + "\r\n\r\n" + huge);
  ASSERT_OK(big);
  EXPECT_EQ(big->code, 413);
  EXPECT_NE(big->body.find("\"error\""), std::string::npos) << big->body;
  auto big2 = client_->Call("POST", "/v1/route", huge);
  ASSERT_OK(big2);
  EXPECT_EQ(big2->status, 413);

  // Still serving.
  auto d = client_->Route({kNs, {1, 2, 3}, ""});
  ASSERT_OK(d);
  EXPECT_EQ(d->instance, "a");
}

TEST_F(SchedServiceTest, UnreachableServiceIsUnavailable) {
  SchedClientOptions co;
  co.address = "127.0.0.1:" + std::to_string(testing::FreePort());
  co.timeout_ms = 1000;
  SchedClient c(co);
  EXPECT_ERROR(c.Register({"a", 0, ""}), Code::kUnavailable);
  EXPECT_ERROR(c.Route({kNs, {1}, ""}), Code::kUnavailable);
  SchedClient bad({"no-such-host.invalid:7600", 1000});
  EXPECT_ERROR(bad.Instances(), Code::kUnavailable);
  SchedClient malformed({"[::1", 1000});
  EXPECT_ERROR(malformed.Instances(), Code::kInvalidArgument);
}

// The port of "listening on http://127.0.0.1:PORT" in a log; 0 if not there yet.
uint16_t ListeningPort(const std::string& log) {
  static const std::regex kLine(R"(listening on http://127\.0\.0\.1:([0-9]+))");
  std::smatch m;
  if (!std::regex_search(log, m, kLine)) return 0;
  return static_cast<uint16_t>(std::stoul(m[1]));
}

TEST_F(SchedServiceTest, TheBinaryServesAndStops) {
  const std::string log = cluster_->dir() + "/sched.log";
  auto pid = testing::SpawnWithLog({kSchedBinary, "--listen", "127.0.0.1:0", "--policy", "prefix", "--store",
                                    "0=" + cluster_->node(0).socket_path(), "--store",
                                    "1=" + cluster_->node(1).socket_path(), "--cluster", "--remote-path", "tcp",
                                    "--load-bound", "2.5", "--log-level", "debug"},
                                   log);
  ASSERT_OK(pid);
  uint16_t p = 0;
  for (int i = 0; i < 200 && p == 0; ++i) {
    std::this_thread::sleep_for(25ms);
    p = ListeningPort(testing::ReadFile(log));
  }
  ASSERT_NE(p, 0) << testing::ReadFile(log);
  auto policy = testing::HttpGet(p, "/v1/policy");
  ASSERT_OK(policy);
  EXPECT_EQ(policy->code, 200);
  EXPECT_NE(policy->body.find("\"policy\":\"prefix\""), std::string::npos) << policy->body;
  EXPECT_NE(policy->body.find("\"remote_path\":\"tcp\""), std::string::npos) << policy->body;
  EXPECT_NE(policy->body.find("\"load_bound_s\":2.5"), std::string::npos) << policy->body;

  // It routes by the stores' index.
  SchedClient c({"127.0.0.1:" + std::to_string(p), 5000});
  ASSERT_OK(c.Register({"i0", 0, ""}));
  ASSERT_OK(c.Register({"i1", 1, ""}));
  const auto doc = RandomTokens(77, 64);
  testing::SaveKv(store(0), doc);
  auto d = c.Route({kNs, Cat(doc, RandomTokens(78, 8)), ""});
  ASSERT_OK(d);
  EXPECT_EQ(d->instance, "i0");
  EXPECT_EQ(d->local_tokens, 64u);

  ASSERT_EQ(kill(*pid, SIGTERM), 0);
  int wstatus = 0;
  ASSERT_EQ(waitpid(*pid, &wstatus, 0), *pid);
  EXPECT_TRUE(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0) << wstatus;
  const std::string text = testing::ReadFile(log);
  EXPECT_NE(text.find("DEBUG route: ticket " + std::to_string(d->ticket)), std::string::npos) << text;
  EXPECT_NE(text.find("shutting down"), std::string::npos) << text;
}

TEST_F(SchedServiceTest, TheBinaryRefusesBadFlags) {
  auto r = testing::RunTool(kSchedBinary, {"--policy", "fastest", "--listen", "127.0.0.1:0"});
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.err.find("unknown scheduling policy 'fastest'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("round-robin, least-load, session or prefix"), std::string::npos) << r.err;
  struct Case {
    std::vector<std::string> args;
    std::string mention;
  };
  const std::vector<Case> cases = {
      {{"--remote-path", "ib"}, "--remote-path"},
      {{"--listen", "localhost"}, "--listen"},
      {{"--listen", "127.0.0.1:99999"}, "--listen"},
      {{"--store", "nosocket"}, "NODE=SOCKET"},
      {{"--store", "0=/nonexistent/ptstored.sock", "--listen", "127.0.0.1:0"}, "--store 0="},
      {{"--model", "gpt-9", "--listen", "127.0.0.1:0"}, "gpt-9"},
      {{"--load-bound", "soon"}, "--load-bound"},
      {{"--no-such-flag"}, "no-such-flag"},
  };
  for (const Case& c : cases) {
    auto t = testing::RunTool(kSchedBinary, c.args);
    EXPECT_NE(t.rc, 0) << c.args[0];
    EXPECT_NE((t.err + t.out).find(c.mention), std::string::npos) << c.args[0] << ": " << t.err << t.out;
  }
  auto help = testing::RunTool(kSchedBinary, {"--help"});
  EXPECT_EQ(help.rc, 0);
  EXPECT_NE(help.out.find("--policy"), std::string::npos);
}

}  // namespace
}  // namespace ptstore::sched

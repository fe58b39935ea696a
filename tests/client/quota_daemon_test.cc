// Namespace quotas on a real ptstored (ptstore/quota.h): set, read and
// refused through the client, ptstore-quota and ptstore-stat (owner, root,
// another uid, bad sizes); the metrics; two tenants in one store, one
// flooding far past its quota while the other's hits stay what they were
// (and a control without the quota, where they do not); an SSD quota on a
// small SSD tier; quotas across a restart. Every load is checked byte for
// byte.
#include <grp.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "ptstore/client.h"
#include "tests/storage/kv_fixture.h"
#include "tests/testing/client.h"
#include "tests/testing/daemon.h"
#include "tests/testing/http_get.h"
#include "tests/testing/prometheus_text.h"
#include "tests/testing/run_tool.h"
#include "tests/testing/temp_dir.h"
#include "tests/testing/status_matchers.h"

namespace ptstore {
namespace {

using storage::testkv::RandomTokens;
using storage::testkv::kKiB;
using storage::testkv::kMiB;
using storage::testkv::Kv;
using storage::testkv::SmallLayout;
using storage::testkv::Tokens;
using testing::Daemon;
using testing::RunTool;
using testing::ToolRun;

const char* const kQuotaTool = PTSTORE_QUOTA_PATH;
const char* const kStatTool = PTSTORE_STAT_PATH;
constexpr uint32_t kAlice = 4101;  // a namespace owner
constexpr uint32_t kMallory = 4102;  // someone else

// Runs fn() in a child process with uid/gid `uid` (root's tests only).
int RunAs(uint32_t uid, const std::function<int()>& fn) {
  pid_t pid = fork();
  if (pid == 0) {
    if (setgroups(0, nullptr) != 0 || setgid(uid) != 0 || setuid(uid) != 0) _exit(100);
    _exit(fn());
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 200;
}

std::unique_ptr<Client> Connect(const Daemon& d) {
  auto c = testing::ConnectTo(d.socket_path());
  EXPECT_OK(c);
  return c.ok() ? std::move(*c) : nullptr;
}

// A prompt of `n` tokens of tenant `tenant`.
Tokens Prompt(int tenant, int i, size_t n = 1024) { return RandomTokens(uint64_t(tenant) * 1000000 + i, n); }

void Save(Client& c, const std::string& ns, const Tokens& t) {
  const auto kv = Kv(t, 0, t.size());
  auto r = c.Save(ns, t, kv.data(), kv.size());
  ASSERT_OK(r);
}

// Loads `t`, checks every byte loaded; the tokens loaded.
uint64_t Load(Client& c, const std::string& ns, const Tokens& t) {
  std::vector<uint8_t> out(t.size() * 256);
  auto r = c.Load(ns, t, out.data(), out.size());
  EXPECT_OK(r);
  if (!r.ok()) return 0;
  const auto want = Kv(t, 0, *r);
  EXPECT_TRUE(std::equal(want.begin(), want.end(), out.begin())) << "wrong bytes in a load of " << *r << " tokens";
  return *r;
}

NamespaceQuota QuotaOf(Client& c, const std::string& ns) {
  auto q = c.Quotas(ns);
  EXPECT_OK(q);
  return q.ok() && !q->empty() ? q->front() : NamespaceQuota{};
}

class QuotaDaemonTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> extra = {}, const std::string& arena = "64MiB") {
    Daemon::Options o;
    o.arena_size = arena;
    o.extra_args = std::move(extra);
    ASSERT_OK(daemon_.Start(o)) << daemon_.ReadLog();
    client_ = Connect(daemon_);
    ASSERT_NE(client_, nullptr);
  }
  ToolRun Quota(std::vector<std::string> args) {
    args.insert(args.begin(), {"-s", daemon_.socket_path()});
    return RunTool(kQuotaTool, args);
  }

  Daemon daemon_;
  std::unique_ptr<Client> client_;
};

TEST_F(QuotaDaemonTest, OwnerAndRootSetQuotasOthersAreRefusedBadSizesAreClearErrors) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to act as other uids";
  testing::TempDir tmp("ptstore-quota-ssd");
  Start({"--ssd-dir", tmp.path() + "/ssd", "--ssd-capacity", "64MiB", "--metrics-port", "auto"});
  // alice's namespace, made by alice.
  ASSERT_EQ(RunAs(kAlice, [&] {
              auto c = testing::ConnectTo(daemon_.socket_path());
              if (!c.ok()) return 1;
              if (!(*c)->CreateNamespace("alice", SmallLayout()).ok()) return 2;
              auto q = (*c)->SetQuota("alice", QuotaChange{4 * kMiB, {}});
              if (!q.ok()) return 3;
              return q->dram_quota == 4 * kMiB ? 0 : 4;
            }),
            0);
  // Another user may read it, not set it: the error names the namespace.
  ASSERT_EQ(RunAs(kMallory, [&] {
              auto c = testing::ConnectTo(daemon_.socket_path());
              if (!c.ok()) return 1;
              auto q = (*c)->SetQuota("alice", QuotaChange{1 * kMiB, {}});
              if (q.ok() || q.status().code() != Code::kPermissionDenied) return 2;
              if (q.status().message().find("namespace 'alice'") == std::string::npos) return 3;
              auto seen = (*c)->Quotas("alice");
              return seen.ok() && seen->front().dram_quota == 4 * kMiB ? 0 : 4;
            }),
            0);
  // The tool as that user: exit 1, and the server's reason.
  ASSERT_EQ(RunAs(kMallory, [&] {
              ToolRun r = RunTool(kQuotaTool, {"-s", daemon_.socket_path(), "alice", "--dram", "1GiB"});
              std::fputs(r.err.c_str(), stderr);
              return r.rc == 1 && r.err.find("permission_denied") != std::string::npos &&
                             r.err.find("'alice'") != std::string::npos
                         ? 0
                         : 1;
            }),
            0);
  EXPECT_EQ(QuotaOf(*client_, "alice").dram_quota, 4 * kMiB) << "a refused change changes nothing";

  // Root may; the tool shows use against quota.
  ToolRun r = Quota({"alice", "--dram", "8MiB", "--ssd", "32MiB"});
  ASSERT_EQ(r.rc, 0) << r.err;
  r = Quota({"--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["quotas"].size(), 1u);
  EXPECT_EQ(j["quotas"][0]["namespace"], "alice");
  EXPECT_EQ(j["quotas"][0]["dram"]["quota"], 8 * kMiB);
  EXPECT_EQ(j["quotas"][0]["ssd"]["quota"], 32 * kMiB);
  EXPECT_EQ(j["quotas"][0]["dram"]["used"], 0);
  r = Quota({"alice"});
  ASSERT_EQ(r.rc, 0) << r.err;
  EXPECT_NE(r.out.find("8.0 MiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("32.0 MiB"), std::string::npos) << r.out;

  // Bad sizes: exit 2, a message naming what is wrong, nothing sent.
  struct Bad {
    std::vector<std::string> args;
    std::string says;
  };
  for (const Bad& b : std::vector<Bad>{{{"alice", "--dram", "-1GiB"}, "negative"},
                                        {{"alice", "--dram", "4 parsecs"}, "unknown unit 'parsecs'"},
                                        {{"alice", "--ssd", "2EiB"}, "too large"},
                                        {{"alice", "--dram", "lots"}, "does not start with a number"},
                                        {{"--dram", "1GiB"}, "need a namespace"},
                                        {{"no such!", "--dram", "1GiB"}, "namespace"}}) {
    ToolRun bad = Quota(b.args);
    EXPECT_EQ(bad.rc, 2) << b.args.back() << ": " << bad.err;
    EXPECT_NE(bad.err.find(b.says), std::string::npos) << bad.err;
  }
  EXPECT_EQ(Quota({"nosuch", "--dram", "1GiB"}).rc, 1);
  // Past the limit through the API too (the tool never sends it).
  auto big = client_->SetQuota("alice", QuotaChange{kMaxQuotaBytes + 1, {}});
  EXPECT_ERROR(big, Code::kInvalidArgument);
  EXPECT_EQ(QuotaOf(*client_, "alice").dram_quota, 8 * kMiB);

  // Use shows up in ptstore-stat --json and in the metrics.
  for (int i = 0; i < 4; ++i) Save(*client_, "alice", Prompt(1, i));
  r = RunTool(kStatTool, {"-s", daemon_.socket_path(), "--json"});
  ASSERT_EQ(r.rc, 0) << r.err;
  j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["quotas"].size(), 1u);
  EXPECT_EQ(j["quotas"][0]["dram"]["used"], 4 * 256 * kKiB);
  EXPECT_EQ(j["quotas"][0]["dram"]["quota"], 8 * kMiB);
  r = RunTool(kStatTool, {"-s", daemon_.socket_path()});
  EXPECT_NE(r.out.find("DRAM QUOTA"), std::string::npos) << r.out;
  const uint16_t port = testing::MetricsPortFromLog(daemon_);
  ASSERT_NE(port, 0);
  auto page = testing::HttpGet(port, "/metrics");
  ASSERT_OK(page);
  auto m = testing::ParsePromText(page->body);
  ASSERT_OK(m);
  EXPECT_EQ(m->Value("ptstore_namespace_quota_bytes", {{"namespace", "alice"}, {"tier", "dram"}}), 8 * kMiB);
  EXPECT_EQ(m->Value("ptstore_namespace_quota_bytes", {{"namespace", "alice"}, {"tier", "ssd"}}), 32 * kMiB);
  EXPECT_EQ(m->Value("ptstore_namespace_used_bytes", {{"namespace", "alice"}, {"tier", "dram"}}), 1 * kMiB);
  EXPECT_EQ(m->Value("ptstore_namespace_bytes", {{"namespace", "alice"}}), 1 * kMiB);
}

// Loads every prompt of `prompts`; how many loaded whole (byte-exact).
int Hits(Client& c, const std::string& ns, const std::vector<Tokens>& prompts) {
  int hits = 0;
  for (const Tokens& t : prompts) hits += Load(c, ns, t) == t.size();
  return hits;
}

TEST_F(QuotaDaemonTest, AFloodPastItsQuotaLeavesTheOtherTenantsHitRateAsItWas) {
  Start({}, "32MiB");
  ASSERT_OK(client_->CreateNamespace("steady", SmallLayout()));
  ASSERT_OK(client_->CreateNamespace("flood", SmallLayout()));
  std::vector<Tokens> steady;
  for (int i = 0; i < 40; ++i) steady.push_back(Prompt(1, i));  // 10 MiB
  for (const Tokens& t : steady) Save(*client_, "steady", t);
  const int before = Hits(*client_, "steady", steady);
  ASSERT_EQ(before, 40);
  ASSERT_OK(client_->SetQuota("flood", QuotaChange{8 * kMiB, {}}));
  // 100 MiB into a 32 MiB arena, through an 8 MiB quota.
  for (int i = 0; i < 400; ++i) Save(*client_, "flood", Prompt(2, i));
  const NamespaceQuota f = QuotaOf(*client_, "flood");
  EXPECT_LE(f.dram_bytes, 8 * kMiB);
  EXPECT_EQ(f.dram_evictions, 400u - 32u);
  const int after = Hits(*client_, "steady", steady);
  EXPECT_EQ(after, before) << "the flood took the other tenant's data";
  EXPECT_EQ(QuotaOf(*client_, "steady").dram_evictions, 0u);
  // The flood's newest prompts are what it kept.
  int kept = 0;
  for (int i = 368; i < 400; ++i) kept += Load(*client_, "flood", Prompt(2, i)) == 1024;
  EXPECT_EQ(kept, 32);
  // Control: the same flood without the quota does take the other's data
  // (so the measurement above can fail).
  ASSERT_OK(client_->SetQuota("flood", QuotaChange{0, {}}));
  for (int i = 400; i < 1200; ++i) Save(*client_, "flood", Prompt(2, i));
  const int control = Hits(*client_, "steady", steady);
  std::printf("steady tenant hits: %d/40 before the flood, %d/40 after a flood through an 8 MiB quota, "
              "%d/40 after the same flood without one (ratio %.2f / %.2f)\n",
              before, after, control, double(after) / before, double(control) / before);
  EXPECT_LT(control, before);
}

TEST_F(QuotaDaemonTest, AnSsdQuotaOnASmallTierAndQuotasAcrossARestart) {
  testing::TempDir tmp("ptstore-quota-ssd");
  const std::vector<std::string> ssd = {"--ssd-dir", tmp.path() + "/ssd", "--ssd-capacity", "24MiB"};
  Start(ssd, "16MiB");
  ASSERT_OK(client_->CreateNamespace("small", SmallLayout()));
  ASSERT_OK(client_->CreateNamespace("other", SmallLayout()));
  for (int i = 0; i < 8; ++i) Save(*client_, "other", Prompt(3, i));
  ASSERT_OK(client_->SetQuota("small", QuotaChange{2 * kMiB, 4 * kMiB}));
  // An SSD quota needs... nothing more here; a DRAM-only node refuses it
  // (StoreQuotaTest). 60 prompts of 256 KiB: 15 MiB through 2 + 4 MiB.
  for (int i = 0; i < 60; ++i) {
    Save(*client_, "small", Prompt(4, i));
    const NamespaceQuota q = QuotaOf(*client_, "small");
    ASSERT_LE(q.dram_bytes, 2 * kMiB);
    ASSERT_LE(q.ssd_bytes, 4 * kMiB);
  }
  NamespaceQuota q = QuotaOf(*client_, "small");
  EXPECT_GT(q.ssd_bytes, 2 * kMiB) << "its evicted increments went to SSD";
  EXPECT_GT(q.ssd_evictions, 0u);
  std::vector<uint64_t> loaded;
  for (int i = 0; i < 60; ++i) loaded.push_back(Load(*client_, "small", Prompt(4, i)));
  EXPECT_LE(QuotaOf(*client_, "small").dram_bytes, 2 * kMiB) << "reads back from SSD stay inside the quota";
  for (int i = 0; i < 8; ++i) EXPECT_EQ(Load(*client_, "other", Prompt(3, i)), 1024u) << i;

  // Restart (SIGTERM writes what only DRAM holds): the quotas are back, and
  // what was stored still loads byte for byte.
  client_.reset();
  Daemon::Options o;
  o.arena_size = "16MiB";
  o.extra_args = ssd;
  ASSERT_OK(daemon_.Restart(o)) << daemon_.ReadLog();
  client_ = Connect(daemon_);
  ASSERT_NE(client_, nullptr);
  q = QuotaOf(*client_, "small");
  EXPECT_EQ(q.dram_quota, 2 * kMiB);
  EXPECT_EQ(q.ssd_quota, 4 * kMiB);
  EXPECT_LE(q.ssd_bytes, 4 * kMiB);
  EXPECT_EQ(QuotaOf(*client_, "other").dram_quota, 0u);
  uint64_t again = 0, before = 0;
  for (int i = 0; i < 60; ++i) {
    before += loaded[i] == 1024;
    again += Load(*client_, "small", Prompt(4, i)) == 1024;
  }
  EXPECT_GT(again, 0u);
  EXPECT_LE(again, before);
  EXPECT_LE(QuotaOf(*client_, "small").dram_bytes, 2 * kMiB);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(Load(*client_, "other", Prompt(3, i)), 1024u) << i;
}

}  // namespace
}  // namespace ptstore

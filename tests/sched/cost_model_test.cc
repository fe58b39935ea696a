// The cost model: fitting, parsing profiles (the shipped file included),
// load-versus-recompute plans.
#include "sched/cost_model.h"
#include "tests/testing/status_matchers.h"

#include <gtest/gtest.h>

#include <cmath>

namespace ptstore::sched {
namespace {

constexpr char kProfile[] = R"(
version = 1
[[profile]]
model = "m"
gpu = "g"
kv_bytes_per_token = 1000
source = "test"
prefill_ms = [[1000, 13.0], [2000, 26.0], [4000, 56.0], [8000, 132.0]]
decode_base_ms = 10
decode_per_kv_token_us = 0.5
[profile.paths]
dram = { bandwidth_gbps = 10.0, rtt_us = 10 }
ssd = { bandwidth_gbps = 2.0, rtt_us = 100 }
rma = { bandwidth_gbps = 5.0, rtt_us = 20 }
tcp = { bandwidth_gbps = 1.0, rtt_us = 50 }
)";

TEST(FitPrefill, RecoversAnExactQuadratic) {
  const double a = 2e-9, b = 1e-5, c = 3e-3;
  std::vector<std::pair<uint64_t, double>> pts;
  for (uint64_t n : {128, 512, 1024, 4096, 8192, 16384}) {
    pts.emplace_back(n, a * n * n + b * n + c);
  }
  double fa, fb, fc;
  ASSERT_OK(FitPrefill(pts, &fa, &fb, &fc));
  EXPECT_NEAR(fa / a, 1.0, 1e-6);
  EXPECT_NEAR(fb / b, 1.0, 1e-6);
  EXPECT_NEAR(fc / c, 1.0, 1e-6);
}

TEST(FitPrefill, NeverFitsANegativeTerm) {
  // Concave points would fit a < 0: the quadratic term is dropped instead.
  std::vector<std::pair<uint64_t, double>> pts = {{1000, 0.010}, {2000, 0.019}, {4000, 0.035}, {8000, 0.060}};
  double a, b, c;
  ASSERT_OK(FitPrefill(pts, &a, &b, &c));
  EXPECT_GE(a, 0);
  EXPECT_GE(b, 0);
  EXPECT_GE(c, 0);
}

TEST(FitPrefill, NeedsThreeDistinctLengths) {
  std::vector<std::pair<uint64_t, double>> pts = {{1000, 0.01}, {1000, 0.011}, {2000, 0.02}};
  double a, b, c;
  Status s = FitPrefill(pts, &a, &b, &c);
  EXPECT_ERROR(s, Code::kInvalidArgument);
  EXPECT_NE(s.message().find("3 or more distinct"), std::string::npos) << s.message();
}

TEST(ParseProfiles, ReadsEveryField) {
  auto r = ParseProfiles(kProfile);
  ASSERT_OK(r);
  ASSERT_EQ(r->size(), 1u);
  const Profile& p = (*r)[0];
  EXPECT_EQ(p.model, "m");
  EXPECT_EQ(p.gpu, "g");
  EXPECT_EQ(p.kv_bytes_per_token, 1000u);
  EXPECT_EQ(p.prefill_points.size(), 4u);
  EXPECT_DOUBLE_EQ(p.decode_base_s, 0.010);
  EXPECT_DOUBLE_EQ(p.decode_per_kv_token_s, 0.5e-6);
  EXPECT_DOUBLE_EQ(p.paths[size_t(LoadPath::kDram)].bandwidth_bytes_per_s, 10e9);
  EXPECT_DOUBLE_EQ(p.paths[size_t(LoadPath::kTcp)].rtt_s, 50e-6);
  // The fit goes through the points within a few percent.
  CostModel m(p);
  for (const auto& [n, t] : p.prefill_points) EXPECT_NEAR(m.PrefillSeconds(n) / t, 1.0, 0.05) << n;
}

TEST(ParseProfiles, ErrorsNameWhatIsWrong) {
  auto bad = [](std::string text, const char* want) {
    auto r = ParseProfiles(text, "p.toml");
    ASSERT_FALSE(r.ok()) << want;
    EXPECT_ERROR(r, Code::kInvalidArgument);
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().message();
  };
  std::string base = kProfile;
  bad("version = ", "p.toml:");
  bad("version = 1", "no [[profile]]");
  auto without = [&](const std::string& line) {
    std::string s = base;
    s.erase(s.find(line), line.size());
    return s;
  };
  bad(without("decode_base_ms = 10"), "decode_base_ms");
  bad(without("ssd = { bandwidth_gbps = 2.0, rtt_us = 100 }"), "`ssd` is missing");
  bad(without("kv_bytes_per_token = 1000"), "kv_bytes_per_token");
  std::string s = base;
  s.replace(s.find("[4000, 56.0]"), 12, "[4000]");
  bad(s, "prefill_ms entry");
  s = base;
  s.replace(s.find("bandwidth_gbps = 10.0"), 21, "bandwidth_gbps = 0.0");
  bad(s, "bandwidth_gbps must be > 0");
}

TEST(CostModel, LoadsTheShippedProfiles) {
  const std::string path = DefaultProfilesPath();
  auto all = LoadProfiles(path);
  ASSERT_OK(all);
  for (const char* gpu : {"a100-80g", "h100-80g", "h200"}) {
    auto m = CostModel::Load(path, "mistral-7b", gpu);
    ASSERT_OK(m);
    const Profile& p = m->profile();
    EXPECT_EQ(p.kv_bytes_per_token, 131072u) << gpu;  // Mistral-7B: 32 layers * 2 * 8 heads * 128 * 2 B
    EXPECT_FALSE(p.source.empty()) << gpu;
    // Prefill grows with n, super-linearly; 8k tokens take between 0.1 and 5 s on these GPUs.
    EXPECT_GT(m->PrefillSeconds(8192), 2 * m->PrefillSeconds(4096) * 0.99) << gpu;
    EXPECT_GT(m->PrefillSeconds(8192), 0.1) << gpu;
    EXPECT_LT(m->PrefillSeconds(8192), 5.0) << gpu;
    // Loading an 8k prefix (1 GiB) from local DRAM beats recomputing it.
    EXPECT_LT(m->LoadSeconds(8192 * p.kv_bytes_per_token, LoadPath::kDram), m->PrefillSeconds(8192)) << gpu;
  }
  auto missing = CostModel::Load(path, "mistral-7b", "tpu-v9");
  EXPECT_ERROR(missing, Code::kNotFound);
  EXPECT_NE(missing.status().message().find("h100-80g"), std::string::npos) << missing.status().message();
}

class PlanTest : public ::testing::Test {
 protected:
  PlanTest() : m_(ParseProfiles(kProfile).value()[0]) {}
  CostModel m_;
};

TEST_F(PlanTest, PrefillWithACachedPrefixSkipsItsWork) {
  const double full = m_.PrefillSeconds(8000);
  const double half = m_.PrefillSeconds(8000, 4000);
  const Profile& p = m_.profile();
  EXPECT_NEAR(full - half, p.a * 4000.0 * 4000.0 + p.b * 4000.0, 1e-12);
  EXPECT_EQ(m_.PrefillSeconds(8000, 8000), 0);
  // A remote load: the network hop into the arena, then the arena -> GPU hop.
  EXPECT_NEAR(m_.HopSeconds(5'000'000, LoadPath::kRma), 20e-6 + 1e-3, 1e-12);
  EXPECT_NEAR(m_.LoadSeconds(5'000'000, LoadPath::kRma), 20e-6 + 1e-3 + 0.5e-3, 1e-12);
  EXPECT_NEAR(m_.LoadSeconds(5'000'000, LoadPath::kDram), 10e-6 + 0.5e-3, 1e-12);
  EXPECT_EQ(m_.LoadSeconds(0, LoadPath::kTcp), 0);
  EXPECT_NEAR(m_.DecodeStepSeconds(1000), 0.010 + 0.5e-3, 1e-12);
}

TEST_F(PlanTest, LoadsWhatPaysAndRecomputesWhatDoesNot) {
  // A miss: recompute everything.
  LoadPlan miss = m_.Plan(8000, {});
  EXPECT_EQ(miss.load_tokens, 0u);
  EXPECT_DOUBLE_EQ(miss.total_s(), m_.PrefillSeconds(8000));
  // 6000 tokens in local DRAM: load them.
  std::vector<PrefixRun> local = {{6000, LoadPath::kDram}};
  LoadPlan p = m_.Plan(8000, local);
  EXPECT_EQ(p.load_tokens, 6000u);
  EXPECT_LT(p.total_s(), miss.total_s());
  // Then more over RMA: loading those too wins at these bandwidths.
  std::vector<PrefixRun> both = {{6000, LoadPath::kDram}, {7800, LoadPath::kRma}};
  EXPECT_EQ(m_.Plan(8000, both).load_tokens, 7800u);
  // A path so slow that recomputing is cheaper.
  Profile slow = m_.profile();
  slow.paths[size_t(LoadPath::kTcp)].bandwidth_bytes_per_s = 1e6;
  CostModel sm(slow);
  std::vector<PrefixRun> over_tcp = {{6000, LoadPath::kDram}, {7800, LoadPath::kTcp}};
  EXPECT_EQ(sm.Plan(8000, over_tcp).load_tokens, 6000u);
  // Runs past the prompt are clipped to it.
  std::vector<PrefixRun> long_run = {{9000, LoadPath::kDram}};
  EXPECT_EQ(m_.Plan(8000, long_run).load_tokens, 8000u);
}

TEST_F(PlanTest, TokensAlreadyOnTheGpuAreNeitherLoadedNorCharged) {
  // 7000 tokens on the GPU already (the engine's own cache); 7800 in the
  // store over TCP. Only [7000, 7800) is worth a transfer, and the baseline
  // is the prefill of what the GPU lacks.
  std::vector<PrefixRun> runs = {{7800, LoadPath::kTcp}};
  LoadPlan p = m_.Plan(8000, runs, 7000);
  EXPECT_EQ(p.load_tokens, 7800u);
  EXPECT_NEAR(p.load_s, m_.LoadSeconds(800 * m_.profile().kv_bytes_per_token, LoadPath::kTcp), 1e-12);
  EXPECT_DOUBLE_EQ(p.compute_s, m_.PrefillSeconds(8000, 7800));
  // Nothing past the GPU's prefix: nothing to load, the baseline stays.
  LoadPlan none = m_.Plan(8000, runs, 7900);
  EXPECT_EQ(none.load_tokens, 7900u);
  EXPECT_EQ(none.load_s, 0);
  EXPECT_DOUBLE_EQ(none.compute_s, m_.PrefillSeconds(8000, 7900));
  // A transfer whose latency (50 ms) costs more than computing the 800
  // tokens (~17 ms) is skipped, though loading all 7800 from scratch wins
  // against a full recompute (~126 ms saved).
  Profile slow = m_.profile();
  slow.paths[size_t(LoadPath::kTcp)].rtt_s = 0.05;
  CostModel sm(slow);
  EXPECT_EQ(sm.Plan(8000, runs, 7000).load_tokens, 7000u);
  EXPECT_EQ(sm.Plan(8000, runs, 0).load_tokens, 7800u);
}

TEST_F(PlanTest, BreakEvenIsWhereLoadingStartsToWin) {
  const uint64_t be = m_.BreakEvenTokens(8000, LoadPath::kTcp);
  ASSERT_GT(be, 1u);
  ASSERT_LE(be, 8000u);
  const uint64_t kv = m_.profile().kv_bytes_per_token;
  auto gain = [&](uint64_t p) {
    return m_.PrefillSeconds(8000) - m_.PrefillSeconds(8000, p) - m_.LoadSeconds(p * kv, LoadPath::kTcp);
  };
  EXPECT_GT(gain(be), 0);
  EXPECT_LE(gain(be - 1), 0);
  Profile never = m_.profile();
  never.paths[size_t(LoadPath::kTcp)].bandwidth_bytes_per_s = 1;
  EXPECT_EQ(CostModel(never).BreakEvenTokens(8000, LoadPath::kTcp), 8001u);
}

}  // namespace
}  // namespace ptstore::sched

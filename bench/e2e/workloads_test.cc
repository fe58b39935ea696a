#include "bench/e2e/workloads.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace ptstore::bench::e2e {
namespace {

using Tokens = std::vector<uint32_t>;

E2eWorkloadOptions Opts(WorkloadKind kind, uint32_t requests = 200) {
  E2eWorkloadOptions o;
  o.kind = kind;
  o.requests = requests;
  o.seed = 7;
  return o;
}

size_t Lcp(const Tokens& a, const Tokens& b) {
  return static_cast<size_t>(std::mismatch(a.begin(), a.end(), b.begin(), b.end()).first - a.begin());
}

bool StartsWith(const Tokens& t, const Tokens& prefix) {
  return t.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), t.begin());
}

Tokens PromptAndOutput(const E2eRequest& r) {
  Tokens t = r.tokens;
  t.insert(t.end(), r.output.begin(), r.output.end());
  return t;
}

// Requests of each group, in arrival order.
std::map<uint32_t, std::vector<const E2eRequest*>> ByGroup(const std::vector<E2eRequest>& w) {
  std::map<uint32_t, std::vector<const E2eRequest*>> g;
  for (const E2eRequest& r : w) g[r.group].push_back(&r);
  return g;
}

void ExpectIn(uint64_t v, uint64_t lo, uint64_t hi, const std::string& what) {
  EXPECT_GE(v, lo) << what;
  EXPECT_LE(v, hi) << what;
}

TEST(E2eWorkload, NamesRoundTripAndBadNamesAreRejected) {
  for (WorkloadKind k : AllWorkloads()) {
    Result<WorkloadKind> p = ParseWorkload(WorkloadName(k));
    ASSERT_TRUE(p.ok()) << WorkloadName(k);
    EXPECT_EQ(*p, k);
  }
  EXPECT_STREQ(WorkloadName(WorkloadKind::kShareGpt), "sharegpt");
  for (const char* bad : {"", "WikiQA", "wiki", "react "}) {
    Result<WorkloadKind> p = ParseWorkload(bad);
    ASSERT_FALSE(p.ok()) << bad;
    EXPECT_EQ(p.status().code(), Code::kInvalidArgument);
    const std::string& m = p.status().message();
    EXPECT_NE(m.find("'" + std::string(bad) + "'"), std::string::npos) << m;
    EXPECT_NE(m.find("wikiqa, squad, sharegpt, loogle, react"), std::string::npos) << m;
  }
}

TEST(E2eWorkload, ValidateOptions) {
  E2eWorkloadOptions o;
  EXPECT_TRUE(ValidateOptions(o).ok());
  o.rate = 0;
  EXPECT_EQ(ValidateOptions(o).code(), Code::kInvalidArgument);
  o.rate = -1;
  EXPECT_FALSE(ValidateOptions(o).ok());
  o.rate = 1.0 / 0.0;
  EXPECT_FALSE(ValidateOptions(o).ok());
  o.rate = 1;
  o.vocab = 0;
  EXPECT_FALSE(ValidateOptions(o).ok());
}

TEST(E2eWorkload, IsDeterministicAndSeeded) {
  for (WorkloadKind k : AllWorkloads()) {
    SCOPED_TRACE(WorkloadName(k));
    const E2eWorkloadOptions o = Opts(k);
    const std::vector<E2eRequest> a = MakeE2eWorkload(o), b = MakeE2eWorkload(o);
    ASSERT_EQ(a.size(), 200u);
    ASSERT_EQ(b.size(), 200u);
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_EQ(a[i].id, i);
      EXPECT_EQ(a[i].arrival_s, b[i].arrival_s);
      EXPECT_EQ(a[i].session, b[i].session);
      EXPECT_EQ(a[i].group, b[i].group);
      EXPECT_EQ(a[i].turn, b[i].turn);
      EXPECT_EQ(a[i].tokens, b[i].tokens);
      EXPECT_EQ(a[i].shared_tokens, b[i].shared_tokens);
      EXPECT_EQ(a[i].output, b[i].output);
      EXPECT_EQ(a[i].output_tokens, a[i].output.size());
    }
    E2eWorkloadOptions other = o;
    other.seed = 8;
    EXPECT_NE(MakeE2eWorkload(other)[0].tokens, a[0].tokens);
  }
}

TEST(E2eWorkload, PoissonArrivals) {
  E2eWorkloadOptions o = Opts(WorkloadKind::kSquad, 4000);
  o.rate = 5;
  const std::vector<E2eRequest> w = MakeE2eWorkload(o);
  double prev = 0;
  double sum_sq = 0;
  for (const E2eRequest& r : w) {
    ASSERT_GE(r.arrival_s, prev);
    sum_sq += (r.arrival_s - prev) * (r.arrival_s - prev);
    prev = r.arrival_s;
  }
  const double mean = w.back().arrival_s / w.size();
  EXPECT_NEAR(mean, 1 / o.rate, 0.1 / o.rate);
  // Exponential: the standard deviation equals the mean (E[x^2] = 2 mean^2).
  EXPECT_NEAR(sum_sq / w.size(), 2 * mean * mean, 0.3 * mean * mean);
  // Every kind sees the same arrival process at a given seed and rate.
  for (WorkloadKind k : AllWorkloads()) {
    E2eWorkloadOptions ok = o;
    ok.kind = k;
    ok.requests = 300;
    const std::vector<E2eRequest> wk = MakeE2eWorkload(ok);
    for (size_t i = 0; i < wk.size(); ++i) ASSERT_EQ(wk[i].arrival_s, w[i].arrival_s) << WorkloadName(k);
  }
}

// QA shapes: [system][document][question]; the document is what all the
// questions on it share.
void CheckQaShape(const E2eWorkloadOptions& o, TokenRange doc, TokenRange per_doc, TokenRange question,
                  TokenRange answer) {
  const std::vector<E2eRequest> w = MakeE2eWorkload(o);
  ASSERT_EQ(w.size(), o.requests);
  for (const auto& [g, rs] : ByGroup(w)) {
    ExpectIn(rs.size(), per_doc.lo, per_doc.hi, "questions per document");
    ASSERT_GE(rs.size(), 2u);
    size_t prefix = rs[0]->tokens.size();
    for (const E2eRequest* r : rs) prefix = std::min(prefix, Lcp(rs[0]->tokens, r->tokens));
    ExpectIn(prefix - o.system_tokens, doc.lo, doc.hi, "document");
    for (const E2eRequest* r : rs) {
      ExpectIn(r->tokens.size() - prefix, question.lo, question.hi, "question");
      ExpectIn(r->output_tokens, answer.lo, answer.hi, "answer");
      if (r->turn > 0) {
        EXPECT_EQ(r->shared_tokens, prefix);
      }
    }
  }
}

TEST(E2eWorkload, QaShapes) {
  {
    SCOPED_TRACE("wikiqa");
    CheckQaShape(Opts(WorkloadKind::kWikiQa), {1024, 8192}, {4, 8}, {16, 64}, {16, 64});
  }
  {
    SCOPED_TRACE("squad");
    CheckQaShape(Opts(WorkloadKind::kSquad), {150, 400}, {10, 20}, {8, 24}, {4, 16});
  }
  {
    SCOPED_TRACE("loogle");
    CheckQaShape(Opts(WorkloadKind::kLooGle), {8192, 16384}, {2, 6}, {16, 48}, {16, 128});
  }
}

TEST(E2eWorkload, ContextTokensOverride) {
  for (WorkloadKind k : {WorkloadKind::kWikiQa, WorkloadKind::kSquad, WorkloadKind::kLooGle}) {
    SCOPED_TRACE(WorkloadName(k));
    for (uint32_t c : {1024u, 8192u}) {
      E2eWorkloadOptions o = Opts(k, 100);
      o.context_tokens = c;
      CheckQaShape(o, {c, c}, ShapeOf(k).per_group, ShapeOf(k).message, ShapeOf(k).output);
    }
  }
  // sharegpt: a pasted document before the first user message.
  E2eWorkloadOptions o = Opts(WorkloadKind::kShareGpt, 100);
  o.context_tokens = 2048;
  for (const E2eRequest& r : MakeE2eWorkload(o)) {
    if (r.turn == 0) ExpectIn(r.tokens.size(), 64 + 2048 + 20, 64 + 2048 + 200, "first turn");
  }
  // react: the instruction prompts are exactly that long.
  o = Opts(WorkloadKind::kReAct, 100);
  o.context_tokens = 4096;
  for (const E2eRequest& r : MakeE2eWorkload(o)) {
    if (r.turn == 0) ExpectIn(r.tokens.size(), 64 + 4096 + 32, 64 + 4096 + 128, "first step");
  }
}

// sharegpt/react: turn k's prompt = turn k-1's prompt + its output + new
// message; turns arrive in order; the session is the conversation.
void CheckSessionShape(const std::vector<E2eRequest>& w, TokenRange turns, TokenRange first, TokenRange message,
                       TokenRange output, const std::string& session_prefix) {
  std::set<std::string> sessions;
  bool interleaved = false;
  for (const auto& [g, rs] : ByGroup(w)) {
    ExpectIn(rs.size(), turns.lo, turns.hi, "turns");
    EXPECT_TRUE(sessions.insert(rs[0]->session).second) << "two groups share a session";
    for (size_t k = 0; k < rs.size(); ++k) {
      const E2eRequest& r = *rs[k];
      EXPECT_EQ(r.session, session_prefix + std::to_string(g));
      EXPECT_EQ(r.turn, k);
      ExpectIn(r.output_tokens, output.lo, output.hi, "output");
      if (k == 0) {
        ExpectIn(r.tokens.size() - 64, first.lo, first.hi, "first prompt after the system prompt");
        continue;
      }
      const E2eRequest& prev = *rs[k - 1];
      EXPECT_GT(r.id, prev.id);
      EXPECT_GE(r.arrival_s, prev.arrival_s);
      interleaved |= r.id != prev.id + 1;
      const Tokens history = PromptAndOutput(prev);
      EXPECT_TRUE(StartsWith(r.tokens, history)) << "turn " << k;
      EXPECT_EQ(r.shared_tokens, history.size());
      ExpectIn(r.tokens.size() - history.size(), message.lo, message.hi, "message");
    }
  }
  EXPECT_TRUE(interleaved) << "conversations should interleave";
}

TEST(E2eWorkload, ShareGptShape) {
  const std::vector<E2eRequest> w = MakeE2eWorkload(Opts(WorkloadKind::kShareGpt));
  CheckSessionShape(w, {2, 8}, {20, 200}, {20, 200}, {50, 400}, "conv-");
}

TEST(E2eWorkload, ReActShape) {
  const std::vector<E2eRequest> w = MakeE2eWorkload(Opts(WorkloadKind::kReAct));
  // Steps: the first prompt is instructions (1-2k) + task (32-128).
  CheckSessionShape(w, {3, 10}, {1024 + 32, 2048 + 128}, {50, 300}, {20, 100}, "agent-");
  // The instruction prompt: at most 2 variants, each shared by several
  // episodes; an episode's first prompt is [system][instructions][task].
  std::map<uint32_t, std::vector<const E2eRequest*>> variants;  // by the first instruction token
  for (const E2eRequest& r : w) {
    if (r.turn == 0) variants[r.tokens[64]].push_back(&r);
  }
  ASSERT_EQ(variants.size(), 2u);
  for (const auto& [tok, rs] : variants) {
    ASSERT_GE(rs.size(), 2u);
    size_t prefix = rs[0]->tokens.size();
    for (const E2eRequest* r : rs) prefix = std::min(prefix, Lcp(rs[0]->tokens, r->tokens));
    ExpectIn(prefix - 64, 1024, 2048, "instructions");
    for (const E2eRequest* r : rs) {
      ExpectIn(r->tokens.size() - prefix, 32, 128, "task");
      // After the first episode of a variant, its first step shares the instructions.
      EXPECT_EQ(r->shared_tokens, r == rs[0] ? (r->id == 0 ? 0u : 64u) : prefix);
    }
  }
}

// The invariant every consumer relies on: the first shared_tokens tokens of a
// request were in an earlier request (prompt and output), of the same group
// unless it is the group's first request; a group's first request shares only
// the workload-wide prefix (the system prompt, for react the instructions).
TEST(E2eWorkload, SharedTokensAreATruePrefixOfAnEarlierRequest) {
  for (WorkloadKind k : AllWorkloads()) {
    for (uint32_t system : {64u, 0u}) {
      SCOPED_TRACE(std::string(WorkloadName(k)) + " system " + std::to_string(system));
      E2eWorkloadOptions o = Opts(k);
      o.system_tokens = system;
      const std::vector<E2eRequest> w = MakeE2eWorkload(o);
      EXPECT_EQ(w[0].shared_tokens, 0u);
      std::set<uint32_t> seen_groups;
      for (size_t i = 0; i < w.size(); ++i) {
        const E2eRequest& r = w[i];
        const bool first = seen_groups.insert(r.group).second;
        EXPECT_EQ(first, r.turn == 0);
        EXPECT_LT(r.shared_tokens, r.tokens.size());
        if (first) {
          // react: more (the instructions) once an earlier episode had the same variant.
          const uint32_t common = i == 0 ? 0 : system;
          if (k == WorkloadKind::kReAct) {
            EXPECT_GE(r.shared_tokens, common);
          } else {
            EXPECT_EQ(r.shared_tokens, common);
          }
        }
        if (r.shared_tokens == 0) continue;
        const Tokens prefix(r.tokens.begin(), r.tokens.begin() + r.shared_tokens);
        bool found = false;
        for (size_t j = 0; j < i && !found; ++j) {
          found = (first || w[j].group == r.group) && StartsWith(PromptAndOutput(w[j]), prefix);
        }
        EXPECT_TRUE(found) << "request " << i << " shares " << r.shared_tokens << " tokens with nothing earlier";
      }
    }
  }
}

TEST(E2eWorkload, WikiQaSessionsAreUsersNotDocuments) {
  const std::vector<E2eRequest> w = MakeE2eWorkload(Opts(WorkloadKind::kWikiQa));
  std::map<std::string, std::set<uint32_t>> docs_of_session;
  std::map<uint32_t, std::set<std::string>> sessions_of_doc;
  for (const E2eRequest& r : w) {
    docs_of_session[r.session].insert(r.group);
    sessions_of_doc[r.group].insert(r.session);
  }
  EXPECT_GT(docs_of_session.size(), 10u);
  size_t multi_doc = 0;
  for (const auto& [s, docs] : docs_of_session) multi_doc += docs.size() >= 3;
  EXPECT_GT(multi_doc, docs_of_session.size() / 2) << "most users should ask about several documents";
  size_t multi_user = 0;
  for (const auto& [d, sessions] : sessions_of_doc) multi_user += sessions.size() >= 2;
  EXPECT_GT(multi_user, sessions_of_doc.size() / 2) << "most documents should be asked about by several users";
  // Questions on different documents interleave.
  size_t switches = 0;
  for (size_t i = 1; i < w.size(); ++i) switches += w[i].group != w[i - 1].group;
  EXPECT_GT(switches, w.size() / 2);
}

TEST(E2eWorkload, GroupsOverride) {
  for (WorkloadKind k : AllWorkloads()) {
    SCOPED_TRACE(WorkloadName(k));
    E2eWorkloadOptions o = Opts(k, 100);
    o.groups = 7;
    const auto groups = ByGroup(MakeE2eWorkload(o));
    ASSERT_EQ(groups.size(), 7u);
    for (const auto& [g, rs] : groups) ExpectIn(rs.size(), 14, 15, "requests per group");
    o.groups = 500;  // more groups than requests: one request each
    EXPECT_EQ(ByGroup(MakeE2eWorkload(o)).size(), 100u);
  }
}

TEST(E2eWorkload, TokenIdsAreBelowVocab) {
  for (WorkloadKind k : AllWorkloads()) {
    E2eWorkloadOptions o = Opts(k, 50);
    o.vocab = 100;
    for (const E2eRequest& r : MakeE2eWorkload(o)) {
      for (uint32_t t : r.tokens) ASSERT_LT(t, 100u) << WorkloadName(k);
      for (uint32_t t : r.output) ASSERT_LT(t, 100u) << WorkloadName(k);
    }
  }
}

TEST(E2eWorkload, SmallAndEmptyWorkloads) {
  for (WorkloadKind k : AllWorkloads()) {
    EXPECT_TRUE(MakeE2eWorkload(Opts(k, 0)).empty());
    const std::vector<E2eRequest> one = MakeE2eWorkload(Opts(k, 1));
    ASSERT_EQ(one.size(), 1u);
    EXPECT_EQ(one[0].shared_tokens, 0u);
    EXPECT_EQ(Summarize({}).reuse_fraction, 0);
  }
}

TEST(E2eWorkload, SummarizeCountsDistinctPrefixes) {
  std::vector<E2eRequest> w(3);
  w[0].tokens = {1, 2, 3};
  w[1].tokens = {1, 2, 4};
  w[2].tokens = {1, 2, 3};
  w[2].arrival_s = 1.5;
  w[1].session = "s";
  const E2eWorkloadSummary s = Summarize(w);
  EXPECT_EQ(s.requests, 3u);
  EXPECT_EQ(s.prompt_tokens, 9u);
  EXPECT_EQ(s.unique_tokens, 4u);  // 1, 12, 123, 124
  EXPECT_EQ(s.max_prompt_tokens, 3u);
  EXPECT_EQ(s.sessions, 2u);
  EXPECT_EQ(s.groups, 1u);
  EXPECT_DOUBLE_EQ(s.reuse_fraction, 1 - 4.0 / 9);
  EXPECT_DOUBLE_EQ(s.duration_s, 1.5);

  // wikiqa: the system prompt, each document and each question, once.
  const std::vector<E2eRequest> qa = MakeE2eWorkload(Opts(WorkloadKind::kWikiQa));
  uint64_t unique = 64;
  for (const auto& [g, rs] : ByGroup(qa)) {
    unique += rs[1]->shared_tokens - 64;
    for (const E2eRequest* r : rs) unique += r->tokens.size() - rs[1]->shared_tokens;
  }
  const E2eWorkloadSummary sq = Summarize(qa);
  EXPECT_EQ(sq.unique_tokens, unique);
  EXPECT_GT(sq.reuse_fraction, 0.6);
  // sharegpt: each turn adds its message; the outputs join later prompts.
  const E2eWorkloadSummary sc = Summarize(MakeE2eWorkload(Opts(WorkloadKind::kShareGpt)));
  EXPECT_GT(sc.reuse_fraction, 0.3);
  EXPECT_LT(sc.unique_tokens, sc.prompt_tokens);
}

TEST(E2eWorkload, TwoHundredRequestsAreQuick) {
  for (WorkloadKind k : AllWorkloads()) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::vector<E2eRequest> w = MakeE2eWorkload(Opts(k));
    const E2eWorkloadSummary s = Summarize(w);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_LT(secs, 1.0) << WorkloadName(k);  // typically a few ms; generous for loaded CI machines
    EXPECT_EQ(s.requests, 200u);
  }
}

}  // namespace
}  // namespace ptstore::bench::e2e

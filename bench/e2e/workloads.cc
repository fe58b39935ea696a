#include "bench/e2e/workloads.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <set>

#include "bench/workload.h"

namespace ptstore::bench::e2e {

namespace {

// Indexed by WorkloadKind. Sources of the numbers: docs/e2e-workloads.md.
constexpr WorkloadShape kShapes[] = {
    // wikiqa: context, per_group, message, output, task, variants
    {{1024, 8192}, {4, 8}, {16, 64}, {16, 64}, {0, 0}, 0},
    // squad
    {{150, 400}, {10, 20}, {8, 24}, {4, 16}, {0, 0}, 0},
    // sharegpt: no context of its own (options.context_tokens adds one)
    {{0, 0}, {2, 8}, {20, 200}, {50, 400}, {0, 0}, 0},
    // loogle
    {{8192, 16384}, {2, 6}, {16, 48}, {16, 128}, {0, 0}, 0},
    // react: the context is the instruction prompt, shared across episodes
    {{1024, 2048}, {3, 10}, {50, 300}, {20, 100}, {32, 128}, 2},
};

constexpr const char* kNames[] = {"wikiqa", "squad", "sharegpt", "loogle", "react"};

// QA shapes: one user asks about this many questions on average, so a user's
// session spans several documents.
constexpr uint32_t kQuestionsPerUser = 6;

// A request before it has an arrival slot; shared_tokens depends on which
// request of its group arrives first, which the order decides.
struct Draft {
  std::string session;
  uint32_t group = 0;
  std::vector<uint32_t> tokens;
  std::vector<uint32_t> output;
  uint32_t group_shared = 0;   // prefix shared with any earlier request of the group
  uint32_t common_tokens = 0;  // prefix shared with other groups of the same common_key
  uint32_t common_key = 0;     // 0: the system prompt only; react: 1 + instruction variant
};

void Append(std::vector<uint32_t>& to, const std::vector<uint32_t>& from) {
  to.insert(to.end(), from.begin(), from.end());
}

uint32_t Draw(SplitMix64& rng, TokenRange r) { return static_cast<uint32_t>(rng.Range(r.lo, r.hi)); }

// n random token ids. The seed is drawn here, so a call consumes one draw.
std::vector<uint32_t> Tokens(SplitMix64& rng, uint32_t n, uint32_t vocab) {
  return RandomTokens(rng.Next(), n, vocab);
}

// Random tokens of a random length in r. Two statements: the order of the two
// draws must not depend on the compiler's argument evaluation order.
std::vector<uint32_t> Tokens(SplitMix64& rng, TokenRange r, uint32_t vocab) {
  const uint32_t n = Draw(rng, r);
  return Tokens(rng, n, vocab);
}

uint32_t ContextLength(SplitMix64& rng, const WorkloadShape& s, const E2eWorkloadOptions& o) {
  return o.context_tokens != 0 ? o.context_tokens : Draw(rng, s.context);
}

// Requests per group, summing to `requests`. With groups set, an even split.
// Otherwise draws from `per` until the requests run out; each size is in
// [per.lo, per.hi] (for per.hi >= 2 * per.lo - 1, true of every shape) except
// when requests < per.lo: a draw is capped so that what is left is either
// nothing or at least per.lo.
std::vector<uint32_t> GroupSizes(SplitMix64& rng, uint32_t requests, uint32_t groups, TokenRange per) {
  std::vector<uint32_t> sizes;
  if (groups != 0) {
    const uint32_t g = std::min(groups, requests);
    for (uint32_t i = 0; i < g; ++i) sizes.push_back(requests / g + (i < requests % g ? 1 : 0));
    return sizes;
  }
  for (uint32_t left = requests; left > 0;) {
    const uint32_t n = left <= per.hi ? left : Draw(rng, {per.lo, std::max(per.lo, std::min(per.hi, left - per.lo))});
    sizes.push_back(n);
    left -= n;
  }
  return sizes;
}

// Fisher-Yates with our own generator: the same order on every platform.
template <typename T>
void Shuffle(std::vector<T>& v, SplitMix64& rng) {
  for (size_t i = v.size(); i > 1; --i) std::swap(v[i - 1], v[rng.Range(0, i - 1)]);
}

// QA shapes: per document, its questions; then all questions shuffled. Each
// request goes to a random user, so users and documents cross.
std::vector<Draft> MakeQa(const E2eWorkloadOptions& o, const std::vector<uint32_t>& system, SplitMix64& rng) {
  const WorkloadShape& s = ShapeOf(o.kind);
  const std::vector<uint32_t> sizes = GroupSizes(rng, o.requests, o.groups, s.per_group);
  const uint32_t users = std::max(1u, o.requests / kQuestionsPerUser);
  std::vector<Draft> drafts;
  drafts.reserve(o.requests);
  for (uint32_t g = 0; g < sizes.size(); ++g) {
    std::vector<uint32_t> prefix = system;
    Append(prefix, Tokens(rng, ContextLength(rng, s, o), o.vocab));
    for (uint32_t q = 0; q < sizes[g]; ++q) {
      Draft d;
      d.group = g;
      d.session = "user-" + std::to_string(rng.Range(0, users - 1));
      d.tokens = prefix;
      Append(d.tokens, Tokens(rng, s.message, o.vocab));
      d.output = Tokens(rng, s.output, o.vocab);
      d.group_shared = static_cast<uint32_t>(prefix.size());
      d.common_tokens = static_cast<uint32_t>(system.size());
      drafts.push_back(std::move(d));
    }
  }
  Shuffle(drafts, rng);
  return drafts;
}

// The turns of one conversation/episode, in order. `history` starts as the
// prefix every turn has (system prompt and context); turn k's prompt is the
// history plus a new message (the first message, then shape.message), and
// its output joins the history, so turn k+1 shares all of turn k and its
// output.
void AppendTurns(const E2eWorkloadOptions& o, uint32_t group, uint32_t turns, std::vector<uint32_t> history,
                 std::vector<uint32_t> first_message, SplitMix64& rng, Draft common, std::vector<Draft>& out) {
  const WorkloadShape& s = ShapeOf(o.kind);
  for (uint32_t k = 0; k < turns; ++k) {
    Draft d = common;
    d.group = group;
    d.group_shared = static_cast<uint32_t>(history.size());
    Append(history, k == 0 ? first_message : Tokens(rng, s.message, o.vocab));
    d.tokens = history;
    d.output = Tokens(rng, s.output, o.vocab);
    Append(history, d.output);
    out.push_back(std::move(d));
  }
}

// sharegpt/react, in group order (each group's turns contiguous, in order).
std::vector<Draft> MakeSessions(const E2eWorkloadOptions& o, const std::vector<uint32_t>& system,
                                const std::vector<uint32_t>& sizes, SplitMix64& rng) {
  const WorkloadShape& s = ShapeOf(o.kind);
  const bool react = o.kind == WorkloadKind::kReAct;
  // react: the instruction prompts every episode starts with (after the system prompt).
  std::vector<std::vector<uint32_t>> variants;
  for (uint32_t v = 0; v < s.context_variants; ++v) {
    variants.push_back(system);
    Append(variants.back(), Tokens(rng, ContextLength(rng, s, o), o.vocab));
  }
  std::vector<Draft> drafts;
  drafts.reserve(o.requests);
  for (uint32_t g = 0; g < sizes.size(); ++g) {
    Draft common;
    common.session = (react ? "agent-" : "conv-") + std::to_string(g);
    std::vector<uint32_t> history = system;
    if (react) {
      const auto v = static_cast<uint32_t>(rng.Range(0, variants.size() - 1));
      history = variants[v];
      common.common_key = v + 1;
    } else if (o.context_tokens != 0) {
      Append(history, Tokens(rng, o.context_tokens, o.vocab));  // a document pasted into the chat
    }
    common.common_tokens = react ? static_cast<uint32_t>(history.size()) : static_cast<uint32_t>(system.size());
    std::vector<uint32_t> first = Tokens(rng, react ? s.task : s.message, o.vocab);
    AppendTurns(o, g, sizes[g], std::move(history), std::move(first), rng, std::move(common), drafts);
  }
  return drafts;
}

// Arrival order of session turns, as indices into the group-ordered drafts:
// `active` groups in progress at once (0: all); each slot takes the next turn
// of a random one of them, and a finished group is replaced by the next one.
std::vector<size_t> InterleaveSessions(const std::vector<uint32_t>& sizes, uint32_t active, SplitMix64& rng) {
  std::vector<size_t> start(sizes.size(), 0);
  for (size_t g = 1; g < sizes.size(); ++g) start[g] = start[g - 1] + sizes[g - 1];
  const size_t cap = active == 0 ? sizes.size() : active;
  std::vector<uint32_t> live, next(sizes.size(), 0);
  uint32_t waiting = 0;
  auto refill = [&] {
    while (live.size() < cap && waiting < sizes.size()) live.push_back(waiting++);
  };
  std::vector<size_t> order;
  for (refill(); !live.empty();) {
    const size_t i = rng.Range(0, live.size() - 1);
    const uint32_t g = live[i];
    order.push_back(start[g] + next[g]++);
    if (next[g] == sizes[g]) {
      live.erase(live.begin() + static_cast<ptrdiff_t>(i));  // keeps the start order of the others
      refill();
    }
  }
  return order;
}

// Exponential gap of a Poisson process at `rate`; u in (0, 1) so log(u) is finite.
double ExpGap(SplitMix64& rng, double rate) {
  const double u = (static_cast<double>(rng.Next() >> 11) + 0.5) * 0x1.0p-53;
  return -std::log(u) / rate;
}

// Arrival times, ids, turns and shared_tokens of drafts in arrival order.
std::vector<E2eRequest> Finalize(std::vector<Draft> drafts, const E2eWorkloadOptions& o, SplitMix64& arrivals) {
  std::vector<E2eRequest> w(drafts.size());
  std::vector<uint32_t> turns;             // per group: requests seen so far
  std::set<uint32_t> common_seen;          // common_keys of earlier requests
  double t = 0;
  for (size_t i = 0; i < drafts.size(); ++i) {
    Draft& d = drafts[i];
    E2eRequest& r = w[i];
    t += ExpGap(arrivals, o.rate);
    r.id = i;
    r.arrival_s = t;
    r.session = std::move(d.session);
    r.group = d.group;
    if (turns.size() <= d.group) turns.resize(d.group + 1, 0);
    r.turn = turns[d.group]++;
    if (r.turn > 0) {
      r.shared_tokens = d.group_shared;
    } else if (common_seen.count(d.common_key) != 0) {
      r.shared_tokens = d.common_tokens;
    } else {
      r.shared_tokens = i > 0 ? o.system_tokens : 0;  // every earlier request has the system prompt
    }
    common_seen.insert(d.common_key);
    r.tokens = std::move(d.tokens);
    r.output = std::move(d.output);
    r.output_tokens = static_cast<uint32_t>(r.output.size());
  }
  return w;
}

size_t CommonPrefix(const std::vector<uint32_t>& a, const std::vector<uint32_t>& b) {
  const auto [ia, ib] = std::mismatch(a.begin(), a.end(), b.begin(), b.end());
  return static_cast<size_t>(ia - a.begin());
}

}  // namespace

const char* WorkloadName(WorkloadKind k) { return kNames[static_cast<size_t>(k)]; }

std::vector<WorkloadKind> AllWorkloads() {
  return {WorkloadKind::kWikiQa, WorkloadKind::kSquad, WorkloadKind::kShareGpt, WorkloadKind::kLooGle,
          WorkloadKind::kReAct};
}

Result<WorkloadKind> ParseWorkload(std::string_view name) {
  std::string valid;
  for (WorkloadKind k : AllWorkloads()) {
    if (name == WorkloadName(k)) return k;
    valid += valid.empty() ? "" : ", ";
    valid += WorkloadName(k);
  }
  return InvalidArgument("unknown workload '" + std::string(name) + "' (valid: " + valid + ")");
}

const WorkloadShape& ShapeOf(WorkloadKind k) { return kShapes[static_cast<size_t>(k)]; }

Status ValidateOptions(const E2eWorkloadOptions& o) {
  if (o.vocab == 0) return InvalidArgument("workload vocab must be at least 1");
  if (!(o.rate > 0) || !std::isfinite(o.rate)) {
    return InvalidArgument("workload rate must be a positive number of requests per second, not " +
                           std::to_string(o.rate));
  }
  return Status::OK();
}

std::vector<E2eRequest> MakeE2eWorkload(const E2eWorkloadOptions& o) {
  // Independent streams: the arrival times depend only on (seed, rate,
  // requests), so every kind sees the same arrival process.
  SplitMix64 master(o.seed);
  const std::vector<uint32_t> system = Tokens(master, o.system_tokens, o.vocab);
  SplitMix64 shape(master.Next());
  SplitMix64 order(master.Next());
  SplitMix64 arrivals(master.Next());
  if (o.kind != WorkloadKind::kShareGpt && o.kind != WorkloadKind::kReAct) {
    return Finalize(MakeQa(o, system, shape), o, arrivals);
  }
  const std::vector<uint32_t> sizes = GroupSizes(shape, o.requests, o.groups, ShapeOf(o.kind).per_group);
  std::vector<Draft> by_group = MakeSessions(o, system, sizes, shape);
  std::vector<Draft> drafts;
  drafts.reserve(by_group.size());
  for (size_t i : InterleaveSessions(sizes, o.active_sessions, order)) drafts.push_back(std::move(by_group[i]));
  return Finalize(std::move(drafts), o, arrivals);
}

E2eWorkloadSummary Summarize(const std::vector<E2eRequest>& w) {
  E2eWorkloadSummary s;
  std::set<uint32_t> groups;
  std::set<std::string> sessions;
  for (const E2eRequest& r : w) {
    s.prompt_tokens += r.tokens.size();
    s.output_tokens += r.output_tokens;
    s.max_prompt_tokens = std::max<uint64_t>(s.max_prompt_tokens, r.tokens.size());
    s.duration_s = std::max(s.duration_s, r.arrival_s);
    groups.insert(r.group);
    sessions.insert(r.session);
  }
  s.requests = w.size();
  s.groups = groups.size();
  s.sessions = sessions.size();
  // The distinct prefixes of a set of sequences are the nodes of their trie:
  // sorted, each sequence adds its length minus what it shares with the one
  // before it.
  std::vector<const std::vector<uint32_t>*> sorted;
  for (const E2eRequest& r : w) sorted.push_back(&r.tokens);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return *a < *b; });
  for (size_t i = 0; i < sorted.size(); ++i) {
    s.unique_tokens += sorted[i]->size() - (i > 0 ? CommonPrefix(*sorted[i], *sorted[i - 1]) : 0);
  }
  s.reuse_fraction = s.prompt_tokens == 0 ? 0 : 1.0 - static_cast<double>(s.unique_tokens) / s.prompt_tokens;
  return s;
}

}  // namespace ptstore::bench::e2e

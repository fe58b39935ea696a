// Request streams of the end-to-end serving simulation (bench/e2e), shaped
// like the data sets of the KV-cache serving papers. The real data sets are
// not downloaded: each shape draws synthetic token ids whose lengths, reuse
// structure and arrival order follow the published statistics, approximately
// (docs/e2e-workloads.md lists the sources and where the shapes depart from
// them). What matters for a KV cache is which prefixes repeat, how long they
// are and how their reuse interleaves; the token ids themselves are noise.
//
//   wikiqa    long-document QA. Documents of 1k-8k tokens (uniform), 4-8
//             questions each (16-64 tokens), answers of 16-64 tokens.
//   squad     short-passage QA (SQuAD-like). Passages of 150-400 tokens,
//             10-20 questions each (8-24 tokens), answers of 4-16 tokens.
//   loogle    very long documents (LooGLE long-dependency QA). Documents of
//             8k-16k tokens (LooGLE's run past 20k words; capped to fit a 32k
//             context), 2-6 questions (16-48 tokens), answers of 16-128.
//   sharegpt  multi-turn chat (ShareGPT). Conversations of 2-8 turns; a user
//             message is 20-200 tokens, a reply (output) 50-400. The prompt
//             of turn k is the whole conversation so far: the prompt and the
//             reply of turn k-1, then the new user message.
//   react     agent loops (ReAct). A tool/instruction prompt of 1k-2k tokens
//             shared by ALL episodes (2 variants), a task of 32-128 tokens,
//             then 3-10 steps; step k's prompt is the previous step's prompt
//             plus its thought/action (output, 20-100 tokens) plus the tool's
//             observation (50-300 tokens).
//
// Every prompt is [system prompt (system_tokens, shared by all requests)]
// [the group's context][...], where the group is what a prefix cache can
// reuse: a document (QA shapes), a conversation (sharegpt) or an episode
// (react). The session is who sends the request, which is what session-
// affinity routing sees:
//   - QA shapes: a session is a user who asks about random documents, so one
//     session spans several documents and one document several sessions
//     (session affinity is NOT document locality);
//   - sharegpt/react: the session is the conversation/episode (= group).
//
// shared_tokens: how many tokens at the start of a prompt some earlier
// request (in arrival order) already had, by construction. The later requests
// of a group share with an earlier request of the same group: the system
// prompt and the document (QA), or the previous turn's prompt plus its output
// (sharegpt/react: E2eRequest::output holds the decoded ids, and they appear
// verbatim in the next turn's prompt). The first request of a group (in
// arrival order) shares only the workload-wide prefix: the system prompt (for
// react: plus the instruction variant, once an earlier episode used it), or
// 0 when no earlier request has it (the very first request; system_tokens 0).
//
// Arrivals: a Poisson process at `rate` (exponential gaps), the same times
// for every kind at a given seed and rate. QA requests are shuffled uniformly
// (questions on different documents interleave). Turns of a conversation/
// episode keep their order: `active_sessions` of them are in progress at
// once, each arrival slot goes to the next turn of a random one of them, and
// a finished one is replaced by the next not yet started; the think time
// between turns is then about active_sessions / rate.
//
// Determinism: everything is a pure function of the options (seed included),
// drawn with SplitMix64, the same on every platform.
// Thread safety: values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::bench::e2e {

enum class WorkloadKind : uint8_t { kWikiQa, kSquad, kShareGpt, kLooGle, kReAct };

// "wikiqa", "squad", "sharegpt", "loogle", "react".
const char* WorkloadName(WorkloadKind k);
// The inverse of WorkloadName; InvalidArgument naming the bad value and the
// valid ones.
Result<WorkloadKind> ParseWorkload(std::string_view name);
// All kinds, in enum order (for sweeps and tests).
std::vector<WorkloadKind> AllWorkloads();

// Inclusive range of token counts (or of requests per group).
struct TokenRange {
  uint32_t lo = 0;
  uint32_t hi = 0;
};

// The numbers of a shape (the table in the header comment).
struct WorkloadShape {
  TokenRange context;    // document (QA), instruction prompt (react); sharegpt: {0, 0}
  TokenRange per_group;  // questions per document, turns per conversation, steps per episode
  TokenRange message;    // question, user message, observation: the new tokens of a request
  TokenRange output;     // answer, reply, thought/action
  TokenRange task;       // react: the episode's task, before step 1; others {0, 0}
  uint32_t context_variants = 0;  // react: instruction prompts shared across episodes; others 0
};
const WorkloadShape& ShapeOf(WorkloadKind k);

struct E2eRequest {
  uint64_t id = 0;               // index in arrival order
  double arrival_s = 0;          // Poisson arrival time, seconds from start (non-decreasing)
  std::string session;           // the user/conversation/agent this request belongs to
  uint32_t group = 0;            // the shared context: document / conversation / agent episode
  uint32_t turn = 0;             // index of the request within its group, in arrival order
  std::vector<uint32_t> tokens;  // the whole prompt
  uint32_t shared_tokens = 0;    // prefix an earlier request already had (header comment)
  uint32_t output_tokens = 0;    // tokens to decode
  std::vector<uint32_t> output;  // their ids (output_tokens of them): sharegpt/react reuse them
};

struct E2eWorkloadOptions {
  WorkloadKind kind = WorkloadKind::kWikiQa;
  uint32_t requests = 200;      // total requests
  double rate = 2.0;            // mean arrivals per second (Poisson: exponential gaps)
  // 0: the shape's own distribution; else every document/context is exactly
  // this long (the sequence-length sweep 1k/2k/4k/8k). sharegpt: the first
  // user message of each conversation is preceded by a pasted document of
  // this length; react: the instruction prompts are this long.
  uint32_t context_tokens = 0;
  // 0: as many documents/conversations/episodes as the shape's per_group
  // draws need to make `requests`; else exactly min(groups, requests) of
  // them, the requests split evenly (per_group is then ignored).
  uint32_t groups = 0;
  uint32_t system_tokens = 64;  // a system prompt shared by all requests (0: none)
  uint32_t vocab = 32000;
  uint64_t seed = 1;
  // sharegpt/react: conversations/episodes in progress at once (0: all of
  // them from the start).
  uint32_t active_sessions = 16;
};

// OK, or InvalidArgument for vocab 0 or a rate that is not a positive finite
// number (for command lines; MakeE2eWorkload REQUIRES it OK).
Status ValidateOptions(const E2eWorkloadOptions& o);

// Requests in arrival order. REQUIRES: ValidateOptions(o).ok().
std::vector<E2eRequest> MakeE2eWorkload(const E2eWorkloadOptions& o);

struct E2eWorkloadSummary {
  uint64_t requests = 0;
  uint64_t groups = 0;             // distinct groups
  uint64_t sessions = 0;           // distinct sessions
  uint64_t prompt_tokens = 0;      // sum of prompt lengths
  uint64_t unique_tokens = 0;      // tokens of distinct prefixes: what a perfect cache must store
  uint64_t max_prompt_tokens = 0;
  uint64_t output_tokens = 0;      // sum of output_tokens
  double reuse_fraction = 0;       // 1 - unique / prompt (0 for an empty workload)
  double duration_s = 0;           // arrival time of the last request
};
E2eWorkloadSummary Summarize(const std::vector<E2eRequest>& w);

}  // namespace ptstore::bench::e2e

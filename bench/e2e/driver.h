// The end-to-end driver (docs/e2e.md): N real ptstored nodes, one simulated
// GPU serving instance per node, a workload of requests with Poisson
// arrivals routed by the global scheduler, and real KV bytes saved and
// loaded through PTStore.
//
// Time is virtual and comes from the cost model (sched/cost_model.h) of one
// model on one GPU; the store's work is real. The driver replays arrivals
// in time order. For each request:
//   route     Scheduler::Route (the prefix policy asks the store's index)
//   plan      where the prompt's prefix is from the instance's node
//             (Client::LocatePrefix) and the cost model's load-or-recompute
//             plan (LoadAdvisor's PlanFor)
//   load      Client::Load of the planned prefix on the instance's node:
//             real bytes, checked byte-exactly; what arrived from other
//             nodes is read from the node's counters (remote_fetch_bytes)
//   time      prefill starts when the instance's previous prefill is done;
//             the local part of the load takes rtt + bytes / bandwidth of
//             host DRAM -> GPU, each remote run the same over the network
//             AND queues behind other loads served by the same owner's NIC
//             (a hot prefix fetched by many nodes at once waits: what local
//             replicas remove); then the prefill of the tokens not loaded
//   decode    output tokens at the TPOT of the instance's decode batch then
//   save      at the end of the prefill (virtual time), the prompt's KV is
//             saved on the instance's node (the store keeps what is new)
// KV bytes are scaled down (--real-bytes-per-token; the cost model keeps
// the model's real size for time), so a 2-core machine can move them.
//
// Modes:
//   no-reuse        vLLM without prefix caching: every prompt recomputed
//   local           node-local reuse (vLLM prefix caching): each node an
//                   independent store, an instance sees only its own node
//   no-replication  distributed store without local replicas (EvoStore-like):
//                   one cluster, replicate_after = 0 (remote every time)
//   ptstore         one cluster, hot remote prefixes kept as local replicas
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/e2e/workloads.h"
#include "ptstore/status.h"
#include "sched/scheduler.h"

namespace ptstore::bench::e2e {

enum class Mode : uint8_t { kNoReuse = 0, kLocal = 1, kNoReplication = 2, kPtstore = 3 };
const char* ModeName(Mode m);  // "no-reuse", "local", "no-replication", "ptstore"
Result<Mode> ParseMode(std::string_view name);

struct E2eOptions {
  E2eWorkloadOptions workload;
  Mode mode = Mode::kPtstore;
  sched::Policy policy = sched::Policy::kLeastLoad;
  uint32_t nodes = 4;
  std::string profiles;                  // empty: sched::DefaultProfilesPath()
  std::string model = "mistral-7b";
  std::string gpu = "a100-80g";
  sched::LoadPath remote_path = sched::LoadPath::kRma;
  double load_bound_s = -1;              // the prefix policy's load bound (< 0: automatic)
  uint32_t replicate_after = 2;          // ptstore mode
  uint64_t real_bytes_per_token = 512;   // bytes the store really moves per token
  std::string arena_size = "512MiB";     // per node
  std::string data_path = "tcp";         // between the nodes: tcp or rma
  bool verify = true;                    // check every loaded byte
  bool save_generated = false;           // a finished request also saves its output's KV (prompt + output
                                         // but the last token: the vLLM connector's save_generated)
  std::string experiment;                // a label for the JSON
};

struct Metric {
  double mean = 0, p50 = 0, p99 = 0;
};

struct E2eResult {
  E2eOptions options;
  uint64_t requests = 0;
  Metric ttft, jct, tpot;                // seconds (virtual)
  // TTFT of the requests that are not the first of their group (document,
  // conversation, episode): the ones any reuse can serve, whatever the mode.
  Metric ttft_warm;
  double duration_s = 0;                 // first arrival to last completion (virtual)
  double throughput_rps = 0;
  uint64_t prompt_tokens = 0;
  uint64_t loaded_tokens = 0;            // loaded from the store
  uint64_t recomputed_tokens = 0;
  uint64_t cluster_tokens = 0;           // available anywhere when routed (index)
  uint64_t hits_dram = 0, hits_remote = 0, hits_ssd = 0, misses = 0;  // requests by tier
  uint64_t loaded_local_bytes = 0;       // real bytes, this node's store
  uint64_t loaded_remote_bytes = 0;      // real bytes fetched from other nodes
  uint64_t saved_bytes = 0;              // real bytes the stores kept
  uint64_t model_loaded_bytes = 0;       // at the model's KV size
  uint64_t verified_bytes = 0;
  double wall_seconds = 0;               // real time the run took
  double token_hit_rate() const { return prompt_tokens ? double(loaded_tokens) / double(prompt_tokens) : 0; }
};

// Starts the nodes, replays the workload, stops the nodes. Fails on a wrong
// byte (Corruption) or a store error; misses are counted, never errors.
Result<E2eResult> RunE2e(const E2eOptions& options);

// One run as the JSON that bench/e2e/plot.py reads.
nlohmann::json ToJson(const E2eResult& r);

}  // namespace ptstore::bench::e2e

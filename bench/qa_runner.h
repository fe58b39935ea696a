// Runs a QaWorkload against a ptstored the way an inference engine would,
// and checks every byte it gets back. Shared by ptstore-demo and bench_dedup.
//
// For each request, in arrival order:
//   lookup   Client::Lookup of the prompt (matched tokens, no pin)
//   load     Client::Load of the stored prefix into a host buffer
//   verify   the loaded bytes against the KV generator (byte-exact)
//   compute  "prefill": generate the KV of the tokens past the loaded prefix
//   save     Client::Save of the whole prompt (the server keeps only what is new)
// then, optionally, a final check reloads every prompt and verifies it.
//
// Beside the measurements, the run keeps an oracle: a set of the chain keys of
// every block saved so far. With no eviction, the store must serve exactly
// the oracle's longest match and store exactly its unique blocks; a
// difference is reported as an error (the store lost or duplicated data).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench_util.h"
#include "bench/workload.h"
#include "ptstore/client.h"

namespace ptstore::bench {

struct QaRunOptions {
  std::string ns;            // namespace, created if missing (must be empty)
  Layout layout;
  bool verify = true;        // check every loaded byte
  bool final_check = true;   // reload and check every prompt at the end
  // Test hook: flip one byte of the first loaded prefix before it is checked,
  // to prove that a wrong byte fails the run.
  bool inject_corruption = false;
};

struct QaRequestRecord {
  uint32_t doc = 0, question = 0;
  uint64_t tokens = 0;          // prompt length
  uint64_t lookup_tokens = 0;   // matched by Lookup
  uint64_t loaded_tokens = 0;   // filled by Load
  uint64_t expected_tokens = 0; // the oracle's match
  uint64_t stored_tokens = 0;   // added by Save
  bool save_refused = false;    // the arena had no room (ResourceExhausted): not cached
  double load_seconds = 0, save_seconds = 0;
};

struct QaRunReport {
  bool mapped = false;               // loads copied straight from the mapped arena
  uint64_t bytes_per_token = 0;
  uint64_t requests = 0;
  uint64_t prompt_tokens = 0;        // tokens requested (sum of prompt lengths)
  uint64_t block_tokens = 0;         // of which in whole blocks (the most a store can serve)
  uint64_t lookup_tokens = 0;
  uint64_t served_tokens = 0;        // tokens loaded from the store
  uint64_t expected_served_tokens = 0;
  uint64_t hit_requests = 0;         // served at least one block
  uint64_t doc_hit_requests = 0;     // served more than the system prompt
  uint64_t stored_tokens = 0;        // added by saves
  uint64_t refused_saves = 0;        // saves the server had no room for
  uint64_t expected_stored_tokens = 0;
  uint64_t stored_bytes = 0;         // SaveResult::new_bytes summed
  uint64_t namespace_bytes = 0;      // the server's count for the namespace at the end
  uint64_t whole_bytes = 0;          // bytes if every request were stored whole
  uint64_t verified_bytes = 0;
  uint64_t final_checked_tokens = 0;
  PhaseTimer lookup, load, verify, compute, save, final_check;
  double wall_seconds = 0;
  StoreStats stats_before, stats_after;
  std::vector<QaRequestRecord> records;

  uint64_t evictions() const { return stats_after.evictions - stats_before.evictions; }
  double token_hit_rate() const { return prompt_tokens ? double(served_tokens) / double(prompt_tokens) : 0; }
  double request_hit_rate() const { return requests ? double(hit_requests) / double(requests) : 0; }
  double dedup_ratio() const { return stored_bytes ? double(whole_bytes) / double(stored_bytes) : 0; }
};

// Runs the workload. Fails with Corruption on any wrong byte, Internal when
// the store served or stored other than the oracle says (checked only when
// nothing was evicted or refused), and with the client's Status on any
// request that fails. A save refused for lack of room (ResourceExhausted) is
// what a cache may do: it is counted, not fatal.
Result<QaRunReport> RunQa(Client& client, const QaWorkload& workload, const QaRunOptions& options);

// The report as JSON (workload options included).
nlohmann::json ToJson(const QaRunReport& r, const QaWorkloadOptions& w);

}  // namespace ptstore::bench

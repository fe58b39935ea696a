// The soak: a real cluster of ptstored processes under a random mix of
// client operations while nodes are killed (SIGKILL), stopped (SIGTERM),
// frozen (SIGSTOP, then SIGCONT), restarted, and have their SSD segment files
// damaged, checking what the store promises:
//
//   - every byte a load or a pin returns is the KV of its prompt's prefix
//     (tests/storage/kv_fixture.h: a wrong branch or offset never matches);
//   - a node dying costs a miss, never an error to a client of another node
//     (errors are allowed only from the node that died under the call, and
//     ResourceExhausted when an arena is full of pinned data);
//   - no call hangs past a deadline; no node dies unless the soak killed it;
//     a node with damaged segment files starts again;
//   - after the faults stop, every node loads what any node saves, byte
//     exact (after a miss, once it saved the prompt itself: the misses are
//     reported); no pin or lease is left behind; every node stops cleanly on
//     SIGTERM; the SSD directories hold no more corrupt records than the
//     soak damaged or torn by SIGKILL.
//
// RunSoak returns a report; a violation is a broken promise (with what was
// seen). tests/soak/soak_test.cc runs a small configuration in the suite;
// ptstore_soak (scripts/soak) runs a long one. docs/soak.md.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::soak {

struct SoakOptions {
  uint32_t nodes = 3;
  double seconds = 20;        // of operations under faults
  uint32_t clients = 4;       // worker threads, each with a client of every node
  std::string data_path = "tcp";  // or "rma"
  std::string arena_size = "4MiB";  // small: evictions, spills and SSD fills all the time
  bool ssd = true;                  // every node with an SSD tier (odd nodes compress)
  std::string ssd_capacity = "24MiB";
  uint32_t replicate_after = 1;
  uint32_t docs = 48;               // documents; prompts are questions and follow-ups on them
  uint64_t seed = 1;
  // Faults: one every fault_every_ms on average (0: none), a node staying
  // down down_ms on average; at most max_down nodes down at once.
  int fault_every_ms = 1500;
  int down_ms = 500;
  uint32_t max_down = 1;
  // The calls go on past `seconds` until this many faults have been made
  // (for at most 4 x seconds more): on a loaded machine restarts are slow,
  // and a short soak must still see its faults.
  uint32_t min_faults = 0;
  bool corrupt = true;              // some faults damage a stopped node's segment files
  int op_deadline_ms = 20000;       // a call running longer is a violation (a hang)
  bool mount = true;                // a file-system worker on a PTStore mount of node 0 (needs /dev/fuse)
  std::string node_log_level;       // ptstored --log-level (e.g. debug); empty: its default
  std::string work_dir;             // SSD directories and node logs; empty: a temporary one
  bool keep_work_dir = false;       // kept anyway when there are violations
  std::function<void(const std::string&)> progress;  // a line every few seconds; null: quiet
};

struct SoakReport {
  double seconds = 0;
  std::map<std::string, uint64_t> ops;          // calls made, by operation
  uint64_t loads_verified = 0;                  // loads and pins whose bytes were checked
  uint64_t hits = 0;                            // of those, ones that returned tokens
  uint64_t tokens_verified = 0;
  uint64_t bytes_verified = 0;
  std::map<std::string, uint64_t> allowed_errors;  // "op code" from a node that died under the call
  uint64_t refused = 0;                         // ResourceExhausted (arena full of pinned data)
  uint64_t skipped_down = 0;                    // operations not made: their node was down
  std::map<std::string, uint64_t> faults;       // kill, term, pause, resume, corrupt, restart
  uint64_t bytes_damaged = 0;                   // bytes flipped in segment files
  uint64_t max_op_ms = 0;
  std::string slowest_op;                        // what that call was
  std::map<std::string, uint64_t> max_ms_by_op;  // the slowest call of each operation
  uint64_t final_prompts_checked = 0;           // (prompt, node) pairs of the final check
  // Final-check loads that missed part of a prompt another node had saved
  // (then that node saved it itself, and it loaded): a miss is allowed, but
  // each is said (docs/soak.md, "What it found").
  std::vector<std::string> final_misses;
  uint64_t fsck_corrupt_records = 0;            // found in the SSD directories at the end
  std::string mount_skipped;                    // why there was no file-system worker ("": there was)
  std::vector<std::string> violations;
  std::string work_dir;                         // where the logs are (when kept)

  bool ok() const { return violations.empty(); }
  std::string Summary() const;  // a few lines for people
  std::string Json() const;     // one JSON object
};

// Runs the soak. An error only when it could not start (no cluster); broken
// promises are the report's violations.
Result<SoakReport> RunSoak(const SoakOptions& options);

}  // namespace ptstore::soak

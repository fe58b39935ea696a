// The cost model: loading a cached prefix versus recomputing it (DESIGN.md
// §6, docs/scheduler.md).
//
//   load_time(bytes, path)  = rtt(path) + bytes / bandwidth(path)
//   prefill(n, cached = p)  = a·(n² − p²) + b·(n − p) + c
//   decode step (TPOT)      = decode_base + decode_per_kv_token · KV tokens in the batch
//
// a, b, c are fitted by least squares to a profile's measured (or derived)
// prefill points, per model and GPU; profiles live in a TOML file
// (sched/profiles.toml ships Mistral-7B on A100, H100 and H200 with their
// sources). With p tokens cached, attention still reads them (the n² − p²
// term: each new token attends to all n), but their own projections and MLP
// are skipped (b·(n − p)); c is the launch overhead, paid once.
//
// Plan() answers the question a client or the connector asks before a load:
// given which runs of the prompt's prefix are where (this node's DRAM, its
// SSD, another node over RMA or TCP), how much should be loaded? It tries
// every run boundary (loading nothing included) and keeps the cheapest
// total, so a short prefix whose transfer costs more than its compute is
// recomputed.
//
// Thread safety: a CostModel is an immutable value.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "ptstore/status.h"

namespace ptstore::sched {

// Where a prefix's bytes come from, as seen by the loading instance.
enum class LoadPath : uint8_t { kDram = 0, kSsd = 1, kRma = 2, kTcp = 3 };
inline constexpr size_t kLoadPaths = 4;
const char* LoadPathName(LoadPath p);  // "dram", "ssd", "rma", "tcp"
// The path named `name`; InvalidArgument naming the valid ones.
Result<LoadPath> ParseLoadPath(std::string_view name);
// The same, for a network path between nodes: "rma" or "tcp" only.
Result<LoadPath> ParseRemotePath(std::string_view name);

struct PathCost {
  double bandwidth_bytes_per_s = 0;
  double rtt_s = 0;
};

struct Profile {
  std::string model;  // "mistral-7b"
  std::string gpu;    // "a100-80g", "h100-80g", "h200"
  uint64_t kv_bytes_per_token = 0;
  std::string source;
  std::vector<std::pair<uint64_t, double>> prefill_points;  // (tokens, seconds)
  double a = 0, b = 0, c = 0;                                // fitted: seconds
  double decode_base_s = 0;
  double decode_per_kv_token_s = 0;
  PathCost paths[kLoadPaths];
};

// Fits a, b, c of `points` (at least 3 distinct token counts) by least
// squares; InvalidArgument otherwise. a and b are kept >= 0 (a negative
// fitted term is refitted without it), so prefill time never falls as n grows.
Status FitPrefill(std::span<const std::pair<uint64_t, double>> points, double* a, double* b, double* c);

// Every profile in a profiles file (TOML text; docs/scheduler.md has the
// format). Errors name the file's key that is wrong.
Result<std::vector<Profile>> ParseProfiles(std::string_view toml, const std::string& origin = "profiles");
Result<std::vector<Profile>> LoadProfiles(const std::string& path);
// The profiles file installed with PTStore (PTSTORE_PROFILES, else the
// source tree's sched/profiles.toml, else the installed copy).
std::string DefaultProfilesPath();

// One run of a prompt's cached prefix: tokens [previous end, end_token)
// reachable over `path`.
struct PrefixRun {
  uint64_t end_token = 0;
  LoadPath path = LoadPath::kDram;
};

struct LoadPlan {
  // The prompt's tokens in GPU memory once the loads are done: tokens
  // [gpu_tokens, load_tokens) come from the store (none when load_tokens ==
  // gpu_tokens, the tokens the GPU already had), the rest is recomputed.
  uint64_t load_tokens = 0;
  double load_s = 0;         // transfers (one rtt per path used)
  double compute_s = 0;      // prefill of the tokens not loaded
  double total_s() const { return load_s + compute_s; }
};

class CostModel {
 public:
  CostModel() = default;
  explicit CostModel(Profile profile) : p_(std::move(profile)) {}
  // The profile of `model` on `gpu` in `path`; NotFound names the ones there are.
  static Result<CostModel> Load(const std::string& path, const std::string& model, const std::string& gpu);

  const Profile& profile() const { return p_; }

  double PrefillSeconds(uint64_t tokens, uint64_t cached_tokens = 0) const;
  // The whole load into GPU memory over `path` (both hops for ssd/rma/tcp).
  double LoadSeconds(uint64_t bytes, LoadPath path) const;
  // One hop only: rtt + bytes / bandwidth of `path` (the network's share of
  // a remote load, e.g. for an owner's NIC queue).
  double HopSeconds(uint64_t bytes, LoadPath path) const;
  double DecodeStepSeconds(uint64_t batch_kv_tokens) const;
  // The cheapest way to prefill a prompt of `prompt_tokens` whose prefix is
  // cached as `runs` (in order, ends growing; may be empty), when its first
  // `gpu_tokens` are in GPU memory already (an engine's own prefix cache):
  // only what lies past them is worth a transfer.
  LoadPlan Plan(uint64_t prompt_tokens, std::span<const PrefixRun> runs, uint64_t gpu_tokens = 0) const;
  // The shortest prefix worth loading from `path` rather than recomputing
  // for a prompt of that length (tokens; prompt_tokens + 1 when never).
  uint64_t BreakEvenTokens(uint64_t prompt_tokens, LoadPath path) const;

 private:
  Profile p_;
};

}  // namespace ptstore::sched

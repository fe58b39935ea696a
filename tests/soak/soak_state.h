// What the soak's fault loop (soak.cc) and its workers (worker.cc) share:
// which nodes are up and in which incarnation, and the violations found.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <algorithm>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace ptstore::soak {

// The nodes as the workers see them. The fault loop marks a node down (and
// starts a new epoch) before it kills or stops it, and up again (another
// epoch) once its restart accepts connections: an error from a node whose
// epoch changed under the call is the fault's, any other is the store's.
class NodeView {
 public:
  struct Node {
    bool up = false;
    uint64_t epoch = 0;
    std::string socket;
  };
  explicit NodeView(size_t nodes) : nodes_(nodes) {}

  Node Get(size_t i) const {
    std::lock_guard<std::mutex> lock(mu_);
    return nodes_[i];
  }
  void MarkDown(size_t i) {
    std::lock_guard<std::mutex> lock(mu_);
    nodes_[i].up = false;
    ++nodes_[i].epoch;
  }
  void MarkUp(size_t i, std::string socket) {
    std::lock_guard<std::mutex> lock(mu_);
    nodes_[i].up = true;
    ++nodes_[i].epoch;
    nodes_[i].socket = std::move(socket);
  }
  // Whether node i went down or restarted since `epoch`.
  bool ChangedSince(size_t i, uint64_t epoch) const {
    std::lock_guard<std::mutex> lock(mu_);
    return !nodes_[i].up || nodes_[i].epoch != epoch;
  }
  size_t size() const { return nodes_.size(); }

 private:
  mutable std::mutex mu_;
  std::vector<Node> nodes_;
};

// Broken promises, from any thread: all counted, the first kKept kept.
// Each says when, in seconds since the soak began (events.log has the
// faults in UTC, as the nodes' logs).
class Violations {
 public:
  static constexpr size_t kKept = 100;
  Violations() : start_(std::chrono::steady_clock::now()) {}
  void Add(const std::string& what) {
    count_.fetch_add(1, std::memory_order_relaxed);
    const double at = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    char stamp[32];
    std::snprintf(stamp, sizeof(stamp), "[%.1f s] ", at);
    std::lock_guard<std::mutex> lock(mu_);
    if (kept_.size() < kKept) kept_.push_back(stamp + what);
  }
  uint64_t count() const { return count_.load(std::memory_order_relaxed); }
  std::vector<std::string> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    std::vector<std::string> out = kept_;
    if (count() > kept_.size()) out.push_back("... and " + std::to_string(count() - kept_.size()) + " more");
    return out;
  }

 private:
  const std::chrono::steady_clock::time_point start_;
  std::atomic<uint64_t> count_{0};
  std::mutex mu_;
  std::vector<std::string> kept_;
};

// One worker's tallies, summed into the report at the end.
struct WorkerTally {
  std::map<std::string, uint64_t> ops;
  std::map<std::string, uint64_t> allowed_errors;
  uint64_t loads_verified = 0;
  uint64_t hits = 0;
  uint64_t tokens_verified = 0;
  uint64_t bytes_verified = 0;
  uint64_t refused = 0;
  uint64_t skipped_down = 0;
  uint64_t max_op_ms = 0;
  std::string slowest_op;  // what the slowest call was ("load of ...")
  std::map<std::string, uint64_t> max_ms_by_op;  // the slowest call of each operation

  // A load, pin or kv read whose `tokens` tokens were checked byte for byte.
  void Verified(uint64_t tokens, uint64_t bytes_per_token) {
    ++loads_verified;
    if (tokens > 0) ++hits;
    tokens_verified += tokens;
    bytes_verified += tokens * bytes_per_token;
  }
};

inline int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// The call a worker is in, for the fault loop's watchdog (another thread),
// and the tally of its calls: how many of each, the slowest.
class CallClock {
 public:
  void Begin(const std::string& op, const std::string& what, WorkerTally& tally) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      what_ = op + " of " + what;
    }
    ++tally.ops[op];
    op_ = op;
    began_ms_ = SteadyMs();
    busy_since_ms_.store(began_ms_, std::memory_order_relaxed);
  }
  void End(WorkerTally& tally) {
    busy_since_ms_.store(0, std::memory_order_relaxed);
    const auto ms = static_cast<uint64_t>(SteadyMs() - began_ms_);
    uint64_t& op_max = tally.max_ms_by_op[op_];
    op_max = std::max(op_max, ms);
    if (ms >= tally.max_op_ms) {
      tally.max_op_ms = ms;
      tally.slowest_op = what();
    }
  }
  // When the call in progress began (0: none), and what it is.
  int64_t busy_since_ms() const { return busy_since_ms_.load(std::memory_order_relaxed); }
  std::string what() const {
    std::lock_guard<std::mutex> lock(mu_);
    return what_;
  }

 private:
  std::atomic<int64_t> busy_since_ms_{0};
  mutable std::mutex mu_;
  std::string what_;
  std::string op_;  // of the call in progress (the calling worker's only)
  int64_t began_ms_ = 0;
};

}  // namespace ptstore::soak

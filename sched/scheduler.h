// The global scheduler (DESIGN.md §6, docs/scheduler.md): serving instances
// register with it, and it routes each request to one of them.
//
// Policies:
//   round-robin      instances in turn
//   least-load       the instance with the least queued prefill work
//                    (estimated seconds), then the fewest running requests
//   session          session affinity: rendezvous hash of the session id
//                    over the instances (stable as instances come and go);
//                    requests without a session go least-load
//   prefix           prefix locality: the instance whose node holds the
//                    most of the prompt's cached prefix (owned or replica,
//                    from the store's index: PrefixIndex; runs it lacks
//                    come over the network), ties by load;
//                    least-load when nothing is held, or when the best
//                    one's queued work exceeds the least loaded one's by
//                    more than the load bound: load_bound_s, or (when it
//                    is negative, the default) what locality saves on this
//                    request by the cost model (the plan's time on the
//                    least loaded instance minus on the best-placed one)
//
// Load: each routed request adds its estimated prefill time (the cost
// model's plan for that instance: what its node holds loads from DRAM, the
// rest of the cluster's match over the network, the remainder is computed)
// to its instance's queue until PrefillDone, and counts as running until
// Finished.
//
// Thread safety: every method may be called from any thread. The index is
// asked without the scheduler's lock held.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/mutex.h"
#include "ptstore/status.h"
#include "ptstore/types.h"
#include "sched/cost_model.h"

namespace ptstore::sched {

enum class Policy : uint8_t { kRoundRobin = 0, kLeastLoad = 1, kSessionAffinity = 2, kPrefixLocality = 3 };
const char* PolicyName(Policy p);  // "round-robin", "least-load", "session", "prefix"
Result<Policy> ParsePolicy(std::string_view name);

// Where prompts' prefixes are: the store's index (sched/store_index.h) or
// anything that answers the same question.
class PrefixIndex {
 public:
  virtual ~PrefixIndex() = default;
  virtual Result<PrefixLocation> Locate(const std::string& ns, std::span<const uint32_t> tokens) = 0;
};

struct InstanceSpec {
  std::string id;        // unique among registered instances
  uint32_t node = 0;     // the ptstored node it runs beside
  std::string endpoint;  // how to reach it (opaque to the scheduler)
};

struct InstanceState {
  InstanceSpec spec;
  uint32_t running = 0;     // routed, not finished
  double queued_s = 0;      // estimated prefill seconds routed, not yet prefilled
  uint64_t routed = 0;      // requests routed to it in all
};

struct RouteRequest {
  std::string ns;
  std::vector<uint32_t> tokens;
  std::string session;  // empty: none
};

struct RouteDecision {
  uint64_t ticket = 0;          // for PrefillDone / Finished
  std::string instance;
  uint32_t node = 0;
  uint64_t local_tokens = 0;    // tokens of the prefix its node holds (TokensHeldBy)
  uint64_t cluster_tokens = 0;  // prefix held anywhere (0 when the index was not asked)
  LoadPlan plan;                // the cost model's plan on that instance
  std::string reason;           // why this instance ("longest prefix", "over load bound", ...)
};

struct SchedulerOptions {
  Policy policy = Policy::kPrefixLocality;
  // Prefix locality gives up the best-placed instance when its queued work
  // exceeds the least-loaded one's by more than this many seconds; < 0:
  // by more than locality saves on the request (the cost model's plans).
  double load_bound_s = -1;
  // Which network path remote runs of a prefix take ("rma" or "tcp").
  LoadPath remote_path = LoadPath::kRma;
  // A routed request not Finished within this many seconds (its caller
  // died, or forgot) leaves its instance's load; its ticket is forgotten.
  double ticket_ttl_s = 600;
  CostModel cost;
};

class Scheduler {
 public:
  // `index` may be null (no locality: prefix routes least-load); it must
  // outlive the scheduler.
  Scheduler(SchedulerOptions options, PrefixIndex* index);

  // AlreadyExists if the id is registered with another node or endpoint
  // (registering the same spec again is a no-op: instances re-register
  // after a restart of the scheduler). InvalidArgument for an empty id.
  Status Register(const InstanceSpec& spec) EXCLUDES(mu_);
  // NotFound if unknown. Its routed requests are forgotten.
  Status Unregister(const std::string& id) EXCLUDES(mu_);
  std::vector<InstanceState> Instances() const EXCLUDES(mu_);
  const SchedulerOptions& options() const { return options_; }

  // Unavailable when no instance is registered. An index that fails is not
  // an error: the request is routed as if nothing were cached (logged in
  // the decision's reason).
  Result<RouteDecision> Route(const RouteRequest& request) EXCLUDES(mu_);
  // The request's prefill is done: its estimate leaves the queue. NotFound
  // for an unknown (or finished) ticket.
  Status PrefillDone(uint64_t ticket) EXCLUDES(mu_);
  // The request is done (its prefill too, if PrefillDone was not called).
  // NotFound for an unknown, finished or expired (ticket_ttl_s) ticket.
  Status Finished(uint64_t ticket) EXCLUDES(mu_);

 private:
  struct Instance {
    InstanceState state;
    size_t order = 0;  // registration order (round-robin)
  };
  struct Ticket {
    std::string instance;
    double estimate_s = 0;
    bool prefilled = false;
    std::chrono::steady_clock::time_point routed_at;
  };
  // Drops the ticket (and its load on its instance).
  void FinishLocked(std::unordered_map<uint64_t, Ticket>::iterator it) REQUIRES(mu_);
  // Tickets past ticket_ttl_s go (at most once a second).
  void ExpireLocked(std::chrono::steady_clock::time_point now) REQUIRES(mu_);
  // Least loaded among `candidates` (all instances when empty).
  Instance* LeastLoadedLocked(const std::vector<Instance*>& candidates) REQUIRES(mu_);

  const SchedulerOptions options_;
  PrefixIndex* const index_;
  mutable core::Mutex mu_;
  std::unordered_map<std::string, Instance> instances_ GUARDED_BY(mu_);
  std::unordered_map<uint64_t, Ticket> tickets_ GUARDED_BY(mu_);
  size_t next_order_ GUARDED_BY(mu_) = 0;
  uint64_t next_ticket_ GUARDED_BY(mu_) = 1;
  uint64_t rr_ GUARDED_BY(mu_) = 0;
  std::chrono::steady_clock::time_point last_expiry_ GUARDED_BY(mu_){};
};

}  // namespace ptstore::sched

#include "sched/scheduler.h"

#include <xxhash.h>

#include <algorithm>
#include <optional>

#include "sched/load_advisor.h"

namespace ptstore::sched {

const char* PolicyName(Policy p) {
  switch (p) {
    case Policy::kRoundRobin: return "round-robin";
    case Policy::kLeastLoad: return "least-load";
    case Policy::kSessionAffinity: return "session";
    case Policy::kPrefixLocality: return "prefix";
  }
  return "?";
}

Result<Policy> ParsePolicy(std::string_view name) {
  for (Policy p : {Policy::kRoundRobin, Policy::kLeastLoad, Policy::kSessionAffinity, Policy::kPrefixLocality}) {
    if (name == PolicyName(p)) return p;
  }
  return InvalidArgument("unknown scheduling policy '" + std::string(name) +
                         "' (round-robin, least-load, session or prefix)");
}

Scheduler::Scheduler(SchedulerOptions options, PrefixIndex* index) : options_(std::move(options)), index_(index) {}

Status Scheduler::Register(const InstanceSpec& spec) {
  if (spec.id.empty()) return InvalidArgument("an instance needs a non-empty id");
  core::MutexLock lk(mu_);
  auto it = instances_.find(spec.id);
  if (it != instances_.end()) {
    const InstanceSpec& have = it->second.state.spec;
    if (have.node == spec.node && have.endpoint == spec.endpoint) return Status::OK();
    return AlreadyExists("instance " + spec.id + " is registered already (node " + std::to_string(have.node) +
                         ", endpoint " + have.endpoint + ")");
  }
  Instance in;
  in.state.spec = spec;
  in.order = next_order_++;
  instances_.emplace(spec.id, std::move(in));
  return Status::OK();
}

Status Scheduler::Unregister(const std::string& id) {
  core::MutexLock lk(mu_);
  if (instances_.erase(id) == 0) return NotFound("no instance " + id + " is registered");
  std::erase_if(tickets_, [&](const auto& kv) { return kv.second.instance == id; });
  return Status::OK();
}

std::vector<InstanceState> Scheduler::Instances() const {
  core::MutexLock lk(mu_);
  std::vector<std::pair<size_t, InstanceState>> v;
  for (const auto& [id, in] : instances_) v.emplace_back(in.order, in.state);
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::vector<InstanceState> out;
  for (auto& [order, s] : v) out.push_back(std::move(s));
  return out;
}


Scheduler::Instance* Scheduler::LeastLoadedLocked(const std::vector<Instance*>& candidates) {
  Instance* best = nullptr;
  auto better = [](const Instance* a, const Instance* b) {
    if (a->state.queued_s != b->state.queued_s) return a->state.queued_s < b->state.queued_s;
    if (a->state.running != b->state.running) return a->state.running < b->state.running;
    if (a->state.routed != b->state.routed) return a->state.routed < b->state.routed;
    return a->order < b->order;
  };
  if (candidates.empty()) {
    for (auto& [id, in] : instances_) {
      if (!best || better(&in, best)) best = &in;
    }
  } else {
    for (Instance* in : candidates) {
      if (!best || better(in, best)) best = in;
    }
  }
  return best;
}

namespace {
// Rendezvous (highest random weight) score of a session on an instance.
uint64_t Score(const std::string& session, const std::string& instance) {
  return XXH3_64bits_withSeed(session.data(), session.size(), XXH3_64bits(instance.data(), instance.size()));
}
}  // namespace

Result<RouteDecision> Scheduler::Route(const RouteRequest& req) {
  // Ask the index first, without the lock (an RPC to a ptstored).
  std::optional<PrefixLocation> loc;
  std::string index_note;
  if (index_ && options_.policy == Policy::kPrefixLocality && !req.tokens.empty()) {
    Result<PrefixLocation> r = index_->Locate(req.ns, req.tokens);
    if (r.ok()) {
      loc = std::move(*r);
    } else {
      index_note = " (index unavailable: " + r.status().ToString() + ")";
    }
  }
  core::MutexLock lk(mu_);
  const auto now = std::chrono::steady_clock::now();
  ExpireLocked(now);
  if (instances_.empty()) return Unavailable("no serving instance is registered with the scheduler");
  Instance* pick = nullptr;
  std::string reason;
  switch (options_.policy) {
    case Policy::kRoundRobin: {
      std::vector<Instance*> ordered;
      for (auto& [id, in] : instances_) ordered.push_back(&in);
      std::sort(ordered.begin(), ordered.end(), [](Instance* a, Instance* b) { return a->order < b->order; });
      pick = ordered[rr_++ % ordered.size()];
      reason = "round-robin";
      break;
    }
    case Policy::kLeastLoad:
      pick = LeastLoadedLocked({});
      reason = "least-load";
      break;
    case Policy::kSessionAffinity: {
      if (req.session.empty()) {
        pick = LeastLoadedLocked({});
        reason = "least-load (no session)";
        break;
      }
      uint64_t best = 0;
      for (auto& [id, in] : instances_) {
        const uint64_t s = Score(req.session, id);
        if (!pick || s > best || (s == best && id < pick->state.spec.id)) {
          pick = &in;
          best = s;
        }
      }
      reason = "session";
      break;
    }
    case Policy::kPrefixLocality: {
      Instance* least = LeastLoadedLocked({});
      uint64_t best_held = 0;
      std::vector<Instance*> best;
      if (loc) {
        for (auto& [id, in] : instances_) {
          const uint64_t held = loc->TokensHeldBy(in.state.spec.node);
          if (held == 0 || held < best_held) continue;
          if (held > best_held) best.clear();
          best_held = held;
          best.push_back(&in);
        }
      }
      if (best.empty()) {
        pick = least;
        reason = "least-load (no prefix held)" + index_note;
        break;
      }
      pick = LeastLoadedLocked(best);
      double bound = options_.load_bound_s;
      if (bound < 0) {
        // Automatic: wait for locality only as long as it saves time, by
        // the cost model (the plan on the least loaded instance minus the
        // plan where the prefix is).
        const uint64_t n = req.tokens.size();
        bound = PlanFor(options_.cost, *loc, least->state.spec.node, n, options_.remote_path).total_s() -
                PlanFor(options_.cost, *loc, pick->state.spec.node, n, options_.remote_path).total_s();
      }
      if (pick->state.queued_s > least->state.queued_s + bound) {
        pick = least;
        reason = "least-load (longest prefix over load bound)";
      } else {
        reason = "longest prefix";
      }
      break;
    }
  }
  RouteDecision d;
  d.ticket = next_ticket_++;
  d.instance = pick->state.spec.id;
  d.node = pick->state.spec.node;
  d.local_tokens = loc ? loc->TokensHeldBy(d.node) : 0;
  d.cluster_tokens = loc ? loc->matched_tokens : 0;
  d.plan = PlanFor(options_.cost, loc ? *loc : PrefixLocation{}, d.node, req.tokens.size(), options_.remote_path);
  d.reason = std::move(reason);
  pick->state.queued_s += d.plan.total_s();
  pick->state.running += 1;
  pick->state.routed += 1;
  tickets_[d.ticket] = Ticket{d.instance, d.plan.total_s(), false, now};
  return d;
}

Status Scheduler::PrefillDone(uint64_t ticket) {
  core::MutexLock lk(mu_);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return NotFound("no routed request has ticket " + std::to_string(ticket));
  if (it->second.prefilled) return Status::OK();
  it->second.prefilled = true;
  auto in = instances_.find(it->second.instance);
  if (in != instances_.end()) in->second.state.queued_s = std::max(0.0, in->second.state.queued_s - it->second.estimate_s);
  return Status::OK();
}

Status Scheduler::Finished(uint64_t ticket) {
  core::MutexLock lk(mu_);
  auto it = tickets_.find(ticket);
  if (it == tickets_.end()) return NotFound("no routed request has ticket " + std::to_string(ticket));
  FinishLocked(it);
  return Status::OK();
}

void Scheduler::FinishLocked(std::unordered_map<uint64_t, Ticket>::iterator it) {
  auto in = instances_.find(it->second.instance);
  if (in != instances_.end()) {
    InstanceState& s = in->second.state;
    if (!it->second.prefilled) s.queued_s = std::max(0.0, s.queued_s - it->second.estimate_s);
    if (s.running > 0) s.running -= 1;
  }
  tickets_.erase(it);
}

void Scheduler::ExpireLocked(std::chrono::steady_clock::time_point now) {
  if (now - last_expiry_ < std::chrono::seconds(1) && options_.ticket_ttl_s >= 1) return;
  last_expiry_ = now;
  const auto ttl = std::chrono::duration<double>(options_.ticket_ttl_s);
  for (auto it = tickets_.begin(); it != tickets_.end();) {
    auto next = std::next(it);
    if (now - it->second.routed_at > ttl) FinishLocked(it);
    it = next;
  }
}

}  // namespace ptstore::sched

#include "sched/load_advisor.h"

#include <vector>

namespace ptstore::sched {

LoadPlan PlanFor(const CostModel& model, const PrefixLocation& loc, uint32_t node, uint64_t prompt_tokens,
                 LoadPath remote_path, uint64_t gpu_tokens) {
  // Each span from where it is: this node's arena, or over the network.
  std::vector<PrefixRun> runs;
  for (size_t i = 0; i < loc.spans.size(); ++i) {
    const LoadPath path = loc.Holds(i, node) ? LoadPath::kDram : remote_path;
    if (!runs.empty() && runs.back().path == path) {
      runs.back().end_token = loc.spans[i].end_token;
    } else {
      runs.push_back({loc.spans[i].end_token, path});
    }
  }
  return model.Plan(prompt_tokens, runs, gpu_tokens);
}

LoadAdvisor::LoadAdvisor(Client* client, CostModel model, LoadPath remote_path)
    : client_(client), model_(std::move(model)), remote_path_(remote_path) {}

Result<LoadPlan> LoadAdvisor::Advise(const std::string& ns, std::span<const uint32_t> tokens, uint64_t gpu_tokens) {
  Result<PrefixLocation> loc = client_->LocatePrefix(ns, tokens);
  if (!loc.ok()) {
    if (loc.status().code() == Code::kNotFound) return model_.Plan(tokens.size(), {}, gpu_tokens);  // no namespace: a miss
    return loc.status();
  }
  return PlanFor(model_, *loc, client_->node_id(), tokens.size(), remote_path_, gpu_tokens);
}

}  // namespace ptstore::sched

// Load or recompute? The cost model applied to where a prompt's prefix is,
// for a client (or the vLLM connector) deciding before it loads.
//
//   auto advisor = LoadAdvisor(client.get(), CostModel::Load(...).value());
//   LoadPlan p = advisor.Advise("mistral-7b", prompt).value();
//   // load tokens [0, p.load_tokens), recompute the rest
//
// Each span of the prompt's match that this node holds (owned or replica,
// in DRAM or on SSD) counts as the DRAM path; the others as the remote path
// (RMA or TCP, as the cluster's data path is).
//
// Thread safety: as the Client (any thread).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "ptstore/client.h"
#include "sched/cost_model.h"

namespace ptstore::sched {

// The plan for a prompt of `prompt_tokens` on an instance beside `node`,
// given where its prefix is, and its first `gpu_tokens` already in GPU memory.
LoadPlan PlanFor(const CostModel& model, const PrefixLocation& loc, uint32_t node, uint64_t prompt_tokens,
                 LoadPath remote_path, uint64_t gpu_tokens = 0);

class LoadAdvisor {
 public:
  // `client` must outlive the advisor. remote_path: how other nodes' runs
  // travel (kRma or kTcp).
  LoadAdvisor(Client* client, CostModel model, LoadPath remote_path = LoadPath::kRma);

  // Asks the client's node where the prefix is (Client::LocatePrefix) and
  // plans, the first `gpu_tokens` being in GPU memory already (an engine's
  // own prefix cache). A miss plans a recompute (load_tokens == gpu_tokens).
  Result<LoadPlan> Advise(const std::string& ns, std::span<const uint32_t> tokens, uint64_t gpu_tokens = 0);
  const CostModel& model() const { return model_; }

 private:
  Client* const client_;
  const CostModel model_;
  const LoadPath remote_path_;
};

}  // namespace ptstore::sched

// The cost model the scheduler tests route with: the shipped Mistral-7B
// profile on H100 (its numbers only matter for the load estimates; the
// small test layouts move few bytes).
#pragma once

#include <gtest/gtest.h>

#include "sched/cost_model.h"
#include "tests/testing/status_matchers.h"

namespace ptstore::sched {

inline CostModel TestModel() {
  auto m = CostModel::Load(DefaultProfilesPath(), "mistral-7b", "h100-80g");
  EXPECT_OK(m);
  return m.ok() ? *m : CostModel();
}

}  // namespace ptstore::sched

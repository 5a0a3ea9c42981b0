// A check shared by the planner's tests: a plan's predicted step is the replay of that plan.
#pragma once

#include <doctest/doctest.h>

#include <string>

#include "pd2bw/planner/search.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "random_instances.hpp"

namespace pd2bw::testing {

// Plans `inst` (the kept 3, one thread), writes the plan and reads it back, and checks that its predicted
// step equals a fresh replay of what the file says, within 1e-12. Returns false, checking nothing, when
// no plan fits.
inline bool plan_predicts_its_replay(const RandomInstance& inst) {
  const planner::CostModel model(inst.profile, inst.cluster, inst.constraints);
  const planner::SearchResult result = planner::search(model, {3, 1});
  if (!result.feasible()) return false;
  const auto plan =
      schemas::parse_plan(schemas::dump_plan(planner::build_plan(model, result, std::string(64, '0'), {})));
  const planner::PlanModel pm = planner::plan_model(inst.profile, plan);
  const planner::SimResult sim = planner::simulate_steady(
      planner::make_sim_input(pm.model, pm.candidate, pm.bounds, pm.recompute, planner::default_sim_steps(plan.schedule)),
      true);
  CAPTURE(inst.describe());
  CHECK(plan.predictions.step_ms == doctest::Approx(sim.step_ms).epsilon(1e-12));
  return true;
}

}  // namespace pd2bw::testing

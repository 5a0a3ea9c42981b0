// Helpers shared by the planner's tests that replay a written plan: a plan's predicted step must be the
// replay of what its file says.
#pragma once

#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "pd2bw/planner/search.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "random_instances.hpp"

namespace pd2bw::testing {

// One node of two 8 GiB cpu devices, 10 GB/s links.
inline schemas::Cluster one_node_cluster() {
  schemas::Cluster c;
  c.device.name = "cpu";
  c.device.memory_bytes = int64_t{8} << 30;
  schemas::ClusterLevel node;
  node.name = "node";
  node.size = 2;
  node.p2p_gbps = 10;
  node.p2p_latency_ms = 0.01;
  node.allreduce_busbw_gbps = 10;
  c.levels.push_back(node);
  return c;
}

// Searches `model` (built on `profile`; the kept 3, one thread), writes the winner's plan and reads it
// back, and replays what the file says: the plan and the replay's steady step; nullopt when no plan fits.
inline std::optional<std::pair<schemas::Plan, double>> written_plan_and_replay(const schemas::Profile& profile,
                                                                               const planner::CostModel& model) {
  const planner::SearchResult result = planner::search(model, {3, 1});
  if (!result.feasible()) return std::nullopt;
  auto plan = schemas::parse_plan(schemas::dump_plan(planner::build_plan(model, result, std::string(64, '0'), {})));
  const planner::PlanModel pm = planner::plan_model(profile, plan);
  const planner::SimResult sim = planner::simulate_steady(
      planner::make_sim_input(pm.model, pm.candidate, pm.bounds, pm.recompute, planner::default_sim_steps(plan.schedule)));
  return std::pair{std::move(plan), sim.step_ms};
}

// Plans `inst` and checks that the plan's predicted step equals the replay of its file, within 1e-12.
// Returns false, checking nothing, when no plan fits.
inline bool plan_predicts_its_replay(const RandomInstance& inst) {
  const planner::CostModel model(inst.profile, inst.cluster, inst.constraints);
  const auto got = written_plan_and_replay(inst.profile, model);
  if (!got) return false;
  CAPTURE(inst.describe());
  CHECK(got->first.predictions.step_ms == doctest::Approx(got->second).epsilon(1e-12));
  return true;
}

}  // namespace pd2bw::testing

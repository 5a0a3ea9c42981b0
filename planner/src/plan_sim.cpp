// Simulating what the planner chose, from a Plan file (for `pd2bw simulate` and `pd2bw validate`).
#include <fmt/format.h>

#include <algorithm>
#include <utility>

#include "pd2bw/error.hpp"
#include "pd2bw/planner/simulator.hpp"

namespace pd2bw::planner {

namespace {

void check_plan_matches(const Profile& profile, const schemas::Plan& plan) {
  const auto& a = profile.model;
  const auto& b = plan.model;
  if (a.kind != b.kind || a.name != b.name || a.blocks != b.blocks || a.d_model != b.d_model ||
      a.heads != b.heads || a.seq_len != b.seq_len || a.vocab != b.vocab || a.dtype != b.dtype)
    throw UsageError(fmt::format("the plan is for model '{}' but the profile describes '{}'", b.name, a.name),
                     "simulate with the profile the plan was made from");
  if (plan.num_layers != static_cast<int64_t>(profile.layers.size()))
    throw UsageError(fmt::format("the plan has {} layers but the profile has {}", plan.num_layers,
                                 profile.layers.size()),
                     "simulate with the profile the plan was made from");
}

int64_t microbatch_index(const Profile& profile, int64_t b) {
  const auto& sizes = profile.microbatch_sizes;
  const auto it = std::find(sizes.begin(), sizes.end(), b);
  if (it == sizes.end())
    throw UsageError(fmt::format("the plan's microbatch size {} was not profiled", b),
                     "simulate with the profile the plan was made from");
  return static_cast<int64_t>(it - sizes.begin());
}

}  // namespace

PlanModel plan_model(const Profile& profile, const schemas::Plan& plan) {
  check_plan_matches(profile, plan);
  Constraints k;
  k.global_batch = plan.global_batch;
  k.optimizer = plan.optimizer;
  k.reserve_bytes = plan.reserve_bytes;
  pipeline::PipelineShape shape = pipeline::shape_of(plan);
  PlanModel pm{CostModel(profile, plan.cluster, k), {}, std::move(shape.bounds), std::move(shape.recompute)};
  pm.candidate = {shape.schedule, microbatch_index(profile, shape.microbatch_size), shape.microbatch_size,
                  shape.width, shape.depth, shape.microbatches, plan.placement};
  return pm;
}

int64_t default_sim_steps(Schedule s) { return s == Schedule::two_bw ? 5 : 3; }

}  // namespace pd2bw::planner

// Simulating what the planner chose, from a Plan file (for `pd2bw simulate` and `pd2bw validate`).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "pd2bw/error.hpp"
#include "pd2bw/planner/simulator.hpp"

namespace pd2bw::planner {

namespace {

// Where the blocks put their layer norms: the file's "ln", or when absent its kind's own.
std::string layer_norm(const schemas::ModelDesc& m) {
  if (!m.ln.empty()) return m.ln;
  if (m.kind == "gpt") return "pre";
  if (m.kind == "bert") return "post";
  return "unset";
}

// Names every model field on which the plan and the profile differ ("blocks 24 vs 26").
std::string model_differences(const schemas::ModelDesc& plan, const schemas::ModelDesc& profile) {
  std::vector<std::string> out;
  const auto field = [&out](const char* name, const auto& a, const auto& b) {
    if (a != b) out.push_back(fmt::format("{} {} in the plan, {} in the profile", name, a, b));
  };
  field("kind", plan.kind, profile.kind);
  field("name", plan.name, profile.name);
  field("blocks", plan.blocks, profile.blocks);
  field("d_model", plan.d_model, profile.d_model);
  field("heads", plan.heads, profile.heads);
  field("seq_len", plan.seq_len, profile.seq_len);
  field("vocab", plan.vocab, profile.vocab);
  field("dtype", schemas::to_string(plan.dtype), schemas::to_string(profile.dtype));
  field("tie_embeddings", plan.tie_embeddings, profile.tie_embeddings);
  field("ln", layer_norm(plan), layer_norm(profile));
  return fmt::format("{}", fmt::join(out, "; "));
}

void check_plan_matches(const Profile& profile, const schemas::Plan& plan) {
  const std::string diff = model_differences(plan.model, profile.model);
  if (!diff.empty())
    throw UsageError(fmt::format("the plan's model '{}' is not the profile's: {}", plan.model.name, diff),
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
  if (pipeline::splits_backward(plan.schedule))
    pm.model.require_split_backward(fmt::format("the plan runs {}, which", schemas::to_string(plan.schedule)));
  // The shape's bounds and recompute flags are already per chunk (d v + 1 and d v entries).
  pm.candidate = {shape.schedule, microbatch_index(profile, shape.microbatch_size), shape.microbatch_size,
                  shape.width, shape.depth, shape.microbatches, plan.placement, shape.chunks};
  return pm;
}

int64_t default_sim_steps(Schedule s) { return s == Schedule::two_bw ? 5 : 3; }

}  // namespace pd2bw::planner

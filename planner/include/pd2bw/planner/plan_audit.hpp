// Checks of a plan's numbers, for `pd2bw validate`: parse_plan already guarantees the structure (stages
// tile the layers, the rank grid and table agree, the batch adds up); these check that the memory terms,
// in-flight counts, step times and predictions are the ones a planner could have written.
#pragma once

#include <string>
#include <vector>

#include "pd2bw/schemas/plan.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::planner {

// One number that is wrong: where (a JSON pointer into the plan) and why, with both values.
struct PlanFinding {
  std::string pointer;  // e.g. "/stages/1/memory/total_bytes"
  std::string message;  // e.g. "is 1200 but its terms add up to 1100"
};

// The rules a plan must follow on its own, whatever profile it came from: a gpt or bert model has
// /num_layers = blocks + 2 (embedding, blocks, head: the model `train` builds); each stage's memory total is
// the sum of its terms and within its limit (the cluster's device memory), its dominant term is the
// largest; in_flight follows the schedule (min(d - i, m) for 2bw and flush, m for gpipe); a stage's
// step_ms is at least m x (compute + p2p) + allreduce; the predicted step is at least the busiest stage's
// step_ms, bottleneck_stage names that stage, samples_per_s and tokens_per_s follow from step_ms,
// binding_memory is the dominant term of the stage closest to its limit, and no alternative is faster
// than the plan but one whose step_ms is a lower bound (step_bound "lower": not replayed) (parse_plan
// checks the idle fractions). Empty when all hold.
std::vector<PlanFinding> check_plan_numbers(const schemas::Plan& plan);

// The plan's stages and predictions recomputed from `profile` (the cost model prices each stage with the
// plan's split and recompute flags; the simulator replays the split until steady) and compared with the
// plan's: every memory term, in-flight count and time (relative tolerance 1e-9), and the predictions.
// Throws UsageError when the plan was not made from this profile (see plan_model).
std::vector<PlanFinding> check_plan_against(const schemas::Profile& profile, const schemas::Plan& plan);

}  // namespace pd2bw::planner

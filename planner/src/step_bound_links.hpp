// The fastest link levels a candidate's placement allows: shared by the step bounds (step_bound.cpp) and
// rules_out (step_bound_rules.cpp). Private to the planner.
#pragma once

#include <cstdint>

#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner::detail {

// The fastest levels any stage boundary and any stage's replicas can use under c's placement: a
// boundary spans ranks [i w, (i + 2) w) when replicas are inner, adjacent ranks otherwise; the aligned
// group of stage 0 spans the least.
struct LinkLevels {
  int64_t boundary = 0, replicas = 0;
};
LinkLevels fastest_levels(const CostModel& model, const Candidate& c);

// A period of c's replicas in the levels its stage boundaries cross: replica r + period crosses the same
// levels into and out of every stage as replica r (step_bound_links.cpp, with the reason).
int64_t replica_period(const CostModel& model, const Candidate& c);
// The span of the cluster's second-to-last level (the product of every level's size but the last): an
// interior stage i + period crosses the same levels as stage i, replica by replica (the same reason).
int64_t stage_period(const CostModel& model);
// The earlier stage whose levels and links stage i of d repeats (i - period, for the interior stages past
// the first period), or -1 when it must be walked.
inline int64_t repeated_stage(int64_t i, int64_t depth, int64_t period) {
  return i > period && i + 1 < depth ? i - period : -1;
}

}  // namespace pd2bw::planner::detail

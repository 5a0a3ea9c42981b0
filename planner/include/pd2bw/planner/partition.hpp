// Splitting a model's layers into d contiguous stages: exact min-max dynamic programming.
#pragma once

#include <cstdint>
#include <limits>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

struct Split {
  std::vector<int64_t> bounds;  // d + 1 entries: stage i holds layers [bounds[i], bounds[i+1])
  double step_ms = kInfinity;   // max over stages of StageCost::step_ms; infinity when infeasible
  bool feasible() const { return step_ms < kInfinity; }
};

// The split of `c` minimising the step time (the largest stage step_ms) with every stage within memory.
// Exact for the cost model. Only splits with step_ms <= upper_bound_ms are looked for: when none
// exists the result is infeasible (step_ms = infinity). Ties go to the split found first (earliest
// stage boundaries). Runs in about O(layers^2) when the bound is tight.
Split best_split(const CostModel& model, const Candidate& c, double upper_bound_ms = kInfinity);

// An upper bound on best_split's optimum from a greedy split (each stage as long as allowed), found by
// bisection on the threshold; infinity when the greedy finds no split. Much cheaper than best_split.
double greedy_step_ms(const CostModel& model, const Candidate& c);

// When no split fits: the split minimising the largest memory overage (bytes over the limit) over its
// stages, each stage in its least-memory option. Returns that overage in `over_bytes`; only splits with
// an overage <= bound_bytes are looked for (empty bounds when there is none).
struct OverageSplit {
  std::vector<int64_t> bounds;
  int64_t over_bytes = 0;
};
OverageSplit least_overage_split(const CostModel& model, const Candidate& c,
                                 int64_t bound_bytes = INT64_MAX);

}  // namespace pd2bw::planner

// A lower bound on the recompute that memory forces on every split of a candidate, for the step-time
// lower bounds (step_bound.hpp). Private to the planner.
//
// A stage that keeps f microbatches without recomputing holds one run of layers whose static bytes plus
// f stashes fit the device less the reserve, so it holds at most the most compute W(f), the most
// parameter bytes P(f) and the most layers N(f) of any such run (all fall as f grows, so f may be
// rounded down to a power of two); a stage that recomputes still keeps one microbatch's full stash, so
// it holds at most W(1), P(1) and N(1). Whatever the plain stages do not hold is recomputed, and they
// must leave no more than the others can hold: the least amount left over that way (by compute, by
// parameter bytes and by layers) is recomputed. That costs at least the compute left times the smallest
// redo share; the redo of the parameter bytes left, taken from the layers with the least redo per byte
// first (a fractional knapsack, below any real choice of layers); and the redo of as many of the
// cheapest layers as are left. The last holds when one outsized layer (an embedding) lifts W and P of
// every run through it.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner {

// The stages of candidate c by the power of two below their in-flight count (CostModel::in_flight):
// out[j] = how many have 2^j <= f_k < 2^(j+1), up to the largest j any reaches. O(log^2 d) for the
// schedules of one chunk per rank (their counts never grow with the stage), O(d) walks otherwise.
std::vector<int64_t> stages_by_stash_bucket(const Candidate& c);

class ForcedRedo {
 public:
  explicit ForcedRedo(const CostModel& model);

  // The least recomputed forward (ms per microbatch, over all stages) of any split of `c` under the
  // recompute policy: all of it for `always`, none for `never`. Memoises; not thread-safe.
  double operator()(const Candidate& c);

 private:
  struct Run {
    double compute_ms = -1;  // -1 until computed
    int64_t params = 0;
    int64_t layers = 0;
  };
  // W, P and N with 2^j stashes for schedule s at microbatch index bi (memoised).
  const Run& longest_run(Schedule s, size_t bi, int j);
  // Stages by the power of two below their in-flight count (count[j]: those with 2^j <= f_k < 2^(j+1)): a
  // run that fits with f_k stashes fits with 2^j of them. Memoised by schedule, depth, m and chunks, all
  // it depends on (not b, w or the placement).
  const std::vector<int64_t>& stages_by_stashes(const Candidate& c);
  std::map<std::tuple<Schedule, int64_t, int64_t, int64_t>, std::vector<int64_t>> stages_by_stashes_;
  // The least redo (ms) of layers holding `params` parameter bytes, fractions of layers allowed.
  double cheapest_redo(size_t bi, int64_t params) const;

  const CostModel& model_;
  int64_t cap_bytes_ = 0;  // device memory minus the reserve
  // Per microbatch index: the layers by redo per parameter byte, prefix sums of their parameter bytes
  // and redo in that order.
  std::vector<std::vector<int64_t>> params_by_ratio_;
  std::vector<std::vector<double>> redo_by_ratio_;
  std::vector<std::vector<double>> cheapest_layers_;  // per microbatch index: prefix sums of redo, ascending
  std::array<std::vector<std::vector<Run>>, kSchedules> runs_;  // [schedule][bi][j]
  // operator()'s (cap, stage count) groups by compute, parameters and layers: kept between calls, which
  // made three vectors (and least_recomputed three copies) per candidate.
  std::array<std::vector<std::pair<double, double>>, 3> groups_;
};

}  // namespace pd2bw::planner

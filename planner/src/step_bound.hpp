// Lower bounds on a candidate's step time, cheap enough to compute for every point of the search
// space; the search evaluates candidates in the order of these bounds and skips those whose bound
// cannot beat what it already has. Private to the planner.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner {

class StepLowerBound {
 public:
  explicit StepLowerBound(const CostModel& model);

  // Never above the least step time of any split of `c`; infinity when no split can fit in memory.
  double operator()(const Candidate& c);

 private:
  // The bound from the average stage: all compute, the cheapest boundary transfers and allreduces.
  double average_bound(const Candidate& c) const;
  // The bound from stage capacities: the least step time T at which d stages can hold all compute.
  double capacity_bound(const Candidate& c);
  // Sum over stages of the compute each can hold when its compute budget is x (ms per microbatch).
  double capacity_sum(const Candidate& c, double x);
  // Sum of plain_capacity over f = 1..n, each term clipped to [low, high].
  double clipped_prefix(bool two_versions, size_t bi, int64_t n, double low, double high);

  const CostModel& model_;
  int64_t cap_bytes_ = 0;                       // device memory minus the reserve
  std::vector<double> max_layer_ms_;            // per microbatch index: largest fwd + bwd
  std::vector<int64_t> min_out_, min_in_;       // per microbatch index: smallest boundary tensors
  std::array<int64_t, 3> max_layer_static_{};   // per schedule
  int64_t total_grad_bytes_ = 0;
  // plain_capacity by f (index 0 unused) and its prefix sums, [versions][bi], grown on demand.
  std::array<std::vector<std::vector<double>>, 2> capacity_vals_, capacity_sums_;
};

}  // namespace pd2bw::planner

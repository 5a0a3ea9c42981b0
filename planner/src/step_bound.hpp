// Lower bounds on a candidate's step time, cheap enough to compute for every point of the search
// space; the search evaluates candidates in the order of these bounds and skips those whose bound
// cannot beat what it already has. Private to the planner.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "forced_redo.hpp"
#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner {

class StepLowerBound {
 public:
  explicit StepLowerBound(const CostModel& model);

  // Never above the least step time of any split of `c`; infinity when no split can fit in memory.
  double operator()(const Candidate& c);
  // Whether refined(c) can be above operator()(c), and that further bound (with the links each stage's
  // replicas really cross; O(d x w) for the first candidate of a depth, width and placement; 0 when not
  // refinable): the larger of the two is a lower bound.
  bool refinable(const Candidate& c) const;
  double refined(const Candidate& c);

  // A finer test for a candidate about to be evaluated: true when no split of `c` has an objective <=
  // `limit` because the d stages, each with the links and allreduce latency its replicas really have,
  // cannot hold all compute within it (and for flush, with the drain and refill above each stage and its
  // round trips below it). O(d) after the first call for a depth, width and placement. Thread-safe.
  bool rules_out(const Candidate& c, double limit) const;

 private:
  // Per stage: the least per-microbatch transfers of its slowest replica (2 per boundary), the least one
  // transfer over its input boundary on its fastest replica, and its allreduce latency.
  struct StageLinks {
    double lane = 0, in_fast = 0, latency = 0;
  };
  std::vector<StageLinks> stage_links(const Candidate& c) const;
  // The levels behind stage_links, shared by the candidates with the same depth, width and placement:
  // per stage the distinct (input, output) levels its replicas cross (-1 at an end) and the level its
  // allreduce spans.
  struct PlacementLevels {
    std::vector<std::vector<std::pair<int, int>>> pairs;
    std::vector<int64_t> ar_level;
  };
  std::shared_ptr<const PlacementLevels> placement_levels(const Candidate& c) const;
  // The bound from the average stage: all compute with `redo` (ForcedRedo), the cheapest boundary
  // transfers and allreduces.
  double average_bound(const Candidate& c, double redo) const;
  // The bound from stage capacities: the least step time T at which d stages can hold all compute.
  double capacity_bound(const Candidate& c, double redo);
  // Flush's cycle through every stage: all compute with the forced `redo`, every boundary twice, stage
  // 0's allreduce and update, and (m - 1) more forwards or backwards of the busiest stage.
  double fill_bound(const Candidate& c, double redo) const;
  // Every boundary crossed twice (one way each), each at the fastest level: what the fill and drain of
  // flush and gpipe pass at least.
  double least_fill_p2p(const Candidate& c) const;
  // Sum over stages of the compute each can hold when its compute budget is x (ms per microbatch).
  double capacity_sum(const Candidate& c, double x);
  // Whether the d stages cannot hold all L layers when each stage's compute per microbatch may be at
  // most `budget` ms (see step_bound_rules.cpp). O(L x the longest run that fits).
  bool too_few_layers(const Candidate& c, double budget) const;
  // The least fwd + bwd of k consecutive layers at microbatch index bi (memoised).
  double least_window_ms(size_t bi, int64_t k);
  // Sum of plain_capacity over f = 1..n, each term clipped to [low, high].
  double clipped_prefix(bool two_versions, size_t bi, int64_t n, double low, double high);

  const CostModel& model_;
  int64_t cap_bytes_ = 0;                       // device memory minus the reserve
  std::vector<double> max_layer_ms_;            // per microbatch index: largest fwd + bwd
  std::vector<double> total_fwd_ms_, total_bwd_ms_;  // per microbatch index: all layers, no recompute
  // zb-h1, per microbatch index: the model's W share of its fwd + bwd, and the W of each layer above that
  // share of its own fwd + bwd, summed (see zb_cycle_bound).
  std::vector<double> weight_share_, weight_excess_ms_;
  // ZB-H1's cycles through stage 0 and its round trips with `transfers` ms of boundary transfers on them
  // (step_bound.cpp); ZB-H2's cycles alone, with its trailing W counts; memoised per microbatch index, m
  // and schedule.
  double zb_cycle_bound(const Candidate& c, double transfers);
  // The W's stage k runs after its last B in the cycle (objective.hpp): min(defer + 1, m).
  static double zb_trailing(const Candidate& c, int64_t k);
  // The first stage k whose warm-up w_k leaves m >= w_k + 2: max(1, d - m + 1).
  static int64_t zb_round_trip_stage(const Candidate& c);
  std::map<std::tuple<size_t, int64_t, Schedule>, std::vector<double>> zb_held_;
  std::vector<int64_t> min_out_, min_in_;       // per microbatch index: smallest boundary tensors
  std::array<int64_t, kSchedules> max_layer_static_{};   // per schedule
  int64_t total_grad_bytes_ = 0, first_grad_bytes_ = 0;  // fp32 gradients of all layers / of layer 0
  // plain_capacity by f (index 0 unused) and its prefix sums, [versions][bi], grown on demand.
  std::array<std::vector<std::vector<double>>, 2> capacity_vals_, capacity_sums_;
  std::vector<std::vector<double>> least_window_;  // [bi][k], -1 until computed
  ForcedRedo forced_redo_;
  mutable std::mutex levels_mutex_;
  mutable std::map<std::tuple<int64_t, int64_t, int>, std::shared_ptr<const PlacementLevels>> levels_;
};

}  // namespace pd2bw::planner

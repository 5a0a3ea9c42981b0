// Splitting a model's layers into d contiguous stages: an exact dynamic program over the stage
// boundaries for the search's objective (step_objective), the enumeration of every split below a
// step time, and the least-overage split for the error message when nothing fits.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner {

inline constexpr double kInfinity = std::numeric_limits<double>::infinity();

struct Split {
  std::vector<int64_t> bounds;  // d + 1 entries: stage i holds layers [bounds[i], bounds[i+1])
  double step_ms = kInfinity;   // step_objective of the split; infinity when infeasible
  bool exhausted = false;       // best_split ran out of work: a greedy or balanced split, not the optimum
  int64_t work = 0;             // the work best_split's dynamic program spent (at most its max_work + 1)
  bool feasible() const { return step_ms < kInfinity; }
};

// The work (stages priced plus partial splits folded and compared) best_split's dynamic program may do
// for one candidate, about 0.1 s; flush and gpipe with many stages and few microbatches can need more.
inline constexpr int64_t kSplitWork = int64_t{1} << 20;

// What best_split and greedy_step_ms learn of candidates' greedy splits (one chunk per rank), kept for later
// calls on the same candidates of the same model: a search asks again under other bounds, and the greedy
// split depends on the candidate alone, so a memo changes no result. Thread-safe.
class GreedyMemo {
 public:
  GreedyMemo();
  ~GreedyMemo();
  GreedyMemo(const GreedyMemo&) = delete;
  GreedyMemo& operator=(const GreedyMemo&) = delete;
  struct Impl;
  Impl& impl() { return *impl_; }

 private:
  std::unique_ptr<Impl> impl_;
};

// The split of `c` minimising step_objective with every stage within memory. Exact unless the work
// passes max_work: then the result is the split greedy_step_ms found, the lesser of its two for flush
// (balanced_split's when it found
// none and max_work >= kSplitWork, else no split), with exhausted set, whatever its step_ms and the bound
// (chunked candidates: the equal-compute split refined, or where it does not fit a memory-fitted split,
// refined when within the bound and left out when a lower bound on it is above the bound). Only splits
// with step_ms <= upper_bound_ms are looked for: when none exists the result is
// infeasible (step_ms = infinity). Among equal step times the result is the same whatever the bound: at
// each stage the canonical choice among equal partial states (earliest next boundary first). About
// O(layers^2) when the bound is tight; a smaller bound never needs more work.
// `memo`, when given, keeps the greedy split for the next call on `c`.
Split best_split(const CostModel& model, const Candidate& c, double upper_bound_ms = kInfinity,
                 int64_t max_work = kSplitWork, GreedyMemo* memo = nullptr);

// The split of `c` with the least busiest-stage time (the largest StageCost::step_ms; for 2bw that is
// best_split), with step_ms its step_objective. Much cheaper than best_split for flush and gpipe, whose
// objective keeps more than one number per partial split; infeasible when no split fits.
Split balanced_split(const CostModel& model, const Candidate& c);

// An upper bound on best_split's optimum from greedy splits (each stage as long as its busy time allows),
// found by bisection on that time, and for flush from its tiered splits too (its first d - m + 1 stages
// holding more than the others); infinity when neither finds a split. Much cheaper than best_split.
double greedy_step_ms(const CostModel& model, const Candidate& c, GreedyMemo* memo = nullptr);

// Calls visit(split) for every split of `c` with step_objective <= limit_ms, in lexicographic order of
// the bounds (split.step_ms is its objective). visit returns the limit for the rest of the walk (a
// smaller one prunes more; a negative one stops). The walk stops after `max_nodes` partial splits, or
// before the first when its tables need more than kSplitWork; returns whether it visited every split
// below the limit.
bool for_each_split_within(const CostModel& model, const Candidate& c, double limit_ms, int64_t max_nodes,
                           const std::function<double(const Split&)>& visit);

// The split minimising the largest memory overage (bytes over the limit) over its stages, each stage in
// the option the recompute policy picks (its least-memory one when nothing fits); what closest_infeasible
// reports when no split fits. Returns that overage in `over_bytes` (negative when a split fits, by the
// headroom of its fullest stage); only splits with an overage <= bound_bytes are looked for (empty bounds
// and over_bytes INT64_MAX when there is none).
struct OverageSplit {
  std::vector<int64_t> bounds;
  int64_t over_bytes = 0;
};
OverageSplit least_overage_split(const CostModel& model, const Candidate& c,
                                 int64_t bound_bytes = INT64_MAX);

}  // namespace pd2bw::planner

// What a search that finds no plan says: the closest point by memory overage (closest_infeasible), and
// whether a point left out for its size may still fit (detail::first_not_ruled_out).
#include <algorithm>
#include <cstdint>
#include <numeric>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "partition_overage.hpp"
#include "pd2bw/planner/search.hpp"
#include "step_bound_order.hpp"

namespace pd2bw::planner {

namespace detail {

std::optional<Candidate> first_not_ruled_out(const StepLowerBound& bound, const std::vector<Candidate>& candidates) {
  StepLowerBound own(bound);
  for (const Candidate& c : candidates) {
    const double cheap = own(c);
    if (cheap < kInfinity && refined_below(own, c, cheap, kInfinity) < kInfinity) return c;
  }
  return std::nullopt;
}

}  // namespace detail

Evaluated closest_infeasible(const CostModel& model) {
  // The first candidate (in enumeration order) of the least overage: the least (overage, index), whatever
  // the order they are looked at in. Deeper pipelines hold less per stage, so the deepest go first for a
  // close bound early; then the rest in enumeration order, so that of the many that tie (the same fullest
  // stage) only the first is priced in full and the others are proven no closer by least_overage_bytes'
  // whole-layer walk alone. Memory depends on (schedule, b, d, v) and on m only as far as
  // CostModel::memory_microbatches, so a repeat of those gets no further: the first of them looked at has
  // the least index (both passes take equal depths by ascending index), so the tie rule still holds.
  const auto candidates = enumerate_candidates(model);
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return candidates[a].depth > candidates[b].depth; });
  std::set<std::tuple<Schedule, int64_t, int64_t, int64_t, int64_t>> seen;
  Evaluated best;
  int64_t best_over = INT64_MAX;
  size_t best_idx = candidates.size();
  auto consider = [&](size_t idx) {
    const auto& c = candidates[idx];
    // A later candidate must be strictly closer; an earlier one may tie.
    const int64_t within = idx > best_idx ? best_over - 1 : best_over;
    const int64_t lb = model.static_bytes(c.schedule, 0, model.num_layers()) / c.depth +
                       model.constraints().reserve_bytes - model.memory_limit_bytes();
    if (lb > within) return;
    if (!seen.insert({c.schedule, c.microbatch_index, c.depth, CostModel::memory_microbatches(c), c.chunks}).second)
      return;
    const int64_t over = detail::least_overage_bytes(model, c, within);
    if (over == INT64_MAX || over > within) return;
    best_over = over;
    best_idx = idx;
  };
  constexpr size_t kDeepestFirst = 16;
  for (size_t k = 0; k < std::min(kDeepestFirst, order.size()); ++k) consider(order[k]);
  for (size_t idx = 0; idx < candidates.size(); ++idx) consider(idx);
  // Only the closest candidate's split is built.
  if (best_idx == candidates.size()) return best;
  const auto o = least_overage_split(model, candidates[best_idx], best_over);
  Split s;
  s.bounds = o.bounds;
  best = evaluate_split(model, candidates[best_idx], s);
  return best;
}

}  // namespace pd2bw::planner

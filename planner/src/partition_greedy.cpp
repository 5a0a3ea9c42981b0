// Greedy splits (each stage as long as a busy-time threshold allows): the DP's first upper bound.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "bisect.hpp"
#include "chunk_price.hpp"
#include "partition_internal.hpp"
#include "prepared.hpp"

namespace pd2bw::planner::detail {

namespace {

// A feasible split found greedily (each stage as long as allowed) with every stage's busy time <= t, or
// empty.
std::vector<int64_t> greedy_split(const CostModel& model, const detail::PreparedCandidate& pc, double t,
                                  int64_t static_cap) {
  const int64_t L = model.num_layers();
  const int64_t d = pc.candidate.depth;
  const auto& cp = model.compute_prefix(pc.candidate.microbatch_index);
  const double m = static_cast<double>(pc.candidate.microbatches);
  std::vector<int64_t> bounds{0};
  int64_t a = 0;
  for (int64_t i = 0; i < d; ++i) {
    const int64_t last = i == d - 1 ? L : L - (d - 1 - i);
    // The furthest end whose compute and static memory fit, then the furthest below it that fits in
    // full, by bisection (fitting is nearly monotone in the end; a greedy split only bounds from above).
    int64_t top = a;
    while (top < last && m * (cp[static_cast<size_t>(top + 1)] - cp[static_cast<size_t>(a)]) <= t &&
           model.static_bytes(pc.candidate.schedule, a, top + 1) <= static_cap)
      ++top;
    auto fits = [&](int64_t e) {
      const auto q = detail::quick_price(model, pc, i, a, e);
      return q.feasible && q.step_ms <= t;
    };
    int64_t pick = -1;
    if (i == d - 1) {
      if (top == L && fits(L)) pick = L;
    } else if (top > a && fits(a + 1)) {
      pick = detail::last_true(a + 1, top, fits);
    }
    if (pick < 0) return {};
    bounds.push_back(pick);
    a = pick;
  }
  return bounds;
}

}  // namespace

// step_objective of `bounds`, priced through pc.
double objective_of(const CostModel& model, const detail::PreparedCandidate& pc, const std::vector<int64_t>& bounds) {
  std::vector<StageCost> stages;
  for (int64_t i = 0; i < pc.candidate.depth; ++i)
    stages.push_back(detail::price_stage(model, pc, i, bounds[static_cast<size_t>(i)], bounds[static_cast<size_t>(i + 1)]));
  return step_objective(pc.candidate, stages);
}

// The greedy split (greedy_split) at the least busy-time threshold that has one, by bisection on that
// threshold, priced with the full objective, or with its busiest stage when `lanes_only`; infeasible when
// no threshold up to `known` has one.
Split greedy_of(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap, double known,
                bool lanes_only) {
  const auto& cp = model.compute_prefix(pc.candidate.microbatch_index);
  const double m = static_cast<double>(pc.candidate.microbatches);
  Split out;
  auto attempt = [&](double t) {
    auto split = greedy_split(model, pc, t, static_cap);
    if (split.empty()) return false;
    out.bounds = std::move(split);
    return true;
  };
  // Without a threshold every stage is as long as memory allows: when even that finds no split, no
  // threshold will (up to the rare stage that fits only when shorter), and the doublings are saved.
  if (!attempt(kInfinity)) return {};
  double lo = m * cp.back() / static_cast<double>(pc.candidate.depth);
  double hi = lo;
  for (int doublings = 0; !attempt(hi); hi *= 2.0)
    if (++doublings > 40 || hi > known) return {};
  for (int it = 0; it < 10 && hi - lo > 1e-3 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    (attempt(mid) ? hi : lo) = mid;
  }
  out.step_ms = lanes_only ? hi : objective_of(model, pc, out.bounds);
  return out;
}

// An upper bound on the optimum from greedy_of, never above `known` (the DP's work grows with the gap
// between its bound and the optimum, and a greedy run is cheap).
double greedy_bound(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap, double known,
                    bool lanes_only) {
  return std::min(known, greedy_of(model, pc, static_cap, known, lanes_only).step_ms);
}

}  // namespace pd2bw::planner::detail

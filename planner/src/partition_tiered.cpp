// Flush's tiered splits. A flush stage k <= d - m warms up with the whole step's forwards (w_k >= m - 1):
// it waits for one round trip below it, then runs its backwards, while a later stage alternates forwards
// and backwards in its steady phase and waits for two round trips (objective.hpp's part_k). Where m < d
// the objective (and the replay) then favours splits whose first d - m + 1 stages hold more than the
// later ones: on the BERT 3.8B block x 2,000 at d = 128, m = 64, stages in the ratio 1.3 replay 2.7%
// faster than equal compute. The greedy split (each stage as long as a busy-time threshold allows) never
// finds that shape, and where the dynamic program runs out of work the search keeps the split it started
// from: best_split takes the better objective of the two as its bound and its fallback, and the replay
// of a flush candidate whose program ran out tries both (replay.cpp).
#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "partition_internal.hpp"
#include "prepared.hpp"

namespace pd2bw::planner::detail {

namespace {

// The ratios tried: the best differs from profile to profile, and with whole layers the objective is
// jagged in the ratio, so a few spread ones (more gave the same plans on the sweep of the README).
constexpr std::array<double, 5> kTieredRatios = {1.15, 1.3, 1.45, 1.6, 1.8};

// The split whose stage k ends where the compute prefix is nearest the sum of weight_j over j <= k, as a
// share of the whole model's compute; every stage holds at least one layer.
// cp: compute prefix sums, L + 1 entries; weight: d entries > 0.
std::vector<int64_t> weighted_bounds(const std::vector<double>& cp, const std::vector<double>& weight) {
  const auto L = static_cast<int64_t>(cp.size()) - 1;
  const auto d = static_cast<int64_t>(weight.size());
  double total = 0.0;
  for (double w : weight) total += w;
  std::vector<int64_t> bounds{0};
  double cum = 0.0;
  auto lb = cp.begin();  // the targets grow: each one's first prefix >= it is at or past the last one's
  for (int64_t k = 0; k + 1 < d; ++k) {
    cum += weight[static_cast<size_t>(k)];
    const double target = cum / total * cp.back();
    auto last = lb;  // galloping: every prefix before lb is below the target, and *last (if any) is not
    for (std::ptrdiff_t step = 1; last != cp.end() && *last < target; step *= 2) {
      lb = last + 1;
      last = cp.end() - last > step ? last + step : cp.end();
    }
    lb = std::lower_bound(lb, last, target);
    auto e = std::min(static_cast<int64_t>(lb - cp.begin()), L);
    if (e > 0 && target - cp[static_cast<size_t>(e - 1)] < cp[static_cast<size_t>(e)] - target) --e;
    bounds.push_back(std::clamp(e, bounds.back() + 1, L - (d - 1 - k)));
  }
  bounds.push_back(L);
  return bounds;
}

}  // namespace

Split tiered_split(const CostModel& model, const PreparedCandidate& pc) {
  const Candidate& c = pc.candidate;
  const int64_t last_one_trip = c.depth - c.microbatches;  // the last stage whose warm-up covers the step
  Split best;
  if (c.schedule != Schedule::flush || c.chunks != 1 || last_one_trip < 0 || c.depth < 2 ||
      c.depth > model.num_layers())
    return best;
  const auto& cp = model.compute_prefix(c.microbatch_index);
  std::vector<double> weight(static_cast<size_t>(c.depth), 1.0);
  for (double r : kTieredRatios) {
    std::fill(weight.begin(), weight.begin() + last_one_trip + 1, r);
    auto bounds = weighted_bounds(cp, weight);
    const double step = objective_of(pc, bounds, best.step_ms);  // the ratios that lose stop early
    if (step < best.step_ms) {  // ties keep the smaller ratio
      best.bounds = std::move(bounds);
      best.step_ms = step;
    }
  }
  return best;
}

std::vector<Split> flush_stand_ins(const CostModel& model, const Candidate& c, GreedyMemo* memo) {
  std::vector<Split> out;
  if (c.schedule != Schedule::flush || c.chunks != 1) return out;
  const auto pc = prepare(model, c);
  const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  GreedyEntry entry(memo, c, static_cap);
  for (Split s : {entry.at_most(model, pc, kInfinity), entry.tiered(model, pc)})
    if (s.feasible()) out.push_back(std::move(s));
  return out;
}

}  // namespace pd2bw::planner::detail

// Lower bounds on a candidate's objective (step_objective; see step_bound.hpp), valid for every split.
// Write C for the whole model's fwd + bwd per microbatch, m for the microbatches per step and x_i for
// stage i's compute.
//
// Average: the objective is at least the largest stage busy time m (x + p2p) + allreduce + update, so
// at least the average one: m (C + the cheapest transfers the placement allows) plus the allreduces at
// the fastest level the replicas can span, over d. Flush adds the drain and refill above the slowest
// stage: the objective T is at least m x_k + x_0 + ... + x_{k-1} for every k, and d stages under that
// can hold at most T (1 - (1 - 1/m)^d) in all (by induction, x_0 + ... + x_{k-1} <= T (1 - (1 - 1/m)^k)),
// so T >= C / (1 - (1 - 1/m)^d). GPipe passes every layer once and one stage's (m - 1) more slots:
// T >= C + (m - 1) max_i x_i >= C (m + d - 1) / d.
//
// Capacity: at step time T a stage's compute c (fwd + bwd per microbatch) obeys m (c + p2p) + allreduce
// <= T, so c <= x = (T - allreduce) / m - p2p with the least p2p and allreduce any stage has. A stage
// that recomputes spends at least (1 + r) c, r the smallest redo share of a layer, so c <= x / (1 + r).
// A stage that keeps f microbatches without recomputing holds layers with sum(static + f * stash)
// <= device memory - reserve, so c <= that capacity times the largest (fwd + bwd) / (static + f * stash)
// of a layer. Whatever the stages choose, their capacities must add up to the whole model's compute;
// the least x at which they do bounds T (and for GPipe, T >= C + (m - 1) x as well).
#include "step_bound.hpp"

#include <algorithm>
#include <cmath>

#include "pd2bw/planner/partition.hpp"

namespace pd2bw::planner {

namespace {

// The fastest levels any stage boundary and any stage's replicas can use under c's placement: a
// boundary spans ranks [i w, (i + 2) w) when replicas are inner, adjacent ranks otherwise; the aligned
// group of stage 0 spans the least.
struct LinkLevels {
  int64_t boundary = 0, replicas = 0;
};

LinkLevels fastest_levels(const CostModel& model, const Candidate& c) {
  const bool rep_inner = c.placement == Placement::replicas_inner;
  LinkLevels l;
  l.boundary = rep_inner ? model.level_between(0, 2 * c.width - 1) : 0;
  l.replicas = model.level_between(0, rep_inner ? c.width - 1 : (c.width - 1) * c.depth);
  return l;
}

}  // namespace

StepLowerBound::StepLowerBound(const CostModel& model) : model_(model) {
  const auto& p = model.profile();
  const size_t n = p.layers.size();
  cap_bytes_ = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  for (size_t bi = 0; bi < p.microbatch_sizes.size(); ++bi) {
    double big = 0.0;
    int64_t small_out = INT64_MAX, small_in = INT64_MAX;
    for (size_t j = 0; j < n; ++j) {
      const auto& t = p.layers[j].per_microbatch[bi];
      big = std::max(big, t.fwd_ms + t.bwd_ms);
      if (j + 1 < n) small_out = std::min(small_out, t.output_bytes);
      if (j > 0) small_in = std::min(small_in, t.input_bytes);
    }
    max_layer_ms_.push_back(big);
    min_out_.push_back(n > 1 ? small_out : 0);
    min_in_.push_back(n > 1 ? small_in : 0);
  }
  for (Schedule s : {Schedule::two_bw, Schedule::flush, Schedule::gpipe})
    for (int64_t j = 0; j < model.num_layers(); ++j) {
      auto& top = max_layer_static_[static_cast<size_t>(s)];
      top = std::max(top, model.static_bytes(s, j, j + 1));
    }
  const int64_t dsize = schemas::dtype_bytes(p.model.dtype);
  for (const auto& l : p.layers) total_grad_bytes_ += l.param_bytes / dsize * 4;
  for (auto* v : {&capacity_vals_, &capacity_sums_})
    for (auto& per_b : *v) per_b.assign(p.microbatch_sizes.size(), std::vector<double>{0.0});
}

double StepLowerBound::clipped_prefix(bool two_versions, size_t bi, int64_t n, double low, double high) {
  auto& sums = capacity_sums_[two_versions ? 1 : 0][bi];
  auto& vals = capacity_vals_[two_versions ? 1 : 0][bi];
  while (static_cast<int64_t>(sums.size()) <= n) {
    vals.push_back(model_.plain_capacity_ms(two_versions ? Schedule::two_bw : Schedule::flush,
                                            static_cast<int64_t>(bi), static_cast<int64_t>(sums.size())));
    sums.push_back(sums.back() + (vals.back() < kInfinity ? vals.back() : 0.0));
  }
  // vals[f] does not grow with f: a leading run is clipped to high, a trailing run to low.
  const auto first = vals.begin() + 1, last = vals.begin() + 1 + n;
  const auto hi_end = std::partition_point(first, last, [&](double v) { return v >= high; }) - first;
  const auto lo_begin = std::partition_point(first, last, [&](double v) { return v > low; }) - first;
  return high * static_cast<double>(hi_end) +
         (sums[static_cast<size_t>(lo_begin)] - sums[static_cast<size_t>(hi_end)]) +
         low * static_cast<double>(n - lo_begin);
}

double StepLowerBound::capacity_sum(const Candidate& c, double x) {
  const auto bi = static_cast<size_t>(c.microbatch_index);
  const auto policy = model_.constraints().recompute;
  const double redo = x / (1.0 + model_.min_redo_share(c.microbatch_index));
  if (policy == RecomputePolicy::always) return static_cast<double>(c.depth) * redo;
  const double low = policy == RecomputePolicy::never ? 0.0 : redo;
  const bool two = c.schedule == Schedule::two_bw;
  auto one = [&](int64_t f) {
    return std::clamp(model_.plain_capacity_ms(c.schedule, c.microbatch_index, f), low, x);
  };
  const int64_t d = c.depth, m = c.microbatches;
  if (c.schedule == Schedule::gpipe) return static_cast<double>(d) * one(m);
  if (d < m) return clipped_prefix(two, bi, d, low, x);  // in-flight counts d, d - 1, ..., 1
  // d - m + 1 stages keep m microbatches, the rest m - 1, ..., 1.
  return clipped_prefix(two, bi, m - 1, low, x) + static_cast<double>(d - m + 1) * one(m);
}

double StepLowerBound::capacity_bound(const Candidate& c) {
  const double total = model_.compute_prefix(c.microbatch_index).back();
  const double d = static_cast<double>(c.depth);
  double lo = total / d;  // no stage holds more than x, so x >= total / d
  double hi = lo * (1.0 + model_.min_redo_share(c.microbatch_index));
  if (capacity_sum(c, hi) < total) {
    if (model_.constraints().recompute != RecomputePolicy::never) return 0.0;  // cannot happen
    for (int i = 0; i < 64 && capacity_sum(c, hi) < total; ++i) hi *= 2.0;
    if (capacity_sum(c, hi) < total) return kInfinity;  // memory caps the capacity below the model
  }
  for (int it = 0; it < 30 && hi - lo > 1e-6 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    (capacity_sum(c, mid) < total ? lo : hi) = mid;
  }
  const auto bi = static_cast<size_t>(c.microbatch_index);
  const LinkLevels lvl = fastest_levels(model_, c);
  const double p2p = c.depth > 1 ? 2.0 * model_.p2p_ms(std::min(min_out_[bi], min_in_[bi]), lvl.boundary) : 0.0;
  const double allreduce = model_.allreduce_ms(0, c.width, lvl.replicas);
  const double m = static_cast<double>(c.microbatches);
  const double lane = m * (lo + p2p) + allreduce;
  if (c.schedule == Schedule::gpipe) return std::max(lane, total + (m - 1.0) * lo);
  return lane;
}

double StepLowerBound::average_bound(const Candidate& c) const {
  const auto bi = static_cast<size_t>(c.microbatch_index);
  const double d = static_cast<double>(c.depth);
  const double m = static_cast<double>(c.microbatches);
  const double all = model_.compute_prefix(c.microbatch_index).back();
  const LinkLevels lvl = fastest_levels(model_, c);
  double p2p = 0.0;
  if (c.depth > 1)
    p2p = (d - 1.0) * 4.0 * model_.p2p_ms(min_out_[bi], lvl.boundary);  // both ways, on both sides
  double sum = m * (all + p2p) + model_.update_prefix().back();
  if (c.width > 1) sum += model_.allreduce_sum_floor(total_grad_bytes_, c.depth, c.width, lvl.replicas);
  double bound = std::max(sum / d, m * max_layer_ms_[bi]);
  if (c.schedule == Schedule::flush) bound = std::max(bound, all / (1.0 - std::pow(1.0 - 1.0 / m, d)));
  if (c.schedule == Schedule::gpipe) bound = std::max(bound, all * (m + d - 1.0) / d);
  return bound;
}

double StepLowerBound::operator()(const Candidate& c) {
  const int64_t total_static = model_.static_bytes(c.schedule, 0, model_.num_layers());
  if (max_layer_static_[static_cast<size_t>(c.schedule)] > cap_bytes_ || total_static > cap_bytes_ * c.depth)
    return kInfinity;
  // Scaled down so that rounding never lifts the bound above an exact cost.
  return std::max(average_bound(c), capacity_bound(c)) * (1.0 - 1e-9);
}

}  // namespace pd2bw::planner

// StepLowerBound::rules_out, the finer per-stage test of a candidate against a limit, and its whole-layer walks.
//
// Ruling out, with the links each stage's replicas really cross (the smallest boundary tensor over them):
// the capacity bound with every stage's own transfers and allreduce latency; and for flush, every stage
// k obeys m x_k + X_{<k} <= T (the cycle through it and the stages above)
// and, when its warm-up w_k = min(d - 1 - k, m) leaves m >= w_k + 2, also (m - w_k) x_k + X_{<k} +
// 2 X_{>k} <= T (its first and last microbatches' round trips below it; X the compute of the stages
// before or after), where stage k's own term counts its recompute once its stash cannot hold x_k (the
// capacity of step_bound.cpp). Both caps on x_k grow with X_{<k}, so taking each x_k as large as they
// allow reaches the furthest; T is feasible only if that reaches C. zb-h1 likewise, with its cycle
// bound's caps, and zb-h2 with its cycle's caps alone. In the whole-layer walks (zb-h1, zb-h2, flush's
// second walk, gpipe) a cap on stage k's time also caps its relaxed whole-layer time (Relaxed, its
// recompute where its own memory forces it): starting later lowers that time by at least the plain
// compute skipped, which is no less than what the cap loses ((m - n_k r) >= 1 - r), so the furthest end
// still grows with the start. And every candidate must pass lanes_reach (step_bound_lanes.cpp), which
// also covers the whole-layer memory test this file once made with the longest runs per stage.
// Flush's round trips count the recompute that memory and the lanes force: Y_{<k} + 2 Y_{>=k} = Y + Y_{>=k}
// >= busy + C - X_{<k}, busy = flush_least_busy at the limit (step_bound_flush.cpp, with the proof), in
// place of 2 C - X_{<k}; the caps still grow with X_{<k}, so the walks' argument stands.
#include "step_bound.hpp"

#include <algorithm>
#include <cmath>
#include <memory>
#include <tuple>

#include "bisect.hpp"
#include "objective.hpp"
#include "pd2bw/planner/partition.hpp"
#include "step_bound_links.hpp"

namespace pd2bw::planner {

using detail::fastest_levels;
using detail::LinkLevels;

bool StepLowerBound::rules_out(const Candidate& c, double limit) const {
  if (c.depth < 2 || !(limit < kInfinity) || c.chunks > 1) return false;
  const double all = model_.compute_prefix(c.microbatch_index).back();
  const double m = static_cast<double>(c.microbatches);
  const double share = model_.min_redo_share(c.microbatch_index);
  const auto policy = model_.constraints().recompute;
  const auto links = stage_links(c);
  std::vector<double> plain(static_cast<size_t>(c.depth));
  for (int64_t k = 0; k < c.depth; ++k)
    plain[static_cast<size_t>(k)] = model_.plain_capacity_ms(c.schedule, c.microbatch_index, CostModel::in_flight(c, k));
  // The most fwd + bwd stage k can hold when its time (with recompute where its stash does not fit)
  // may be at most `time`; non-decreasing in `time`.
  auto hold = [&](int64_t k, double time) {
    if (time < 0.0) return -1.0;
    if (policy == RecomputePolicy::always) return time / (1.0 + share);
    const double p = plain[static_cast<size_t>(k)];
    if (policy == RecomputePolicy::never || time < p * (1.0 + share)) return std::min(time, p);
    return time / (1.0 + share);
  };
  // Busy time: stage k holds hold(k, (t - its allreduce latency) / m - its links).
  auto lanes_hold = [&](double t) {
    double sum = 0.0;
    for (int64_t k = 0; k < c.depth && sum < all; ++k) {
      const auto& l = links[static_cast<size_t>(k)];
      const double x = hold(k, (t - l.latency) / m - l.lane);
      if (x < 0.0) return false;
      sum += x;
    }
    return sum >= all;
  };
  // Flush: every cycle may turn at stage 0, whose allreduce and update cover layer 0 at least. Asked for
  // m > 1 only: with one microbatch it ruled out replicated splits' exact optimum (test_step_bound).
  const LinkLevels lvl = fastest_levels(model_, c);
  const double h0 = model_.allreduce_ms(first_grad_bytes_, c.width, lvl.replicas) + model_.update_prefix()[1];
  const double d = static_cast<double>(c.depth);
  std::vector<double> ins_after(static_cast<size_t>(c.depth) + 1, 0.0);  // sum of 2 in_fast over stages > k
  for (int64_t k = c.depth - 1; k >= 0; --k)
    ins_after[static_cast<size_t>(k)] = ins_after[static_cast<size_t>(k + 1)] + 2.0 * links[static_cast<size_t>(k)].in_fast;
  const double at = limit * (1.0 + 1e-9);  // rounding must not rule out a split at the limit itself
  const double busy = flush_least_busy(c, at);  // at least sum_j Y_j of any split with lanes within t
  auto flush_reaches = [&](double t0) {
    const double t = t0 - h0;
    double prefix = 0.0, ins_before = 0.0;
    for (int64_t k = 0; k < c.depth; ++k) {
      const double kd = static_cast<double>(k);
      const auto& l = links[static_cast<size_t>(k)];
      double x = hold(k, (t - prefix - ins_before) / m - l.lane);
      const double w = std::min(d - 1.0 - kd, m);
      if (m >= w + 2.0) {
        // (m - w) time_k - 2 x_k <= t - Y - C + prefix - transfers, with time_k >= x_k and recompute past
        // plain, Y = sum_j Y_j >= busy (Y_{<k} + 2 Y_{>=k} = Y + Y_{>=k} >= busy + C - prefix)
        const double slack = t - busy - all + prefix -
                             (2.0 * l.in_fast + 2.0 * ins_after[static_cast<size_t>(k + 1)] + (m - 2.0 - w) * l.lane +
                              ins_before);
        if (slack < 0.0) return false;
        if (m > w + 2.0) x = std::min(x, hold(k, slack / (m - w - 2.0)));
      }
      // No room left at this stage's start: stage 0 starts where any split's does, so nothing fits; a later
      // stage may start past the real split's (the walk reaches at least as far), so it only stays put.
      if (x < 0.0) {
        if (k == 0) return false;
        x = 0.0;
      }
      prefix += x;
      ins_before += 2.0 * l.in_fast;
      if (prefix >= all) return true;
    }
    return false;
  };
  // zb-h1: the cycle through stage 0 and each stage k (zb_cycle_bound), with each stage's own links and
  // whole layers: stage k starting at layer a holds at most its cap at X_{<k} = the fwd + bwd of layers
  // [0, a), so it ends at the furthest layer within it. And flush's round trips with Y = fwd + bwd less
  // W (exact per layer): when m >= w_k + 2, (m - 2 - w_k) Y_k <= T - h_0 - 2 Y_all + Y_{<k} - transfers.
  // Both caps on a stage's end only grow with its start, so each stage taking the furthest end reaches
  // the furthest; T is feasible only if that reaches the last layer.
  // Flush the same with no W's apart (r = E = 0, no trailing W's, Y = fwd + bwd), on whole layers.
  const bool split = c.schedule != Schedule::flush;
  const double r = split ? weight_share_[static_cast<size_t>(c.microbatch_index)] : 0.0;
  const double excess = split ? weight_excess_ms_[static_cast<size_t>(c.microbatch_index)] : 0.0;
  const auto& cp = model_.compute_prefix(c.microbatch_index);
  const auto& wp = model_.weight_prefix(c.microbatch_index);
  auto furthest = [&](size_t a, double most, auto&& value) {  // the last e >= a with value(e) <= most
    return detail::last_true(a, cp.size() - 1, [&](size_t e) { return value(e) <= most; });
  };
  // The furthest end of stage k from layer a whose relaxed time (whole layers in the stage's own memory,
  // Relaxed::time) is within `budget`: each cap below bounds a stage's time, not only its compute.
  const Relaxed relaxed(*this, c);
  auto whole = [&](int64_t k, size_t a, double budget) {
    const double most = budget * (1.0 + 1e-12);
    return static_cast<size_t>(gallop(static_cast<int64_t>(a), model_.num_layers(), [&](int64_t e) {
      return relaxed.time(k, static_cast<int64_t>(a), e) <= most;
    }));
  };
  auto zb_reaches = [&](double t0) {
    if (!(r < 1.0)) return true;
    auto y = [&](size_t e) { return split ? cp[e] - wp[e] : cp[e]; };
    const double t = t0 - h0, all_y = y(cp.size() - 1);
    double ins_before = 0.0;
    size_t a = 0;
    for (int64_t k = 0; k < c.depth; ++k) {
      const auto& l = links[static_cast<size_t>(k)];
      const double after = split ? zb_trailing(c, k) : 0.0;
      const double budget = (t + (m + 1.0) * excess - (1.0 - r) * cp[a] - ins_before - m * l.lane) / (m - after * r);
      const double x = hold(k, budget);
      if (x < 0.0 && k == 0) return false;  // as in flush_reaches: only a later stage may start past the real one
      size_t e = x < 0.0 ? a
                         : std::min(furthest(a, cp[a] + x * (1.0 + 1e-12), [&](size_t j) { return cp[j]; }),
                                    whole(k, a, budget));
      const double w = std::min(d - 1.0 - static_cast<double>(k), m);
      if (c.schedule != Schedule::zb_h2 && m >= w + 2.0) {  // zb-h2's longer warm-up bounds no round trip
        // flush: 2 Y_all - Y_{<k} >= busy + C - X_{<k}, as in flush_reaches
        const double slack = t - (split ? 2.0 * all_y : busy + all_y) + y(a) -
                             (2.0 * l.in_fast + 2.0 * ins_after[static_cast<size_t>(k + 1)] + (m - 2.0 - w) * l.lane +
                              ins_before);
        if (slack < -1e-12 * t) return false;
        if (m > w + 2.0) e = std::min(e, furthest(a, y(a) + std::max(0.0, slack) / (m - w - 2.0) * (1.0 + 1e-12) + 1e-12 * t, y));
      }
      a = e;  // e == a is allowed: an empty stage only relaxes (the real split's next start is no further)
      ins_before += 2.0 * l.in_fast;
      if (a + 1 >= cp.size()) return true;
    }
    return false;
  };
  // GPipe, on whole layers: T >= h_0 + sum_j u_j + (m - 1)(cf_k + cb_k) for every stage k, with the u's
  // at least all compute and each input twice, and cf_k + cb_k at least stage k's time and its input
  // twice; and its lane. Each stage's cap on its end grows with its start, so the furthest ends decide.
  auto gpipe_reaches = [&](double t0) {
    const double slot = (t0 - h0 - cp.back() - ins_after[0]) / (m - 1.0);
    size_t a = 0;
    for (int64_t k = 0; k < c.depth; ++k) {
      const auto& l = links[static_cast<size_t>(k)];
      const double budget = std::min(slot - 2.0 * l.in_fast, (t0 - l.latency) / m - l.lane);
      const double x = hold(k, budget);
      if (x < 0.0) return false;
      const size_t e = std::min(furthest(a, cp[a] + x * (1.0 + 1e-12), [&](size_t j) { return cp[j]; }), whole(k, a, budget));
      a = e;
      if (a + 1 >= cp.size()) return true;
    }
    return false;
  };
  return !lanes_hold(at) || !lanes_reach(c, at) || flush_redo_rules_out(c, at, busy) ||
         (c.schedule == Schedule::flush && c.microbatches > 1 && !flush_reaches(at)) ||
         (((c.schedule == Schedule::flush && c.microbatches > 1) || c.schedule == Schedule::zb_h1 ||
           c.schedule == Schedule::zb_h2) &&
          !zb_reaches(at)) ||
         (c.schedule == Schedule::gpipe && c.microbatches > 1 && !gpipe_reaches(at));
}

}  // namespace pd2bw::planner

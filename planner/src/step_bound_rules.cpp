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
// bound's caps, and zb-h2 with its cycle's caps alone.
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
  auto flush_reaches = [&](double t0) {
    const double t = t0 - h0;
    double prefix = 0.0, ins_before = 0.0;
    for (int64_t k = 0; k < c.depth; ++k) {
      const double kd = static_cast<double>(k);
      const auto& l = links[static_cast<size_t>(k)];
      double x = hold(k, (t - prefix - ins_before) / m - l.lane);
      const double w = std::min(d - 1.0 - kd, m);
      if (m >= w + 2.0) {
        // (m - w) time_k - 2 x_k <= t - 2 C + prefix - transfers, with time_k >= x_k and recompute past plain
        const double slack = t - 2.0 * all + prefix -
                             (2.0 * l.in_fast + 2.0 * ins_after[static_cast<size_t>(k + 1)] + (m - 2.0 - w) * l.lane +
                              ins_before);
        if (slack < 0.0) return false;
        if (m > w + 2.0) x = std::min(x, hold(k, slack / (m - w - 2.0)));
      }
      if (x < 0.0) return false;
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
  auto zb_reaches = [&](double t0) {
    if (!(r < 1.0)) return true;
    auto y = [&](size_t e) { return split ? cp[e] - wp[e] : cp[e]; };
    const double t = t0 - h0, all_y = y(cp.size() - 1);
    double ins_before = 0.0;
    size_t a = 0;
    for (int64_t k = 0; k < c.depth; ++k) {
      const auto& l = links[static_cast<size_t>(k)];
      const double after = split ? zb_trailing(c, k) : 0.0;
      const double x = hold(k, (t + (m + 1.0) * excess - (1.0 - r) * cp[a] - ins_before - m * l.lane) / (m - after * r));
      if (x < 0.0) return false;
      size_t e = furthest(a, cp[a] + x * (1.0 + 1e-12), [&](size_t j) { return cp[j]; });
      const double w = std::min(d - 1.0 - static_cast<double>(k), m);
      if (c.schedule != Schedule::zb_h2 && m >= w + 2.0) {  // zb-h2's longer warm-up bounds no round trip
        const double slack = t - 2.0 * all_y + y(a) -
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
      const double x = hold(k, std::min(slot - 2.0 * l.in_fast, (t0 - l.latency) / m - l.lane));
      if (x < 0.0) return false;
      const size_t e = furthest(a, cp[a] + x * (1.0 + 1e-12), [&](size_t j) { return cp[j]; });
      a = e;
      if (a + 1 >= cp.size()) return true;
    }
    return false;
  };
  const double t = limit * (1.0 + 1e-9);  // rounding must not rule out a split at the limit itself
  return too_few_layers(c, t / m) || !lanes_hold(t) || (c.schedule == Schedule::flush && c.microbatches > 1 && !flush_reaches(t)) ||
         (((c.schedule == Schedule::flush && c.microbatches > 1) || c.schedule == Schedule::zb_h1 ||
           c.schedule == Schedule::zb_h2) &&
          !zb_reaches(t)) ||
         (c.schedule == Schedule::gpipe && c.microbatches > 1 && !gpipe_reaches(t));
}

// Whole layers: stage i holds a run of layers whose fwd + bwd, plus the redo where its in-flight stashes
// do not fit beside the run's static bytes, is at most `budget` (ms per microbatch; its lane is at most
// the limit). Stage 0's run starts at layer 0 and stage d - 1's ends at the last layer; every other run
// lies strictly between them. So stage 0 holds at most the longest such prefix, stage d - 1 the longest
// such suffix, and an inner stage with f stashes at most the longest inner run that can: if those
// lengths add up to fewer than L layers, no split fits the budget. An inner run of length l can keep f
// stashes when some inner run of that length either recomputes within the budget or fits f stashes
// plainly within it; that most f falls as l grows (a longer run contains a shorter one). Only lengths
// up to kMaxRun are tried: past them the test gives up (returns false).
bool StepLowerBound::too_few_layers(const Candidate& c, double budget) const {
  constexpr int64_t kMaxRun = 64;
  const int64_t layers = model_.num_layers();
  if (c.depth < 3 || layers > kMaxRun * c.depth) return false;
  const auto& cp = model_.compute_prefix(c.microbatch_index);
  const auto& rp = model_.redo_prefix(c.microbatch_index);
  const auto& sp = model_.stash_prefix(c.microbatch_index);
  const auto policy = model_.constraints().recompute;
  constexpr int64_t kAny = INT64_MAX;  // a run that recomputes within the budget keeps any number
  // The most stashes layers [a, e) can keep within the budget; -1 when none.
  auto most_stashes = [&](int64_t a, int64_t e) -> int64_t {
    const auto b = static_cast<size_t>(a), x = static_cast<size_t>(e);
    const double plain = cp[x] - cp[b];
    if (policy != RecomputePolicy::never && plain + rp[x] - rp[b] <= budget) return kAny;
    if (policy == RecomputePolicy::always || plain > budget) return -1;
    const int64_t room = cap_bytes_ - model_.static_bytes(c.schedule, a, e);
    if (room < 0) return -1;
    const int64_t stash = sp[x] - sp[b];
    return stash > 0 ? room / stash : kAny;
  };
  auto stashes_at = [&](int64_t i) { return CostModel::in_flight(c, i); };
  // The longest length l <= kMaxRun for which keeps(l) holds (it holds for all shorter ones or none);
  // -1 when it still holds at kMaxRun (the test gives up).
  auto longest = [&](auto&& keeps) -> int64_t {
    for (int64_t len = 1; len <= std::min(kMaxRun, layers); ++len)
      if (!keeps(len)) return len - 1;
    return layers <= kMaxRun ? layers : -1;
  };
  const int64_t first = longest([&](int64_t len) { return most_stashes(0, len) >= stashes_at(0); });
  const int64_t last =
      longest([&](int64_t len) { return most_stashes(layers - len, layers) >= stashes_at(c.depth - 1); });
  // inner[l - 1]: the most stashes some inner run of length l can keep (>= 1).
  std::vector<int64_t> inner;
  const int64_t inner_runs = longest([&](int64_t len) {
    int64_t most = -1;
    for (int64_t a = 1; a + len <= layers - 1; ++a) most = std::max(most, most_stashes(a, a + len));
    if (most < 1) return false;
    inner.push_back(most);
    return true;
  });
  if (first < 0 || last < 0 || inner_runs < 0) return false;
  int64_t held = first + last;
  for (int64_t i = 1; i + 1 < c.depth && held < layers; ++i) {
    const int64_t f = stashes_at(i);
    int64_t len = 0;
    while (len < static_cast<int64_t>(inner.size()) && inner[static_cast<size_t>(len)] >= f) ++len;
    held += len;
  }
  return held < layers;
}

}  // namespace pd2bw::planner

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
// >= busy + C - X_{<k}, busy = least_busy at the limit (step_bound_flush.cpp, with the proof), in
// place of 2 C - X_{<k}; the caps still grow with X_{<k}, so the walks' argument stands. GPipe's fill and
// drain pass every stage's compute with its recompute once: busy in place of C. busy falls as the limit
// grows, so each cap still grows with it.
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
  Probe p(*this, c);
  return rules_out(p, limit);
}

bool StepLowerBound::rules_out(const Candidate& c, double limit, RuleBracket& memo) const {
  if (limit <= memo.out_to) return true;
  if (limit >= memo.in_from) return false;
  const bool out = rules_out(c, limit);
  memo.record(limit, out);
  return out;
}

void StepLowerBound::prepare_rules(Probe& p) const {
  const Candidate& c = p.c;
  const auto d = static_cast<size_t>(c.depth);
  p.plain.resize(d);
  for (size_t k = 0; k < d; ++k)
    p.plain[k] = model_.plain_capacity_ms(c.schedule, c.microbatch_index, CostModel::in_flight(c, static_cast<int64_t>(k)));
  p.ins_after.assign(d + 1, 0.0);  // sum of 2 in_fast over stages > k
  const std::vector<StageLinks>& links = p.links();
  for (size_t k = d; k-- > 0;) p.ins_after[k] = p.ins_after[k + 1] + 2.0 * links[k].in_fast;
  const LinkLevels lvl = fastest_levels(model_, c);
  p.h0 = model_.allreduce_ms(first_grad_bytes_, c.width, lvl.replicas) + model_.update_prefix()[1];
  // least_busy's W(f_j) per stage, when it needs them (flush or gpipe under auto) and every stage stashes.
  if (!counts_busy(c.schedule) || model_.constraints().recompute != RecomputePolicy::auto_) return;
  std::vector<int64_t> f(d);
  for (size_t j = 0; j < d; ++j) f[j] = CostModel::in_flight(c, static_cast<int64_t>(j));
  if (*std::min_element(f.begin(), f.end()) < 1) return;  // a stage with no stash: not flush's shape
  plain_runs(c.schedule, static_cast<size_t>(c.microbatch_index), f, p.runs);
}

// One candidate's tests at one limit: what every walk reads, built once.
class StepLowerBound::RuleWalks {
 public:
  RuleWalks(const StepLowerBound& bound, Probe& p)
      : p_(p),
        c_(p.c),
        links_(p.links()),
        plain_(p.plain),
        ins_after_(p.ins_after),
        cp_(bound.model_.compute_prefix(p.c.microbatch_index)),
        wp_(bound.model_.weight_prefix(p.c.microbatch_index)),
        relaxed_(p.relaxed()),
        model_(bound.model_),
        rp_(bound.model_.redo_prefix(p.c.microbatch_index)) {
    all_ = cp_.back();
    m_ = static_cast<double>(c_.microbatches);
    d_ = static_cast<double>(c_.depth);
    share_ = model_.min_redo_share(c_.microbatch_index);
    policy_ = model_.constraints().recompute;
    h0_ = p.h0;
    split_ = c_.schedule != Schedule::flush;
    const auto bi = static_cast<size_t>(c_.microbatch_index);
    r_ = split_ ? bound.weight_share_[bi] : 0.0;
    bwd_share_ = bound.bwd_share_[bi];
    excess_ = split_ ? bound.weight_excess_ms_[bi] : 0.0;
    cp_sorted_ = bound.cp_sorted_[bi] != 0;
    y_sorted_ = split_ ? bound.y_sorted_[bi] != 0 : cp_sorted_;
    L_ = model_.num_layers();
  }

  double busy = 0.0;  // at least sum_j Y_j of any split with an objective within t (set by rules_out)

  // Busy time: stage k holds hold(k, (t - its allreduce latency) / m - its links).
  bool lanes_hold(double t) const {
    double sum = 0.0;
    for (int64_t k = 0; k < c_.depth && sum < all_; ++k) {
      const auto& l = links_[static_cast<size_t>(k)];
      const double x = hold(k, (t - l.latency) / m_ - l.lane);
      if (x < 0.0) return false;
      sum += x;
    }
    return sum >= all_;
  }

  // Flush: every cycle may turn at stage 0, whose allreduce and update cover layer 0 at least. Asked for
  // m > 1 only: with one microbatch it ruled out replicated splits' exact optimum (test_step_bound).
  bool flush_reaches(double t0) const {
    const double t = t0 - h0_, one_trip = one_trip_time(t);
    double prefix = 0.0, ins_before = 0.0;
    for (int64_t k = 0; k < c_.depth; ++k) {
      const double kd = static_cast<double>(k);
      const auto& l = links_[static_cast<size_t>(k)];
      double x = hold(k, (t - prefix - ins_before) / m_ - l.lane);
      const double w = std::min(d_ - 1.0 - kd, m_);
      if (m_ >= w + 2.0) {
        // (m - w) time_k - 2 x_k <= t - Y - C + prefix - transfers, with time_k >= x_k and recompute past
        // plain, Y = sum_j Y_j >= busy (Y_{<k} + 2 Y_{>=k} = Y + Y_{>=k} >= busy + C - prefix)
        const double slack = t - busy - all_ + prefix -
                             (2.0 * l.in_fast + 2.0 * ins_after_[static_cast<size_t>(k + 1)] + (m_ - 2.0 - w) * l.lane +
                              ins_before);
        if (slack < 0.0) return false;
        if (m_ > w + 2.0) x = std::min(x, hold(k, slack / (m_ - w - 2.0)));
      } else if (bwd_share_ > 0.0) {
        const double y = hold(k, one_trip);
        if (y < 0.0) return false;  // wherever the stage starts
        x = std::min(x, y);
      }
      // No room left at this stage's start: stage 0 starts where any split's does, so nothing fits; a later
      // stage may start past the real split's (the walk reaches at least as far), so it only stays put.
      if (x < 0.0) {
        if (k == 0) return false;
        x = 0.0;
      }
      prefix += x;
      ins_before += 2.0 * l.in_fast;
      if (prefix >= all_) return true;
    }
    return false;
  }

  // zb-h1: the cycle through stage 0 and each stage k (zb_cycle_bound), with each stage's own links and
  // whole layers: stage k starting at layer a holds at most its cap at X_{<k} = the fwd + bwd of layers
  // [0, a), so it ends at the furthest layer within it. And flush's round trips with Y = fwd + bwd less
  // W (exact per layer): when m >= w_k + 2, (m - 2 - w_k) Y_k <= T - h_0 - 2 Y_all + Y_{<k} - transfers.
  // Both caps on a stage's end only grow with its start, so each stage taking the furthest end reaches
  // the furthest; T is feasible only if that reaches the last layer.
  // Flush the same with no W's apart (r = E = 0, no trailing W's, Y = fwd + bwd), on whole layers.
  bool zb_reaches(double t0) const {
    if (!(r_ < 1.0)) return true;
    auto y = [&](size_t e) { return split_ ? cp_[e] - wp_[e] : cp_[e]; };
    const double t = t0 - h0_, all_y = y(cp_.size() - 1), one_trip = one_trip_time(t);
    // Each stage's end lies between the ends of the nearest walks below and above t0 (Probe): the
    // searches below look between them only, and find the same ends.
    auto& walks = p_.zb;
    const bool below = walks.has_short && walks.short_at <= t0, above = walks.has_reach && t0 <= walks.reach_at;
    std::vector<int64_t>& ends = walks.ends;
    ends.assign(static_cast<size_t>(c_.depth), L_);
    double ins_before = 0.0;
    size_t a = 0;
    int64_t held = 1, k = 0;
    // Remembers this walk for the next ones (stages from `k` on hold the last start).
    auto done = [&](bool reached) {
      for (int64_t j = k; j < c_.depth; ++j) ends[static_cast<size_t>(j)] = reached ? L_ : static_cast<int64_t>(a);
      if (walks.nearer(reached, t0)) walks.remember(reached, t0);
      return reached;
    };
    for (; k < c_.depth; ++k) {
      const auto uk = static_cast<size_t>(k);
      const auto& l = links_[uk];
      const size_t lo = below ? std::max(a, static_cast<size_t>(walks.short_ends[uk])) : a;
      const size_t hi = above ? std::max(lo, static_cast<size_t>(walks.reach_ends[uk])) : static_cast<size_t>(L_);
      const double after = split_ ? zb_trailing(c_, k) : 0.0;
      const double budget =
          (t + (m_ + 1.0) * excess_ - (1.0 - r_) * cp_[a] - ins_before - m_ * l.lane) / (m_ - after * r_);
      const double x = hold(k, budget);
      if (x < 0.0 && k == 0) return done(false);  // as in flush_reaches: only a later stage may start past the real one
      size_t e = x < 0.0 ? a : capped(k, a, x, budget, held, lo, hi);
      const double w = std::min(d_ - 1.0 - static_cast<double>(k), m_);
      if (c_.schedule != Schedule::zb_h2 && m_ >= w + 2.0) {  // zb-h2's longer warm-up bounds no round trip
        // flush: 2 Y_all - Y_{<k} >= busy + C - X_{<k}, as in flush_reaches
        const double slack = t - (split_ ? 2.0 * all_y : busy + all_y) + y(a) -
                             (2.0 * l.in_fast + 2.0 * ins_after_[static_cast<size_t>(k + 1)] + (m_ - 2.0 - w) * l.lane +
                              ins_before);
        if (slack < -1e-12 * t) return done(false);
        if (m_ > w + 2.0)
          e = furthest(y_sorted_ ? std::max(a, std::min(lo, e)) : a, e, y_sorted_,
                       y(a) + std::max(0.0, slack) / (m_ - w - 2.0) * (1.0 + 1e-12) + 1e-12 * t, y);
      }
      if (!split_ && bwd_share_ > 0.0 && !(m_ >= w + 2.0)) {  // flush: flush_reaches' cap, on whole layers
        const double x2 = hold(k, one_trip);
        if (x2 < 0.0) return done(false);
        e = std::min(e, capped(k, a, x2, one_trip, held, lo, std::max(lo, e)));
      }
      if (!split_ && m_ > 1.0 && k + 1 < c_.depth) e = own_cycle_end(k, a, e, t0, w);
      held = std::max<int64_t>(1, static_cast<int64_t>(e - a));
      a = e;  // e == a is allowed: an empty stage only relaxes (the real split's next start is no further)
      ends[uk] = static_cast<int64_t>(a);
      ins_before += 2.0 * l.in_fast;
      if (a + 1 >= cp_.size()) {
        ++k;
        return done(true);
      }
    }
    return done(false);
  }

  // Flush stage k's own cycles, with its own allreduce and update h_k (the objective is at least h_k + P_k):
  // P_k is at least its one round trip's U_{>=k} + (m - 1) max(cf_k, cb_k) (warm-up w >= m - 1), or its
  // two round trips' 2 U_{>=k} + (m - 2 - w) t_k; U_{>=k} (the u's from stage k on) is at least the busy
  // time less the most the stages before can take (the fwd + bwd and every redo of [0, a)), and at least
  // the stage's own time (Relaxed::time, with the recompute its memory forces) and the plain compute
  // after it; max(cf_k, cb_k) is at least half that time and at least the backward slot: the least
  // backward share of the stage's fwd + bwd plus its recompute (the backward runs it). Each term grows with the
  // end and falls as the start grows, so the furthest end within t0 only grows with the start, as the
  // walk needs. Returns the furthest end in [a, e] (a itself when even one layer does not fit).
  size_t own_cycle_end(int64_t k, size_t a, size_t e, double t0, double w) const {
    const int64_t level = links_[static_cast<size_t>(k)].ar_level;
    const CostModel::AllreduceAt allreduce =
        level >= 0 ? model_.allreduce_at(c_.width, level) : CostModel::AllreduceAt{};
    const auto& pp = model_.param_prefix();
    const auto& up = model_.update_prefix();
    const auto statics = model_.static_factors(c_.schedule);
    const double before = busy - cp_[a] - rp_[a];
    const auto start = static_cast<int64_t>(a);
    auto fits = [&](int64_t x) {
      if (x == start) return true;
      const auto ux = static_cast<size_t>(x);
      const double y = relaxed_.time(k, start, x);
      if (!(y < kInfinity)) return false;
      const double h = (level >= 0 ? allreduce(statics.grads(pp[ux] - pp[a])) : 0.0) + (up[ux] - up[a]);
      const double after = std::max(before, y + all_ - cp_[ux]);
      // max(cf_k, cb_k): at least half the stage's time, and at least its backward slot, which runs the
      // least backward share of its fwd + bwd and all of its recompute (y less that fwd + bwd).
      const double fwd_bwd = cp_[ux] - cp_[a], slot = std::max(0.5 * y, bwd_share_ * fwd_bwd + (y - fwd_bwd));
      const double cycle = m_ >= w + 2.0 ? 2.0 * after + (m_ - 2.0 - w) * y : after + (m_ - 1.0) * slot;
      return h + cycle <= t0 * (1.0 + 1e-12);
    };
    if (fits(static_cast<int64_t>(e))) return e;  // mostly: the other caps bind first
    return static_cast<size_t>(detail::gallop(start, static_cast<int64_t>(e), fits));
  }

  // GPipe, on whole layers: T >= h_0 + sum_j u_j + (m - 1)(cf_k + cb_k) for every stage k, with the u's
  // at least all compute with the recompute that memory forces (busy: every stage keeps m stashes) and
  // each input twice, and cf_k + cb_k at least stage k's time and its input twice; and its lane. Each
  // stage's cap on its end grows with its start, so the furthest ends decide.
  bool gpipe_reaches(double t0) const {
    const double slot = (t0 - h0_ - busy - ins_after_[0]) / (m_ - 1.0);
    size_t a = 0;
    int64_t held = 1;
    for (int64_t k = 0; k < c_.depth; ++k) {
      const auto& l = links_[static_cast<size_t>(k)];
      const double budget = std::min(slot - 2.0 * l.in_fast, (t0 - l.latency) / m_ - l.lane);
      const double x = hold(k, budget);
      if (x < 0.0) return false;
      const size_t e = capped(k, a, x, budget, held, a, static_cast<size_t>(L_));
      held = std::max<int64_t>(1, static_cast<int64_t>(e - a));
      a = e;
      if (a + 1 >= cp_.size()) return true;
    }
    return false;
  }

 private:
  // Flush, a stage k whose warm-up covers m - 1 forwards (w_k >= m - 1: one round trip below it, r = 0 in
  // objective.hpp's part_k; never the last stage, whose w is 0 < m - 1): the most time per microbatch
  // (compute with recompute) it may take at t0 = h_0 + t. Its part with i = 0 gives
  // T - h_0 >= U + (m - 1) max(cf_k, cb_k), U = sum_j u_j >= busy + every input twice, and cb_k >= b_k >=
  // bwd_share time_k (a recompute only raises b's share). It holds wherever the stage starts; negative when
  // no split reaches t0. Infinite (no cap) where it does not apply: one microbatch, or no backward share.
  double one_trip_time(double t) const {
    return m_ > 1.0 && bwd_share_ > 0.0 ? (t - busy - ins_after_[0]) / ((m_ - 1.0) * bwd_share_) : kInfinity;
  }

  // The most fwd + bwd stage k can hold when its time (with recompute where its stash does not fit)
  // may be at most `time`; non-decreasing in `time`.
  double hold(int64_t k, double time) const {
    if (time < 0.0) return -1.0;
    if (policy_ == RecomputePolicy::always) return time / (1.0 + share_);
    const double most = plain_[static_cast<size_t>(k)];
    if (policy_ == RecomputePolicy::never || time < most * (1.0 + share_)) return std::min(time, most);
    return time / (1.0 + share_);
  }

  // The last e in [a, cap] with value(e) <= most when that holds on a prefix of e (value non-decreasing
  // as doubles, `sorted`): a gallop from a, O(log(e - a)); else min(cap, the bisection's e over [a, L]).
  template <class Value>
  size_t furthest(size_t a, size_t cap, bool sorted, double most, Value&& value) const {
    auto ok = [&](size_t e) { return value(e) <= most; };
    if (sorted)
      return static_cast<size_t>(detail::gallop(static_cast<int64_t>(a), static_cast<int64_t>(cap),
                                                 [&](int64_t e) { return ok(static_cast<size_t>(e)); }));
    return std::min(cap, detail::last_true(a, cp_.size() - 1, ok));
  }

  // The furthest end of stage k from layer a whose compute is within x and whose relaxed time (whole layers
  // in the stage's own memory, Relaxed::time) is within `budget`: each cap below bounds a stage's time, not
  // only its compute. Both tests hold on a prefix of ends (the relaxed time is non-decreasing in the end),
  // so with a sorted prefix the time is tested within the compute's end only: the same end, fewer probes.
  // `held`: the layers of the stage before, where the search starts (the same end from any start).
  // `lo` and `hi` (a <= lo <= hi <= L): the end is known to lie between them (zb_reaches' nearest walks),
  // so both searches start at lo and stop at hi, with the same end (gpipe: a and L).
  size_t capped(int64_t k, size_t a, double x, double budget, int64_t held, size_t lo, size_t hi) const {
    const double most = budget * (1.0 + 1e-12), top = cp_[a] + x * (1.0 + 1e-12);
    const auto start = static_cast<int64_t>(a);
    auto fits = [&](int64_t e) { return relaxed_.time(k, start, e) <= most; };
    if (!cp_sorted_)
      return std::min(furthest(a, cp_.size() - 1, false, top, [&](size_t j) { return cp_[j]; }),
                      static_cast<size_t>(detail::gallop(start, L_, fits)));
    const auto from = static_cast<int64_t>(lo), to = static_cast<int64_t>(hi);
    const int64_t by_compute = detail::gallop(from, to, [&](int64_t e) { return cp_[static_cast<size_t>(e)] <= top; });
    return static_cast<size_t>(detail::gallop_from(from, by_compute, std::min(by_compute, start + held), fits));
  }

  Probe& p_;
  const Candidate& c_;
  const std::vector<StageLinks>& links_;
  const std::vector<double>&plain_, &ins_after_, &cp_, &wp_;
  const Relaxed& relaxed_;
  const CostModel& model_;
  const std::vector<double>& rp_;         // the redo prefix: the most recompute of [0, a)
  double all_ = 0, m_ = 0, d_ = 0, share_ = 0, h0_ = 0, r_ = 0, excess_ = 0, bwd_share_ = 0;
  RecomputePolicy policy_ = RecomputePolicy::auto_;
  bool split_ = false, cp_sorted_ = false, y_sorted_ = false;
  int64_t L_ = 0;
};

bool StepLowerBound::rules_out(Probe& p, double limit) const {
  const Candidate& c = p.c;
  if (c.depth < 2 || !(limit < kInfinity) || c.chunks > 1) return false;
  const double at = limit * (1.0 + 1e-9);  // rounding must not rule out a split at the limit itself
  if (p.lanes.has_short && at < p.lanes.short_at) return true;  // the lanes' walk is known not to reach (below)
  if (p.plain.empty()) prepare_rules(p);
  RuleWalks walks(*this, p);
  if (!walks.lanes_hold(at)) return true;  // before least_busy, which it does not read
  walks.busy = least_busy(p, at, true);
  if (flush_redo_rules_out(p, at, walks.busy)) return true;
  const bool flush = c.schedule == Schedule::flush && c.microbatches > 1;
  const bool cycles = flush || c.schedule == Schedule::zb_h1 || c.schedule == Schedule::zb_h2;
  const bool gpipe = c.schedule == Schedule::gpipe && c.microbatches > 1;
  auto out_by = [&](int walk) {
    switch (walk) {
      case 0: return !lanes_reach(p, at);
      case 1: return flush && !walks.flush_reaches(at);
      case 2: return cycles && !walks.zb_reaches(at);
      default: return gpipe && !walks.gpipe_reaches(at);
    }
  };
  // The same disjunction whatever the order: the walk that ruled out last goes first, as one walk mostly
  // decides a candidate's limits (refined()'s bisection asks one probe some 15 of them).
  for (int i = 0; i < kRuleWalks; ++i) {
    const int walk = (p.last_out + i) % kRuleWalks;
    if (out_by(walk)) {
      p.last_out = walk;
      return true;
    }
  }
  return false;
}

}  // namespace pd2bw::planner

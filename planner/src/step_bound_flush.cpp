// Flush's round trips with the recompute that memory and the lanes force: least_busy, a lower bound
// on the compute with recompute of any split whose objective is within T, and flush_redo_rules_out, a test
// rules_out makes for every flush candidate (its whole-layer walks use least_busy too, and so does gpipe's:
// there every stage keeps m stashes, and the lanes alone cap the stages below).
//
// Write Y_j for stage j's compute per microbatch with its recompute (f_j + b_j, b_j with the recomputed
// forward), Y for their sum and C for the model's fwd + bwd. Flush's stage k = max(0, d - m + 1), when it
// is not the last, has m >= w_k + 2, so the cycle through stage 0 and its two round trips below it
// (objective.hpp) give T >= h_0 + Y_{<k} + 2 Y_{>=k} = h_0 + 2 Y - Y_{<k}, and every lane m Y_j <= T
// gives Y_{<k} <= k T / m: T (1 + k / m) >= h_0 + 2 Y. (The fill bound of step_bound.cpp is this with
// ForcedRedo's recompute, which prices only memory.)
//
// Y at T: a stage that does not recompute holds one run of whole layers whose static bytes and f_j
// stashes fit the device less the reserve (f_j its in-flight count), so at most W(f_j) of compute
// (plain_runs), and its lane caps its compute at cap_j = (T - its allreduce latency) / m - its least
// transfers; so the stages that do not recompute hold at most P(T) = sum_j min(W(f_j), cap_j), and the
// others hold at least C - P(T), which they recompute: their redo is at least the least redo of that
// much compute, the layers taken by redo share ascending with fractions allowed (CostModel::least_redo_ms; a
// layer's redo, the recomputed forward, is taken as at most its fwd + bwd, which only lowers it). So
// Y >= C + least_redo_ms(C - P(T)). The cycles through stage 0 cap a stage's compute too: T - h_0 >= U +
// g_j Y_j (U = sum_i u_i >= Y, g_j = cycle_weight below), so with any Y' <= Y (the bound so far) each
// stage's plain compute is also at most (T - h_0 - Y') / g_j; P(T) with those caps gives a Y'' >= Y', a
// bound again (one such pass after the lanes' is taken). Each pass's caps grow with T, so the right side
// falls as T grows: when T (1 + k / m) < h_0 + 2 Y(T) at T, it holds at every smaller T too, and no split
// has an objective <= T.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "pd2bw/checked.hpp"
#include "step_bound.hpp"
#include "step_bound_links.hpp"

namespace pd2bw::planner {

void StepLowerBound::plain_runs(Schedule s, size_t bi, const std::vector<int64_t>& f_at,
                                std::vector<double>& out) const {
  const int64_t most = f_at.empty() ? 0 : *std::max_element(f_at.begin(), f_at.end());
  const std::lock_guard<std::mutex> lock(shared_->runs_mutex);
  auto& runs = shared_->plain_runs[{s, bi}];
  const auto& cp = model_.compute_prefix(static_cast<int64_t>(bi));
  const auto& sp = model_.stash_prefix(static_cast<int64_t>(bi));
  const int64_t L = model_.num_layers();
  for (auto f = static_cast<int64_t>(runs.size()) + 1; f <= most; ++f) {
    if (!runs.empty() && !(runs.back() > 0.0)) {  // W(f) never grows with f
      runs.push_back(0.0);
      continue;
    }
    auto fits = [&](int64_t a, int64_t e) {
      const int64_t stash = saturating_mul(f, sp[static_cast<size_t>(e)] - sp[static_cast<size_t>(a)]);
      return saturating_add(model_.static_bytes(s, a, e), stash) <= cap_bytes_;
    };
    double best = 0.0;
    for (int64_t a = 0, e = 0; a < L; ++a) {  // a run that fits still fits without its first layer
      e = std::max(e, a);
      while (e < L && fits(a, e + 1)) ++e;
      best = std::max(best, cp[static_cast<size_t>(e)] - cp[static_cast<size_t>(a)]);
    }
    runs.push_back(best);
  }
  out.clear();
  for (const int64_t f : f_at) out.push_back(runs[static_cast<size_t>(f - 1)]);
}

double StepLowerBound::least_busy(const Candidate& c, double t) const {
  if (!counts_busy(c.schedule) || c.chunks > 1 || c.depth < 1) return model_.compute_prefix(c.microbatch_index).back();
  Probe p(*this, c);
  prepare_rules(p);
  return least_busy(p, t);
}

namespace {

// Flush stage j's weight in the cycles through it (objective.hpp): with U = sum_i u_i >= busy,
// T - h_0 >= busy + (m - 1 - w_j) Y_j when m >= w_j + 2 (its two round trips: U_{<j} + 2 U_{>=j} +
// (m - 2 - w_j) t_j, with U_{>=j} >= Y_j); T - h_0 >= busy + (m - 1) max(cf_j, cb_j) >= busy + (m - 1)
// Y_j max(1/2, bwd_share) when its warm-up covers m - 1 forwards (one round trip: RuleWalks::one_trip_time);
// the last stage's part m t_j gives busy + (m - 1) Y_j. Y_j is its compute with recompute, at least its
// plain compute.
double cycle_weight(size_t j, double d, double m, double bwd_share) {
  const double k = static_cast<double>(j);
  if (k + 1.0 >= d) return m - 1.0;
  const double w = std::min(d - 1.0 - k, m);
  return m >= w + 2.0 ? m - 1.0 - w : std::max(0.5, bwd_share) * (m - 1.0);
}

}  // namespace

double StepLowerBound::least_busy(Probe& p, double t, bool redo_test) const {
  const Candidate& c = p.c;
  const auto policy = model_.constraints().recompute;
  const double all = model_.compute_prefix(c.microbatch_index).back();
  const bool flush = c.schedule == Schedule::flush;
  if (!counts_busy(c.schedule) || c.chunks > 1 || policy == RecomputePolicy::never) return all;
  const double m = static_cast<double>(c.microbatches), d = static_cast<double>(c.depth);
  if (policy == RecomputePolicy::always) return all + model_.least_redo_ms(c.microbatch_index, all);
  if (p.runs.empty()) return all;  // a stage with no stash (prepare_rules): not flush's shape
  // P(t) with each stage's plain compute also within its cycle's share at the busy time of the lanes alone
  // (the file's comment). A second pass can only lift the busy time; a third lifted 4,096-GPU gaps by 0.01%.
  const double theta = bwd_share_[static_cast<size_t>(c.microbatch_index)];
  const double rho = model_.min_redo_share(c.microbatch_index);
  const std::vector<StageLinks>& links = p.links();
  double busy = 0.0;
  for (int pass = 0; pass < (flush ? 2 : 1); ++pass) {
    // A stage that recomputes recomputes all its layers, so the stages that hold the deficit (what the
    // plain runs leave) give up their own plain runs: per unit of compute they gain over their run
    // (cap / (1 + least redo share) - run) they give up run / gain, at least the least such ratio.
    double plain = 0.0, gain = 0.0, least_ratio = kInfinity;
    for (size_t j = 0; j < p.runs.size() && plain < all; ++j) {
      const auto& l = links[j];
      double cap = std::max(0.0, (t - l.latency) / m - l.lane);
      if (pass > 0 && m > 1.0) cap = std::min(cap, std::max(0.0, (t - p.h0 - busy) / cycle_weight(j, d, m, theta)));
      const double run = std::min(p.runs[j], cap), more = cap / (1.0 + rho) - run;
      plain += run;
      if (more > 0.0) {
        gain += more;
        least_ratio = std::min(least_ratio, run / more);
      }
    }
    // (Rounding: a deficit within 1e-9 of the model is none; the stages cannot hold the model when their
    // gains fall short of it.)
    const double deficit = all - plain;
    const bool short_of = deficit > 1e-9 * all;
    if (short_of && !(gain >= deficit * (1.0 - 1e-9))) return kInfinity;
    const double redone = short_of ? std::min(all, deficit * (1.0 + least_ratio)) : std::max(0.0, deficit);
    const double next = all + model_.least_redo_ms(c.microbatch_index, redone);
    if (!(next > busy)) break;
    busy = next;
    // flush_redo_rules_out only grows with the busy time: where the first pass already passes it, the
    // caller's answer is known.
    if (redo_test && pass == 0 && flush_redo_rules_out(p, t, busy)) break;
  }
  return busy;
}

bool StepLowerBound::flush_redo_rules_out(const Probe& p, double t, double busy) const {
  const Candidate& c = p.c;
  if (c.schedule != Schedule::flush || c.chunks > 1 || c.microbatches < 2) return false;
  const int64_t k = std::max<int64_t>(0, c.depth - c.microbatches + 1);
  if (k > c.depth - 2) return false;
  return t * (1.0 + static_cast<double>(k) / static_cast<double>(c.microbatches)) < p.h0 + 2.0 * busy;
}

}  // namespace pd2bw::planner

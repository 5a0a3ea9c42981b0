// The search's objective (CostModel.hpp's step_objective) as a fold over the stages from the last to the
// first, written once for the partitioner's dynamic program, its enumeration of splits and the direct
// evaluation of a split. Private to the planner.
//
// Why these are lower bounds on the simulator's steady step (README "How the planner decides" has the
// long form). Write, per stage i and microbatch, f_i its forward, b_i its backward (with recompute),
// p_i one transfer over its input boundary (0 for i = 0), q_i over its output boundary, and
// t_i = f_i + b_i + 2 p_i + 2 q_i its busy time; h_i its allreduce plus update, once per step.
// - Every rank does all of its step's work between two of its updates, so a step takes at least
//   m t_i + h_i on every stage (the "lane" of stage i). That is the whole 2bw objective.
// - Flush: stage k's ops of one step (m t_k at least) are followed by the last backward's gradient climbing
//   to stage i <= k (b_j + p_j on each stage j in between), stage i's allreduce and update (h_i), and the
//   next step's first microbatch descending back to stage k (p_j + f_j each). That cycle repeats every
//   step: S >= m t_k + sum_{i <= j < k} (f_j + b_j + 2 p_j) + h_i. Stage k's part can also be longer than
//   its own ops: its last backward waits for the last microbatch to go down to the last stage and back
//   (sum_{j > k} (f_j + b_j + 2 p_j) - 2 q_k from its send), and until then stage k has done only its m
//   forwards and r = max(0, m - 1 - w) backwards, w = min(d - k - 1, m) being its warm-up; likewise its
//   first backward waits for the first microbatch's round trip after 1 + r forwards. So stage k's part is
//   at least max(m cf_k + (1 + r) cb_k, (1 + r) cf_k + m cb_k) + sum_{j > k} u_j - 2 q_k, and when both
//   waits come one after the other (m >= w + 2) at least 2 (cf_k + cb_k + sum_{j > k} u_j - 2 q_k)
//   + (m - 2 - w) t_k: the two round trips and the m - 2 - w microbatches between them.
// - GPipe: from stage i's first op, one microbatch's forwards reach the last stage and its backwards
//   come back to stage i, while some stage a >= i runs all m forwards (m - 1 more than the one
//   microbatch) and some stage c >= i all m backwards: S >= sum_{j >= i} (f_j + b_j + 2 p_j)
//   + (m - 1) (max_{a >= i} (p_a + f_a + q_a) + max_{c >= i} (q_c + b_c + p_c)) + h_i. With one replica
//   this is the replay's step exactly (a flow shop of identical jobs, once per direction).
// - ZB-H1 (Qi et al., ICLR 2024): stage i runs the W of microbatch k - i after the B of k, and the step's
//   remaining W's after its last B. Flush's cycle holds with B for the backward on the way up (the
//   gradient leaves a stage after its B; write u_j = f_j + B_j + 2 p_j, B with its recompute), stage k's
//   part ending at its last B's send (its busy time but the min(k + 1, m) W's after it, m t_k - n_k W_k,
//   or its round-trip waits as in flush with B in the backward slots), and stage i running its n_i
//   trailing W's before its allreduce and update: S >= part_k + sum_{i <= j < k} u_j + n_i W_i + h_i.
//   With equal stages and m >= d (k = d - 1, i = 0, no transfers) that is m (F + B + W) + (d - 1)
//   (F + B - W), the schedule's closed form.
// - 2bw's steady cycles (TwoBwCycleFold; not its objective: replay.cpp replays the split it ranks first and
//   counts its objective in the proven gap): stage s's 1F1B order holds w_s = d - 1 - s
//   forwards ahead of its backwards, so the microbatch y that opens a step and a later stage k give a cycle
//   one step long: stage s's ops from the forward after its backward of y - m up to its forward of
//   y + w_k - 1 (m - 1 - (k - s) forwards and m - 2 - (k - s) backwards, no allreduce), that forward's
//   activation down to stage k (p_j + f_j on each stage between), stage k's ops from that forward through
//   its backward of y - 1, its allreduce and update, its next forward and its backward of y, and y's
//   gradient back up to stage s, whose backward of y is followed by the forward the cycle began with, a step
//   later. With u_j = f_j + b_j + 2 q_j it adds up to S >= (m - 1 - (k - s)) t_s + sum_{s < j < k} u_j
//   + 2 t_k - 2 p_k + h_k, for k - s <= m - 2. It is above every lane where stage k has the larger
//   allreduce (more layers without recompute, nearer the end) and the stages between are not much less
//   busy than stage s. Every term grows with every transfer, so the fastest links keep it below each
//   replica's replay.
// Where replicas' links differ, the lanes use each stage's slowest replica and the fill and drain terms
// the fastest link of each boundary, so every bound stays below some replica's replay.
#pragma once

#include <algorithm>
#include <array>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner::detail {

inline constexpr double kNoValue = -std::numeric_limits<double>::infinity();

// A stage's numbers as the objective reads them (ms).
struct StageTerms {
  double lane = 0;  // m t + h on the slowest replica (StageCost::step_ms)
  double t = 0;     // per microbatch on the slowest replica: compute + p2p
  double u = 0;     // fill and drain share: f + b + 2 p (zb-h1: b without its W)
  double cf = 0;    // forward slot with its transfers: p + f + q
  double cb = 0;    // backward slot with its transfers: q + b + p (zb-h1: b without its W)
  double h = 0;     // allreduce + update
  double q = 0;     // one transfer over the output boundary (fastest link)
  double p = 0;     // one transfer over the input boundary (fastest link)
  double tau = std::numeric_limits<double>::infinity();      // TwoBwCycleFold: no stage's t is above it,
  double tau_low = std::numeric_limits<double>::infinity();  // and a lower charge for those below this
  double warmup = -1;  // flush's warm-up forwards min(d - i - 1, m); -1 for the last stage
  double w = 0;        // zb-h1: one microbatch's W (0 otherwise)
  double trailing = 0;  // zb-h1: the W's after the stage's last B, min(i + 1, m)
};

// A stage's priced times per microbatch (allreduce and update per step), as StageCost holds them.
struct StageTimes {
  double compute = 0, p2p = 0, forward = 0, backward = 0, weight = 0, in = 0, out = 0, allreduce = 0, update = 0;
};

// Stage `stage` of `depth`; a split backward defers its W's by `defer` microbatches (zb-h1: the stage
// index, zb-h2: twice it), so min(defer + 1, m) W's trail its last B.
// The W's a stage runs after its last B when its W's are deferred by `defer` microbatches: min(defer + 1,
// m) (the fold's trailing count, and the lower bounds' n_k).
inline double trailing_weights(int64_t defer, double m) { return std::min(static_cast<double>(defer + 1), m); }

inline StageTerms stage_terms(double m, int64_t stage, int64_t depth, const StageTimes& x, int64_t defer) {
  StageTerms s;
  const int64_t downstream = depth - 1 - stage;
  s.q = x.out;
  s.p = x.in;
  s.warmup = downstream > 0 ? std::min(static_cast<double>(downstream), m) : -1.0;
  s.h = x.allreduce + x.update;
  s.t = x.compute + x.p2p;
  s.lane = m * s.t + s.h;
  s.w = x.weight;
  s.trailing = x.weight > 0 ? trailing_weights(defer, m) : 0.0;
  const double b = x.backward - x.weight;
  s.u = x.forward + b + 2.0 * x.in;
  s.cf = x.in + x.forward + x.out;
  s.cb = x.out + b + x.in;
  return s;
}

// The state of the fold after stages i..d-1: v[0] is the objective over those stages (it never falls as
// stages are prepended); the rest summarise them for the stages still to come. Every entry is
// "smaller is better" for the final objective, so a state dominates another when it is <= in every entry.
template <int K>
using FoldState = std::array<double, K>;

// What the stages still to come (stages 0..n-1, before a fold state's first stage) add at least.
struct Prefix {
  double fb = 0;          // their fwd + bwd without recompute (zb-h1, zb-h2: less the W's)
  double redo = 0;        // the recompute they add, at least
  double h_first = 0;     // stage 0's allreduce + update, at least
  double trips = -1;      // flush: the first stage k whose part has both round trips below it (-1: none)
  double before_trips = 0;  // flush: the fwd + bwd of the layers before stage k, at most
  Prefix(double fwd_bwd) : fb(fwd_bwd) {}  // NOLINT: a bare fwd + bwd is a Prefix with nothing else known
};

// One policy per schedule: K entries, the state before any stage, and the step that prepends a stage.
// floor(v, p, m, n) is a lower bound on the final objective once n stages holding p.fb ms of fwd + bwd
// and recomputing at least p.redo are prepended (the partitioner prunes with it): they add at least
// p.fb + p.redo to every sum, and the busiest of them holds at least that over n. (2BW's floor leaves
// p.redo out: there more finished dynamic programs replaced greedy splits whose replays were faster.)
struct TwoBwFold {
  static constexpr int K = 1;
  static FoldState<K> empty() { return {kNoValue}; }
  static FoldState<K> prepend(const FoldState<K>& v, const StageTerms& s, double) { return {std::max(v[0], s.lane)}; }
  static double floor(const FoldState<K>& v, const Prefix& p, double m, double n) {
    return n > 0 ? std::max(v[0], m * p.fb / n) : v[0];
  }
};

// 2bw with its steady cycles (the header's last item), for splits whose lanes are all at most m tau (tau
// and tau_low from each StageTerms): v[0] the objective; v[1] and v[2] the most stage k >= i adds to a
// cycle through stage i - 1, max over k >= i of (sum_{i <= j < k} (u_j - x) + 2 t_k - 2 p_k + h_k), with
// x = tau and x = tau_low: the cycle's first stage s is charged x >= t_s in place of t_s for each stage up
// to k - 1 (t_s's coefficient (m - 1 - (k - s)) is then (m - 1) t_s - (k - s) x, one number per x), tau_low
// where t_s is at most it. Stage s is a first stage only where every k is within m - 2 of it (its warm-up
// min(d - 1 - s, m) is at most m - 2). The t's are with the fastest links (f + b + 2 p + 2 q = cf + cb).
struct TwoBwCycleFold {
  static constexpr int K = 3;
  static FoldState<K> empty() { return {kNoValue, kNoValue, kNoValue}; }
  static FoldState<K> prepend(const FoldState<K>& v, const StageTerms& s, double m) {
    const double t = s.cf + s.cb, k_part = 2.0 * t - 2.0 * s.p + s.h, between = t - 2.0 * s.p;
    const bool low = t <= s.tau_low;
    const double x = low ? s.tau_low : s.tau, g = low ? v[2] : v[1];
    const bool first = s.warmup <= m - 2.0;  // the last stage (warm-up -1) has no k after it anyway
    const double cycle = first && g > kNoValue ? (m - 1.0) * t - x + g : kNoValue;
    return {std::max({v[0], s.lane, cycle}), std::max(k_part, between - s.tau + v[1]),
            std::max(k_part, between - s.tau_low + v[2])};
  }
  static double floor(const FoldState<K>& v, const Prefix& p, double m, double n) {
    return n > 0 ? std::max(v[0], m * p.fb / n) : v[0];  // the lanes' floor, as TwoBwFold's
  }
};

// The floor of the folds whose v[1] is the cycle P_i (flush, zb-h1, zb-h2): the objective is at least
// h_0 (+ zb's trailing W's) + P_0, and P_0 >= p.fb + p.redo + P_i (the recompute is in the B's).
template <size_t N>
inline double cycle_floor(const std::array<double, N>& v, const Prefix& p, double m, double n) {
  const double busy = p.fb + p.redo;
  return std::max({v[0], p.h_first + busy + v[1], n > 0 ? m * busy / n : 0.0});
}

// v[1] = P_i = max over k >= i of (stage k's part + sum_{i <= j < k} u_j), v[2] = sum_{j >= i} u_j; the
// objective is max_i (h_i + P_i). A stage's part needs its warm-up, so the fold knows its position.
struct FlushFold {
  static constexpr int K = 3;
  static FoldState<K> empty() { return {kNoValue, kNoValue, 0.0}; }
  static FoldState<K> prepend(const FoldState<K>& v, const StageTerms& s, double m) {
    double part = m * s.t;
    if (s.warmup >= 0) {  // not the last stage: the round trips below it
      const double r = std::max(0.0, m - 1.0 - s.warmup);
      part = std::max(part, std::max(m * s.cf + (1.0 + r) * s.cb, (1.0 + r) * s.cf + m * s.cb) + v[2] - 2.0 * s.q);
      if (m >= s.warmup + 2.0)
        part = std::max(part, 2.0 * (s.cf + s.cb + v[2] - 2.0 * s.q) + (m - 2.0 - s.warmup) * s.t);
    }
    const double p = std::max(part, s.u + v[1]);
    return {std::max(v[0], s.h + p), p, v[2] + s.u};
  }
  // Stage k = p.trips, when it comes before the state's first stage (k < n), waits for both round trips
  // below it: its part is at least 2 (cf_k + cb_k - 2 q_k + U_{k+1}), twice its fwd + bwd and the u's
  // after it, and the stages before it add their u's. With s its start: the objective is at least
  // h_0 + fb(0, s) + 2 (fb(s, a) + v[2]) + their recompute >= h_first + p.redo + 2 (p.fb + v[2]) - p.before_trips.
  static double floor(const FoldState<K>& v, const Prefix& p, double m, double n) {
    const double f = cycle_floor(v, p, m, n);
    return p.trips >= 0 && p.trips < n ? std::max(f, p.h_first + p.redo + 2.0 * (p.fb + v[2]) - p.before_trips) : f;
  }
};

// v[1] = sum u, v[2] = max cf, v[3] = max cb over stages i..d-1.
struct GpipeFold {
  static constexpr int K = 4;
  static FoldState<K> empty() { return {kNoValue, 0.0, kNoValue, kNoValue}; }
  static FoldState<K> prepend(const FoldState<K>& v, const StageTerms& s, double m) {
    const double u = v[1] + s.u, f = std::max(v[2], s.cf), b = std::max(v[3], s.cb);
    return {std::max({v[0], s.lane, s.h + u + (m - 1.0) * (f + b)}), u, f, b};
  }
  static double floor(const FoldState<K>& v, const Prefix& p, double m, double n) {
    const double busy = p.fb + p.redo;
    return std::max(v[0], p.h_first + busy + v[1] + (m - 1.0) * std::max(v[2] + v[3], n > 0 ? busy / n : 0.0));
  }
};

// zb-h1: flush's fold, with B (the backward without its W) on the drain and refill. Stage k's part runs
// from its first op of a step to its last B's send: its busy time but its trailing W's, and its waits
// for the round trips below it as in flush (B's only); stage i adds its trailing W's before its update.
struct ZbH1Fold {
  static constexpr int K = 3;
  static FoldState<K> empty() { return {kNoValue, kNoValue, 0.0}; }
  static FoldState<K> prepend(const FoldState<K>& v, const StageTerms& s, double m) {
    double part = m * s.t - s.trailing * s.w;
    if (s.warmup >= 0) {
      const double r = std::max(0.0, m - 1.0 - s.warmup);
      part = std::max(part, std::max(m * s.cf + (1.0 + r) * s.cb, (1.0 + r) * s.cf + m * s.cb) + v[2] - 2.0 * s.q);
      if (m >= s.warmup + 2.0)
        part = std::max(part, 2.0 * (s.cf + s.cb + v[2] - 2.0 * s.q) + (m - 2.0 - s.warmup) * (s.t - s.w));
    }
    const double p = std::max(part, s.u + v[1]);
    return {std::max(v[0], s.h + s.trailing * s.w + p), p, v[2] + s.u};
  }
  // p.fb: the fwd + bwd less the W's of the stages to come (the partitioner passes that for zb-h1).
  static double floor(const FoldState<K>& v, const Prefix& p, double m, double n) { return cycle_floor(v, p, m, n); }
};

// zb-h2: the cycle of zb-h1's fold without the round trips below a stage (its longer warm-up lets a
// stage run more forwards before its first B, so those waits are not bounded the same way): S >= m t_k -
// n_k W_k + sum_{i <= j < k} u_j + n_i W_i + h_i with n_i = min(2 i + 1, m) trailing W's. Without the
// round trips no sum of u's is needed: v[1] = P_i as in zb-h1, and two entries make fewer states
// incomparable than three would.
struct ZbH2Fold {
  static constexpr int K = 2;
  static FoldState<K> empty() { return {kNoValue, kNoValue}; }
  static FoldState<K> prepend(const FoldState<K>& v, const StageTerms& s, double m) {
    const double p = std::max(m * s.t - s.trailing * s.w, s.u + v[1]);
    return {std::max(v[0], s.h + s.trailing * s.w + p), p};
  }
  static double floor(const FoldState<K>& v, const Prefix& p, double m, double n) { return cycle_floor(v, p, m, n); }
};

// Interleaved 1F1B's cycle (chunk_price.cpp). Rank k's first op of a step is the forward of microbatch 0
// on its first chunk (chunk k) and its last compute op the backward of microbatch m - 1 on that chunk, so
// all of its step's work lies between them. From rank i's update (i <= k), microbatch 0 descends through
// chunks i..k-1 (their forwards), rank k works, and the last backward climbs back through chunks k-1..i
// (their backwards) to rank i's allreduces and update: S >= work_k + sum_{i <= j < k} (f_j + b_j) + h_i,
// f_j and b_j the forward and backward (with recompute) of chunk j, work_k rank k's busy time less h_k. The
// transfers on the way are left out (the bound stays below the replay). With equal chunks this is the
// schedule's closed form, m v (f + b) + (d - 1)(f + b). O(d): P_k = max(h_k, P_{k-1} + u_{k-1}).
inline double interleaved_cycle(const std::vector<double>& work, const std::vector<double>& h,
                                const std::vector<double>& u) {
  double best = 0.0, p = kNoValue;
  for (size_t k = 0; k < work.size(); ++k) {
    p = k == 0 ? h[0] : std::max(h[k], p + u[k - 1]);
    best = std::max(best, work[k] + p);
  }
  return best;
}

// Interleaved 1F1B's waits inside a rank's step, added to work[p] before interleaved_cycle reads it.
// Rank p's first op of a step is the forward of microbatch 0 on chunk p and its last the backward of
// microbatch m - 1 on chunk p; in Megatron's order (pipeline/schedule.cpp) its first r d ops are the
// forwards of its chunks p, d + p, ..., (r - 1) d + p for microbatches 0..d - 1 (all in the warm-up, which
// holds at least (v - 1) d forwards; m >= d), and its last r' d ops the backwards of the same chunks for
// microbatches m - d..m - 1 (the cool-down, as long). So, for 1 <= r, r' < v:
// - the forward of microbatch 0 on chunk r d + p starts only once microbatch 0 has gone forward through
//   chunks p..r d + p - 1 (sum of their f), while the rank itself has only its first r d ops to run
//   before it (at most d x their f plus one transfer in and one out each, and that forward's receive);
// - likewise the backward of microbatch m - 1 on chunk p ends only after the one on chunk r' d + p and
//   the backwards of chunks r' d + p - 1..p (sum of their b), while after the former the rank has only its
//   last r' d ops to run (at most d x their b plus their transfers, and its send).
// Between the two the rank runs all of its step's other work, so its first op's start and last op's end
// are at least work_p + E_F(r) + E_B(r') apart, E_F(r) = sum_{p <= c < r d + p} f_c - (the ops before),
// E_B(r') the same with b: the rank's waits for the microbatches' first trip through the chunks in
// between, which the cycle's work_p leaves out (with equal chunks they are 0, and the cycle is the
// schedule's closed form). work_p adds the largest of each (0 when none is positive).
// f, b: per chunk (d v), one microbatch's forward and backward (its recompute in b, as the replay runs it
// after the gradient arrives); x: the transfers in plus out of one of its ops on the replica whose
// busy time work_p is. O(d v).
inline void add_interleaved_waits(int64_t d, int64_t v, const std::vector<double>& f, const std::vector<double>& b,
                                  const std::vector<double>& x, std::vector<double>& work,
                                  std::vector<double>& scratch) {
  const auto n = static_cast<size_t>(d * v);
  scratch.assign(2 * (n + 1), 0.0);  // prefix sums over chunks: forwards, then backwards
  double* fp = scratch.data();
  double* bp = fp + n + 1;
  for (size_t c = 0; c < n; ++c) {
    fp[c + 1] = fp[c] + f[c];
    bp[c + 1] = bp[c] + b[c];
  }
  const auto D = static_cast<size_t>(d);
  const double dd = static_cast<double>(d);
  for (size_t p = 0; p < D; ++p) {
    double ef = 0.0, eb = 0.0, runs_f = 0.0, runs_b = 0.0;  // runs: the ops of the chunks before r d + p
    for (size_t r = 1; r < static_cast<size_t>(v); ++r) {
      const size_t prev = (r - 1) * D + p, at = r * D + p;
      runs_f += dd * (f[prev] + x[prev]);
      runs_b += dd * (b[prev] + x[prev]);
      ef = std::max(ef, (fp[at] - fp[p]) - runs_f - x[at]);
      eb = std::max(eb, (bp[at] - bp[p]) - runs_b - x[at]);
    }
    work[p] += ef + eb;
  }
}

// The chunked schedules' climb through the model (interleaved, zb-v; chunk_price.cpp). The rank holding
// chunk c runs its forwards in microbatch order, its backwards likewise, and each backward after its own
// forward, so between microbatch 0's forward of chunk c and microbatch m - 1's backward of it (with that
// backward's recompute) it runs the other m - 1 of each. From rank 0's update of one step, microbatch 0's
// forward climbs chunks 0..c, chunk c's rank runs those 2 (m - 1) ops, the last microbatch's backward comes
// back down chunks c..0, and rank 0 then allreduces and updates:
//   S >= sum_{j < c} u_j + m u_c + h_0,
// u_j chunk j's forward plus the backward on the way down (its B alone with a split backward: its W's may
// wait), with the recompute where its rank recomputes; h_0 rank 0's allreduces and update. Transfers are
// left out (the bound stays below the replay). It binds where the microbatches are few for the chunks:
// with m < d v the pipeline never fills, and one microbatch's trip through the whole model is a large
// share of the step. O(d v).
inline double chunked_climb(const std::vector<double>& u, double h0, double m) {
  double below = 0.0, best = 0.0;
  for (double x : u) {
    best = std::max(best, below + m * x);
    below += x;
  }
  return h0 + best;
}

// Whether a fold's sums hold the backward less its W (the split-backward schedules').
template <class Fold>
inline constexpr bool kSplitFold = std::is_same_v<Fold, ZbH1Fold> || std::is_same_v<Fold, ZbH2Fold>;

// The W deferral of stage `stage` under schedule s (zb-h2: 2 i; otherwise i, which only zb-h1 reads).
inline int64_t weight_defer(schemas::Schedule s, int64_t stage) {
  return s == schemas::Schedule::zb_h2 ? 2 * stage : stage;
}

// The objective of a split of one chunk per rank into `depth` stages (step_objective): stage_at(k) gives
// stage k's priced times (a StageCost, or the partitioner's QuickCost: `feasible` and the fields StageTimes holds),
// folded from the last stage to the first with the schedule's fold; infinity at the first infeasible stage.
// With a `cutoff`, prefix_at(k) gives what stages 0..k-1 hold (a Prefix: at least their fwd + bwd, less
// the W's for a split backward), and the fold stops once the fold's floor proves the objective at or
// above the cutoff (with a 1e-9 margin for the rounding of sums taken in another order): it then returns
// that floor, a lower bound at or above `cutoff`, not the objective.
template <class StageAt, class PrefixAt>
double folded_objective(const Candidate& c, int64_t depth, StageAt&& stage_at, double cutoff, PrefixAt&& prefix_at) {
  auto fold = [&]<class Fold>(Fold) {
    const double m = static_cast<double>(c.microbatches);
    const bool cut = cutoff < std::numeric_limits<double>::infinity();
    auto v = Fold::empty();
    for (int64_t k = depth; k-- > 0;) {
      const auto& s = stage_at(k);
      if (!s.feasible) return std::numeric_limits<double>::infinity();
      const StageTimes x{s.compute_ms, s.p2p_ms, s.forward_ms,   s.backward_ms, s.weight_ms,
                         s.in_ms,      s.out_ms, s.allreduce_ms, s.update_ms};
      v = Fold::prepend(v, stage_terms(m, k, depth, x, weight_defer(c.schedule, k)), m);
      if (cut && k > 0) {
        const double floor = Fold::floor(v, prefix_at(k), m, static_cast<double>(k));
        if (floor * (1.0 - 1e-9) >= cutoff) return floor;
      }
    }
    return v[0];
  };
  switch (c.schedule) {
    case schemas::Schedule::flush:
      return fold(FlushFold{});
    case schemas::Schedule::gpipe:
      return fold(GpipeFold{});
    case schemas::Schedule::zb_h1:
      return fold(ZbH1Fold{});
    case schemas::Schedule::zb_h2:
      return fold(ZbH2Fold{});
    case schemas::Schedule::two_bw:
    case schemas::Schedule::interleaved:
    case schemas::Schedule::zb_v:
      break;
  }
  return fold(TwoBwFold{});
}

template <class StageAt>
double folded_objective(const Candidate& c, int64_t depth, StageAt&& stage_at) {
  return folded_objective(c, depth, std::forward<StageAt>(stage_at), std::numeric_limits<double>::infinity(),
                          [](int64_t) { return Prefix(0.0); });
}

}  // namespace pd2bw::planner::detail

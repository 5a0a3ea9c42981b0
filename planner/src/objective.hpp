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
//   step: S >= m t_k + sum_{i <= j < k} (f_j + b_j + 2 p_j) + h_i.
// - GPipe: from stage i's first op, one microbatch's forwards reach the last stage and its backwards
//   come back to stage i, while some stage a >= i runs all m forwards (m - 1 more than the one
//   microbatch) and some stage c >= i all m backwards: S >= sum_{j >= i} (f_j + b_j + 2 p_j)
//   + (m - 1) (max_{a >= i} (p_a + f_a + q_a) + max_{c >= i} (q_c + b_c + p_c)) + h_i. With one replica
//   this is the replay's step exactly (a flow shop of identical jobs, once per direction).
// Where replicas' links differ, the lanes use each stage's slowest replica and the fill and drain terms
// the fastest link of each boundary, so every bound stays below some replica's replay.
#pragma once

#include <algorithm>
#include <array>
#include <limits>

#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner::detail {

inline constexpr double kNoValue = -std::numeric_limits<double>::infinity();

// A stage's numbers as the objective reads them (ms).
struct StageTerms {
  double lane = 0;  // m t + h on the slowest replica (StageCost::step_ms)
  double t = 0;     // per microbatch on the slowest replica: compute + p2p
  double u = 0;     // fill and drain share: f + b + 2 p
  double cf = 0;    // forward slot with its transfers: p + f + q
  double cb = 0;    // backward slot with its transfers: q + b + p
  double h = 0;     // allreduce + update
};

inline StageTerms stage_terms(double m, double compute_ms, double p2p_ms, double forward_ms, double backward_ms,
                              double in_ms, double out_ms, double allreduce_ms, double update_ms) {
  StageTerms s;
  s.h = allreduce_ms + update_ms;
  s.t = compute_ms + p2p_ms;
  s.lane = m * s.t + s.h;
  s.u = forward_ms + backward_ms + 2.0 * in_ms;
  s.cf = in_ms + forward_ms + out_ms;
  s.cb = out_ms + backward_ms + in_ms;
  return s;
}

// The state of the fold after stages i..d-1: v[0] is the objective over those stages (it never falls as
// stages are prepended); the rest summarise them for the stages still to come. Every entry is
// "smaller is better" for the final objective, so a state dominates another when it is <= in every entry.
template <int K>
using FoldState = std::array<double, K>;

// One policy per schedule: K entries, the state before any stage, and the step that prepends a stage.
// floor(v, fb, m) is a lower bound on the final objective once stages holding fb ms of fwd + bwd are
// prepended (the partitioner prunes with it).
struct TwoBwFold {
  static constexpr int K = 1;
  static FoldState<K> empty() { return {kNoValue}; }
  static FoldState<K> prepend(const FoldState<K>& v, const StageTerms& s, double) { return {std::max(v[0], s.lane)}; }
  static double floor(const FoldState<K>& v, double, double) { return v[0]; }
};

// v[1] = P_i = max over k >= i of (m t_k + sum_{i <= j < k} u_j); the objective is max_i (h_i + P_i).
struct FlushFold {
  static constexpr int K = 2;
  static FoldState<K> empty() { return {kNoValue, kNoValue}; }
  static FoldState<K> prepend(const FoldState<K>& v, const StageTerms& s, double m) {
    const double p = std::max(m * s.t, s.u + v[1]);
    return {std::max(v[0], s.h + p), p};
  }
  static double floor(const FoldState<K>& v, double fb, double) { return std::max(v[0], fb + v[1]); }
};

// v[1] = sum u, v[2] = max cf, v[3] = max cb over stages i..d-1.
struct GpipeFold {
  static constexpr int K = 4;
  static FoldState<K> empty() { return {kNoValue, 0.0, kNoValue, kNoValue}; }
  static FoldState<K> prepend(const FoldState<K>& v, const StageTerms& s, double m) {
    const double u = v[1] + s.u, f = std::max(v[2], s.cf), b = std::max(v[3], s.cb);
    return {std::max({v[0], s.lane, s.h + u + (m - 1.0) * (f + b)}), u, f, b};
  }
  static double floor(const FoldState<K>& v, double fb, double m) {
    return std::max(v[0], fb + v[1] + (m - 1.0) * (v[2] + v[3]));
  }
};

}  // namespace pd2bw::planner::detail

// Brute force for the planner's tests, written on loops of its own: every candidate of the search space
// in the planner's documented order, every composition of the layers into its stages (priced through
// CostModel::stage_cost), and the search's objective computed straight from its definition in the
// README ("How the planner decides"), not from the planner's fold. Header-only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/partition.hpp"
#include "pd2bw/planner/search.hpp"

namespace pd2bw::testing {

inline int64_t device_count(const schemas::Cluster& cluster) {
  int64_t n = 1;
  for (const auto& level : cluster.levels) n *= level.size;
  return n;
}

// Calls visit(candidate) for every point of the search space, in the planner's documented order. With
// `one_stage_zb`, zb-h1 on one stage too (the planner enumerates it only when zb-h1 is pinned).
template <class Visit>
void for_each_candidate(const planner::CostModel& model, Visit&& visit, bool one_stage_zb = false) {
  using schemas::Schedule;
  const auto& profile = model.profile();
  const auto& k = model.constraints();
  const int64_t devices = device_count(model.cluster());
  std::vector<Schedule> schedules = {Schedule::two_bw, Schedule::flush, Schedule::gpipe};
  if (model.split_backward()) schedules.push_back(Schedule::zb_h1);
  if (k.schedule) schedules = {*k.schedule};
  int64_t max_d = std::min(model.num_layers(), devices);
  if (k.max_depth > 0) max_d = std::min(max_d, k.max_depth);
  for (Schedule s : schedules)
    for (size_t bi = 0; bi < profile.microbatch_sizes.size(); ++bi) {
      const int64_t b = profile.microbatch_sizes[bi];
      if (k.microbatch && *k.microbatch != b) continue;
      for (int64_t d = 1; d <= max_d; ++d) {
        if (k.depth > 0 && d != k.depth) continue;
        for (int64_t w = 1; w * d <= devices; ++w) {
          if (k.width > 0 && w != k.width) continue;
          if (k.global_batch % (b * w) != 0) continue;
          const int64_t m = k.global_batch / (b * w);
          if (s == Schedule::two_bw && m < d) continue;
          if (s == Schedule::zb_h1 && d == 1 && !k.schedule && !one_stage_zb) continue;
          if (m * d > planner::kMaxReplayedMicrobatches) continue;
          for (int pl = 0; pl < ((w > 1 && d > 1) ? 2 : 1); ++pl) {
            planner::Candidate c{s, static_cast<int64_t>(bi), b, w, d, m,
                                 pl == 0 ? schemas::Placement::replicas_inner : schemas::Placement::stages_inner};
            visit(c);
          }
        }
      }
    }
}

// The objective of a split from its stages, by the README's formulas: with t = compute + p2p,
// u = forward + backward + 2 in, cf = in + forward + out, cb = out + backward + in, h = allreduce + update:
// 2bw max_i step_ms_i; flush max over i <= k of part_k + sum_{i <= j < k} u_j + h_i, where part_k is
// the larger of m t_k and, unless k is the last stage, max(m cf_k + (1 + r) cb_k, (1 + r) cf_k + m cb_k)
// + sum_{j > k} u_j - 2 out_k with r = max(0, m - 1 - w), w = min(d - k - 1, m), and when m >= w + 2
// also 2 (cf_k + cb_k + sum_{j > k} u_j - 2 out_k) + (m - 2 - w) t_k; gpipe the largest of the step_ms
// and, over i, sum_{j >= i} u_j + (m - 1) (max_{a >= i} cf_a + max_{c >= i} cb_c) + h_i. zb-h1 is
// flush's with the backward less its W (weight_ms) in u and cb, part_k at least m t_k - n_k W_k and the
// double round trip's middle (m - 2 - w) (t_k - W_k), and n_i W_i added at the turn, n_i = min(i + 1, m).
inline double reference_objective(const planner::Candidate& c, const std::vector<planner::StageCost>& st) {
  const auto d = st.size();
  const double m = static_cast<double>(c.microbatches);
  double lanes = 0;
  for (const auto& s : st) {
    if (!s.feasible) return planner::kInfinity;
    lanes = std::max(lanes, s.step_ms);
  }
  const bool zb = c.schedule == schemas::Schedule::zb_h1;
  auto h = [&](size_t i) { return st[i].allreduce_ms + st[i].update_ms; };
  auto bwd = [&](size_t i) { return st[i].backward_ms - (zb ? st[i].weight_ms : 0.0); };
  auto u = [&](size_t i) { return st[i].forward_ms + bwd(i) + 2.0 * st[i].in_ms; };
  auto trailing = [&](size_t i) { return zb ? std::min(static_cast<double>(i + 1), m) * st[i].weight_ms : 0.0; };
  double best = lanes;
  auto cf = [&](size_t i) { return st[i].in_ms + st[i].forward_ms + st[i].out_ms; };
  auto cb = [&](size_t i) { return st[i].out_ms + bwd(i) + st[i].in_ms; };
  if (c.schedule == schemas::Schedule::flush || zb) {
    for (size_t k = 0; k < d; ++k) {
      const double t = st[k].compute_ms + st[k].p2p_ms, tb = t - (zb ? st[k].weight_ms : 0.0);
      double part = m * t - trailing(k);
      if (k + 1 < d) {
        double below = 0;
        for (size_t j = k + 1; j < d; ++j) below += u(j);
        const double w = std::min(static_cast<double>(d - k - 1), m), r = std::max(0.0, m - 1.0 - w);
        part = std::max(part, std::max(m * cf(k) + (1 + r) * cb(k), (1 + r) * cf(k) + m * cb(k)) + below -
                                  2.0 * st[k].out_ms);
        if (m >= w + 2)
          part = std::max(part, 2.0 * (cf(k) + cb(k) + below - 2.0 * st[k].out_ms) + (m - 2.0 - w) * tb);
      }
      for (size_t i = 0; i <= k; ++i) {
        double sum = 0;
        for (size_t j = i; j < k; ++j) sum += u(j);
        best = std::max(best, part + sum + trailing(i) + h(i));
      }
    }
  } else if (c.schedule == schemas::Schedule::gpipe) {
    for (size_t i = 0; i < d; ++i) {
      double sum = 0, f = 0, b = 0;
      for (size_t j = i; j < d; ++j) {
        sum += u(j);
        f = std::max(f, cf(j));
        b = std::max(b, cb(j));
      }
      best = std::max(best, sum + (m - 1.0) * (f + b) + h(i));
    }
  }
  return best;
}

// Calls visit(bounds, stages) for every composition of the layers into c.depth non-empty contiguous
// stages whose stages all fit. Each (stage, begin, end) is priced once.
template <class Visit>
void for_each_split(const planner::CostModel& model, const planner::Candidate& c, Visit&& visit) {
  const int64_t L = model.num_layers();
  const int64_t d = c.depth;
  std::vector<planner::StageCost> cost(static_cast<size_t>(d * (L + 1) * (L + 1)));
  auto at = [&](int64_t s, int64_t b, int64_t e) -> planner::StageCost& {
    return cost[static_cast<size_t>((s * (L + 1) + b) * (L + 1) + e)];
  };
  for (int64_t s = 0; s < d; ++s)
    for (int64_t b = s; b <= L - (d - s); ++b)
      for (int64_t e = b + 1; e <= L - (d - 1 - s); ++e) at(s, b, e) = model.stage_cost(c, s, b, e);
  std::vector<int64_t> bounds(static_cast<size_t>(d + 1), 0);
  std::vector<planner::StageCost> stages(static_cast<size_t>(d));
  bounds[static_cast<size_t>(d)] = L;
  std::function<void(int64_t, int64_t)> walk = [&](int64_t s, int64_t begin) {
    for (int64_t end = s == d - 1 ? L : begin + 1; end <= L - (d - 1 - s); ++end) {
      const auto& sc = at(s, begin, end);
      if (!sc.feasible) continue;
      stages[static_cast<size_t>(s)] = sc;
      bounds[static_cast<size_t>(s + 1)] = end;
      if (s == d - 1)
        visit(bounds, stages);
      else
        walk(s + 1, end);
    }
  };
  walk(0, 0);
}

}  // namespace pd2bw::testing

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
  schedules.push_back(Schedule::interleaved);
  if (model.split_backward()) schedules.insert(schedules.end(), {Schedule::zb_h2, Schedule::zb_v});
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
          if ((s == Schedule::two_bw || s == Schedule::interleaved) && m < d) continue;
          if (s == Schedule::interleaved && m % d != 0) continue;  // Megatron's rule
          // One stage: zb-h1 and zb-h2 run flush's ops (the chunked ones do not: a recomputing rank rebuilds
          // one chunk's stash at a time).
          if ((s == Schedule::zb_h1 || s == Schedule::zb_h2) && d == 1 && !k.schedule && !one_stage_zb) continue;
          // Chunks per rank: interleaved 2, 4, ... while each chunk keeps a layer; zb-v 2; the others 1.
          std::vector<int64_t> vs;
          if (s == Schedule::interleaved)
            for (int64_t v = 2; d * v <= model.num_layers(); v *= 2) vs.push_back(v);
          else if (d * (s == Schedule::zb_v ? 2 : 1) <= model.num_layers())
            vs.push_back(s == Schedule::zb_v ? 2 : 1);
          if (k.chunks > 0) vs = {k.chunks};
          for (int64_t v : vs) {
            if (m * d * v > (v > 1 ? planner::kMaxChunkedMicrobatches : planner::kMaxReplayedMicrobatches)) continue;
            for (int pl = 0; pl < ((w > 1 && d > 1) ? 2 : 1); ++pl) {
              planner::Candidate c{s, static_cast<int64_t>(bi), b, w, d, m,
                                   pl == 0 ? schemas::Placement::replicas_inner : schemas::Placement::stages_inner, v};
              visit(c);
            }
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
// zb-h2's is zb-h1's without the round trips (part_k = m t_k - n_k W_k), with n_i = min(2 i + 1, m); a chunked
// candidate's (interleaved, zb-v: `st` has a StageCost per chunk) is the largest, over ranks, of the step_ms of the
// chunks the rank holds, added up, and over chunks k, of m (compute - W)_k + sum_{j < k} (compute - W)_j plus rank 0's
// allreduces and updates (the climb); interleaved also has its cycle, each rank's part of it with its waits for the
// microbatches' first trips through the chunks (objective.hpp: add_interleaved_waits).
inline double reference_objective(const planner::Candidate& c, const std::vector<planner::StageCost>& st) {
  const auto d = st.size();
  const double m = static_cast<double>(c.microbatches);
  double lanes = 0;
  std::vector<double> ranks(static_cast<size_t>(c.depth), 0.0);
  for (size_t k = 0; k < d; ++k) {
    if (!st[k].feasible) return planner::kInfinity;
    lanes = std::max(lanes, st[k].step_ms);
    ranks[static_cast<size_t>(schemas::chunk_position(c.schedule, c.depth, static_cast<int64_t>(k)))] += st[k].step_ms;
  }
  if (c.chunks > 1) {
    double best = *std::max_element(ranks.begin(), ranks.end());
    // The climb: from rank 0's update, microbatch 0's forward up chunks 0..k, m of chunk k's forward and
    // backward (its B: compute less W), the last backward back down to chunk 0, rank 0's allreduces and
    // updates.
    double held = 0;
    for (size_t k = 0; k < d; ++k)
      if (schemas::chunk_position(c.schedule, c.depth, static_cast<int64_t>(k)) == 0)
        held += st[k].allreduce_ms + st[k].update_ms;
    // (Summed as the planner sums it, so that equal climbs of different splits tie exactly: with m = 1
    // the climb is the whole model whatever the split.)
    double below = 0, climb = 0;
    for (size_t k = 0; k < d; ++k) {
      climb = std::max(climb, below + m * (st[k].compute_ms - st[k].weight_ms));
      below += st[k].compute_ms - st[k].weight_ms;
    }
    best = std::max(best, held + climb);
    if (c.schedule != schemas::Schedule::interleaved) return best;
    // Interleaved: over ranks i <= k, rank k's work (its lane less its allreduces and updates) plus the
    // forward and backward of chunks i..k-1 (each rank's first) plus rank i's allreduces and updates.
    std::vector<double> h(static_cast<size_t>(c.depth), 0.0);
    for (size_t k = 0; k < d; ++k)
      h[static_cast<size_t>(k % static_cast<size_t>(c.depth))] += st[k].allreduce_ms + st[k].update_ms;
    // Rank k's waits: the forward of microbatch 0 on chunk r d + k waits for its trip through chunks
    // k..r d + k - 1 while the rank runs only the r d forwards (and transfers) before it; the backward of
    // microbatch m - 1 on chunk k likewise, after the one on chunk r d + k, with the r d backwards after it.
    const auto D = static_cast<size_t>(c.depth), V = static_cast<size_t>(c.chunks);
    std::vector<double> waits(D, 0.0);
    for (size_t k = 0; k < D; ++k) {
      double forward = 0, backward = 0;
      for (size_t r = 1; r < V; ++r) {
        double chain_f = 0, chain_b = 0, ops_f = 0, ops_b = 0;
        for (size_t j = k; j < r * D + k; ++j) chain_f += st[j].forward_ms, chain_b += st[j].backward_ms;
        for (size_t q = 0; q < r; ++q) {
          const auto& x = st[q * D + k];
          ops_f += static_cast<double>(D) * (x.forward_ms + x.in_ms + x.out_ms);
          ops_b += static_cast<double>(D) * (x.backward_ms + x.in_ms + x.out_ms);
        }
        const double last = st[r * D + k].in_ms + st[r * D + k].out_ms;
        forward = std::max(forward, chain_f - ops_f - last);
        backward = std::max(backward, chain_b - ops_b - last);
      }
      waits[k] = forward + backward;
    }
    for (size_t k = 0; k < static_cast<size_t>(c.depth); ++k)
      for (size_t i = 0; i <= k; ++i) {
        double sum = ranks[k] - h[k] + waits[k] + h[i];
        for (size_t j = i; j < k; ++j) sum += st[j].forward_ms + st[j].backward_ms;
        best = std::max(best, sum);
      }
    return best;
  }
  const bool h2 = c.schedule == schemas::Schedule::zb_h2;
  const bool zb = c.schedule == schemas::Schedule::zb_h1 || h2;
  auto h = [&](size_t i) { return st[i].allreduce_ms + st[i].update_ms; };
  auto bwd = [&](size_t i) { return st[i].backward_ms - (zb ? st[i].weight_ms : 0.0); };
  auto u = [&](size_t i) { return st[i].forward_ms + bwd(i) + 2.0 * st[i].in_ms; };
  auto trailing = [&](size_t i) {
    return zb ? std::min(static_cast<double>(h2 ? 2 * i + 1 : i + 1), m) * st[i].weight_ms : 0.0;
  };
  double best = lanes;
  auto cf = [&](size_t i) { return st[i].in_ms + st[i].forward_ms + st[i].out_ms; };
  auto cb = [&](size_t i) { return st[i].out_ms + bwd(i) + st[i].in_ms; };
  if (c.schedule == schemas::Schedule::flush || zb) {
    for (size_t k = 0; k < d; ++k) {
      const double t = st[k].compute_ms + st[k].p2p_ms, tb = t - (zb ? st[k].weight_ms : 0.0);
      double part = m * t - trailing(k);
      if (k + 1 < d && !h2) {
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
// A chunked candidate: every composition into d v chunks, priced as a whole by evaluate_split (a rank's
// memory depends on all of its chunks); those with every rank within memory are visited.
template <class Visit>
void for_each_chunked_split(const planner::CostModel& model, const planner::Candidate& c, Visit&& visit) {
  const int64_t L = model.num_layers(), n = c.depth * c.chunks;
  std::vector<int64_t> bounds(static_cast<size_t>(n + 1), 0);
  bounds[static_cast<size_t>(n)] = L;
  std::function<void(int64_t, int64_t)> walk = [&](int64_t k, int64_t begin) {
    for (int64_t end = k == n - 1 ? L : begin + 1; end <= L - (n - 1 - k); ++end) {
      bounds[static_cast<size_t>(k + 1)] = end;
      if (k + 1 < n) {
        walk(k + 1, end);
        continue;
      }
      planner::Split split;
      split.bounds = bounds;
      const auto e = planner::evaluate_split(model, c, split);
      if (std::all_of(e.stages.begin(), e.stages.end(), [](const auto& s) { return s.feasible; }))
        visit(bounds, e.stages);
    }
  };
  if (n <= L) walk(0, 0);
}

template <class Visit>
void for_each_split(const planner::CostModel& model, const planner::Candidate& c, Visit&& visit) {
  if (c.chunks > 1) return for_each_chunked_split(model, c, visit);
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

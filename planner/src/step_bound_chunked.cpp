// The chunked candidates' (interleaved, zb-v) bound from their ranks' memory (StepLowerBound::chunked_bound).
//
// Proof. Take a split of chunked candidate c whose objective is T (finite, so every rank fits under the
// recompute choice the policy makes). The objective is at least every rank's lane (chunk_price.cpp):
//   lane_p = sum over its chunks of (m (compute + redo if the rank recomputes) + allreduce + update)
//            + 2 m (the transfers of its busiest replica).
// (1) Transfers: with d > 1 every rank has a chunk boundary that leaves it (interleaved's neighbours sit on
//     consecutive positions; zb-v's rank 0 sends chunk 0's output on, and every other rank receives
//     chunk p's input from rank p - 1), priced at least the least output_p2p of a layer a boundary can
//     follow at the fastest level: q. With d = 1 nothing leaves the rank, q = 0.
// (2) Allreduce: with w > 1 each of its v chunks pays allreduce_ms of its gradients at the level its
//     replicas span, at least a = the least allreduce_ms(0, w, level) of any level (non-decreasing in
//     bytes). Updates are >= 0.
// So with x = (T - v a) / m - q, rank p's plain compute c_p obeys c_p <= x without recompute and
// (1 + r) c_p <= x with it, r = min_redo_share (every layer's redo is at least r times its fwd + bwd).
// (3) Memory: rank p holds n_p layers, n_p >= v (one per chunk). If it fits without recompute,
//     n_p <= cap_p.plain; if it recomputes and fits, n_p <= cap_p.redo (chunk_floor.cpp's proof). Policy
//     never leaves only the first option, always only the second. Its compute is at most the
//     sum of the n_p largest per-layer fwd + bwd, Top(n_p), so in every case
//       c_p <= hold_p(x) = max over the options open to it of min(x, Top(cap.plain)) and
//                          min(x / (1 + r), Top(cap.redo)),
//     an option open only when its cap is at least v.
// Every layer sits on one rank, so sum_p c_p = C (the whole model's fwd + bwd), hence sum_p hold_p(x) >= C.
// hold_p is non-decreasing in x, so x >= x*, the least x with sum_p hold_p(x) >= C, and
// T >= m (x* + q) + v a. When even x = infinity leaves the sum below C (or a rank has no open option),
// no split fits. Crowding adds: some rank holds at least ceil(L / d) layers, so its c_p is at least the
// sum of the ceil(L / d) smallest, and x >= that too.
// At about uniform layers with memory to spare this is the average bound; it rises above it where the
// memory floor caps the ranks (a rank that must recompute, or ranks that cannot take their share).
#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>
#include <vector>

#include "chunk_floor.hpp"
#include "interleaved_floor.hpp"
#include "pd2bw/checked.hpp"
#include "pd2bw/pipeline/stash.hpp"
#include "step_bound.hpp"

namespace pd2bw::planner {

namespace {

// The sums of the n largest (or smallest) per-layer terms of a prefix-sum table, n = 0..L.
std::vector<double> sorted_layer_sums(const std::vector<double>& prefix, bool largest_first) {
  std::vector<double> per_layer, sums{0.0};
  for (size_t j = 0; j + 1 < prefix.size(); ++j) per_layer.push_back(prefix[j + 1] - prefix[j]);
  if (largest_first)
    std::sort(per_layer.begin(), per_layer.end(), std::greater<>());
  else
    std::sort(per_layer.begin(), per_layer.end());
  for (double x : per_layer) sums.push_back(sums.back() + x);
  return sums;
}

}  // namespace

const std::vector<double>& StepLowerBound::top_layers(size_t bi) {
  auto& top = top_layers_[bi];
  if (top.empty()) top = sorted_layer_sums(model_.compute_prefix(static_cast<int64_t>(bi)), true);
  return top;
}

const std::vector<double>& StepLowerBound::least_redo_layers(size_t bi) {
  auto& least = least_redo_layers_[bi];
  if (least.empty()) least = sorted_layer_sums(model_.redo_prefix(static_cast<int64_t>(bi)), false);
  return least;
}

double StepLowerBound::chunked_bound(const Candidate& c) {
  if (c.chunks < 2 || (c.schedule != Schedule::interleaved && c.schedule != Schedule::zb_v)) return 0.0;
  // x* depends on the memory floor's moments, which read m only as the walked count, and not on the width
  // or the placement: memoised for the candidates that differ only there.
  const auto key = std::make_tuple(c.schedule, c.depth, c.chunks,
                                   pipeline::walk_microbatches(c.schedule, c.depth, c.microbatches), c.microbatch_index);
  auto it = chunked_least_x_.find(key);
  if (it == chunked_least_x_.end()) it = chunked_least_x_.emplace(key, chunked_least_x(c)).first;
  const double x = it->second.x;
  if (!(x < kInfinity)) return kInfinity;
  const int64_t L = model_.num_layers();
  double q = kInfinity;
  for (size_t lv = 0; lv < model_.cluster().levels.size(); ++lv)
    q = std::min(q, 2.0 * model_.least_boundary_p2p_ms(c.microbatch_index, static_cast<int64_t>(lv)));
  if (c.depth < 2 || L < 2) q = 0.0;
  const double m = static_cast<double>(c.microbatches), a = least_chunk_held(c);
  // Rounding never lifts it above a cost.
  const double climb = chunked_climb_floor(c, it->second.redone);
  const double waits = c.schedule == Schedule::interleaved ? interleaved_wait_bound(c, it->second.redone) : 0.0;
  return (std::max({m * (x + q), climb, waits}) + static_cast<double>(c.chunks) * a) * (1.0 - 1e-9);
}

double StepLowerBound::interleaved_wait_bound(const Candidate& c, int64_t redone) {
  const int64_t L = model_.num_layers(), bi = c.microbatch_index;
  redone = std::clamp<int64_t>(redone, 0, L);
  auto [it, fresh] = wait_bound_.try_emplace({c.depth, c.chunks, c.microbatches, bi, redone}, 0.0);
  if (!fresh) return it->second;
  // Every split holds all of the model's fwd + bwd and the recompute of at least `redone` layers.
  const double total =
      model_.compute_prefix(bi).back() + least_redo_layers(static_cast<size_t>(bi))[static_cast<size_t>(redone)];
  return it->second = detail::interleaved_wait_floor(c.depth, c.chunks, static_cast<double>(c.microbatches), total);
}

double StepLowerBound::least_chunk_held(const Candidate& c) const {
  const int64_t grads = model_.static_factors(c.schedule).grads(least_layer_params_);
  return least_allreduce_ms(c.width, grads) + std::max(0.0, least_layer_update_);
}

double StepLowerBound::least_allreduce_ms(int64_t width, int64_t bytes) const {
  double a = kInfinity;
  const auto levels = static_cast<int64_t>(model_.cluster().levels.size());
  for (int64_t lv = 0; lv < levels; ++lv) {
    // w replicas sit on w distinct ranks, the first and last at least w - 1 apart: a level whose groups
    // hold fewer than w devices never holds them all (CostModel::level_between); the top level always can.
    if (model_.level_span(lv) < width && lv + 1 < levels) continue;
    a = std::min(a, model_.allreduce_ms(bytes, width, lv));
  }
  return a < kInfinity ? a : 0.0;
}

// The climb on any split. Chunk c holding layer l ends at or past l + 1 and holds at least l, so with the
// per-layer u (forward and backward, less W with a split backward) and U its prefix sums, its climb
// sum_{j < c} u_j + m u_c = U(end_c) + (m - 1) u_c >= U(l + 1) + (m - 1) u_l; recompute only adds, and so do
// rank 0's allreduces and update (the caller adds its v allreduces of at least least_allreduce_ms). The
// climb through the last chunk passes every chunk, so it adds the recompute of every layer on a
// recomputing rank: at least the `redone` smallest. With every layer redone (redone = L) every u has its
// recompute, at every l.
double StepLowerBound::chunked_climb_floor(const Candidate& c, int64_t redone) {
  const bool apart = pipeline::splits_backward(c.schedule);
  const int64_t L = model_.num_layers();
  redone = std::clamp<int64_t>(redone, 0, L);
  auto [it, fresh] = chunked_climb_.try_emplace({c.microbatch_index, c.microbatches, apart, redone}, 0.0);
  if (!fresh) return it->second;
  const auto& cp = model_.compute_prefix(c.microbatch_index);
  const std::vector<double> none(cp.size(), 0.0);  // nothing to add or take off
  const auto& wp = apart ? model_.weight_prefix(c.microbatch_index) : none;
  const auto& rp = redone == L ? model_.redo_prefix(c.microbatch_index) : none;
  const double m = static_cast<double>(c.microbatches);
  auto u = [&](size_t l) { return ((cp[l + 1] - cp[l]) + (rp[l + 1] - rp[l])) - (wp[l + 1] - wp[l]); };
  double best = 0.0;
  for (size_t l = 0; l + 1 < cp.size(); ++l)
    best = std::max(best, ((cp[l + 1] + rp[l + 1]) - wp[l + 1]) + (m - 1.0) * u(l));
  if (redone > 0 && redone < L) {  // through the last chunk, which holds the last layer
    const auto last = static_cast<size_t>(L - 1);
    const double redo = least_redo_layers(static_cast<size_t>(c.microbatch_index))[static_cast<size_t>(redone)];
    best = std::max(best, (cp.back() - wp.back()) + redo + (m - 1.0) * u(last));
  }
  return it->second = best;
}

StepLowerBound::ChunkedLeast StepLowerBound::chunked_least_x(const Candidate& c) {
  const auto caps = detail::chunked_rank_capacities(model_, c);
  if (caps.empty()) return {};
  const auto bi = static_cast<size_t>(c.microbatch_index);
  const auto& top = top_layers(bi);
  const int64_t L = model_.num_layers(), v = c.chunks;
  const double total = model_.compute_prefix(c.microbatch_index).back(), r = model_.min_redo_share(c.microbatch_index);
  const auto policy = model_.constraints().recompute;
  // Per rank the most compute each option can hold (-1: not open to it).
  std::vector<double> plain, redo;
  double most = 0.0;
  int64_t plain_layers = 0;  // the most layers the ranks that keep their stashes can hold
  for (const auto& cap : caps) {
    plain.push_back(policy != RecomputePolicy::always && cap.plain >= v ? top[static_cast<size_t>(std::min(cap.plain, L))] : -1.0);
    redo.push_back(policy != RecomputePolicy::never && cap.redo >= v ? top[static_cast<size_t>(std::min(cap.redo, L))] : -1.0);
    if (plain.back() < 0.0 && redo.back() < 0.0) return {kInfinity, 0};
    most += std::max(plain.back(), redo.back());
    if (plain.back() >= 0.0) plain_layers = saturating_add(plain_layers, std::min(cap.plain, L));
  }
  if (most < total * (1.0 - 1e-9)) return {kInfinity, 0};  // the ranks cannot hold every layer
  auto hold = [&](double x) {
    double sum = 0.0;
    for (size_t p = 0; p < plain.size(); ++p)
      sum += std::max(plain[p] < 0.0 ? 0.0 : std::min(x, plain[p]), redo[p] < 0.0 ? 0.0 : std::min(x / (1.0 + r), redo[p]));
    return sum;
  };
  // hold(lo) < need <= total all along, so the least x reaching total is above lo (need absorbs the
  // rounding of the sums of the largest layers, which may add up to a hair below total).
  const double need = std::min(total, most) * (1.0 - 1e-12);
  double lo = 0.0, hi = (1.0 + r) * total * (1.0 + 1e-9);
  for (int it = 0; it < 60 && hi - lo > 1e-7 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    (hold(mid) < need ? lo : hi) = mid;
  }
  const int64_t crowd = (L + c.depth - 1) / c.depth;
  return {std::max(lo, total - top[static_cast<size_t>(L - crowd)]), std::max<int64_t>(0, L - plain_layers)};
}

}  // namespace pd2bw::planner

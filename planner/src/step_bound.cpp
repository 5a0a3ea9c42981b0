// Lower bounds on a candidate's objective (step_objective; see step_bound.hpp), valid for every split.
// Write C for the whole model's fwd + bwd per microbatch, m for the microbatches per step and x_i for
// stage i's compute.
//
// Average: the objective is at least the largest stage busy time m (x + p2p) + allreduce + update, so
// at least the average one: m (C + forced recompute + the cheapest transfers the placement allows) plus the allreduces at
// the fastest level the replicas can span, over d. Flush adds the drain and refill above the slowest
// stage: the objective T is at least m x_k + x_0 + ... + x_{k-1} for every k, and d stages under that
// can hold at most T (1 - (1 - 1/m)^d) in all (by induction, x_0 + ... + x_{k-1} <= T (1 - (1 - 1/m)^k)),
// so T >= C / (1 - (1 - 1/m)^d). GPipe passes every layer once and one stage's (m - 1) more slots:
// T >= C + (m - 1) max_i x_i >= C (m + d - 1) / d.
//
// Forced recompute (forced_redo.hpp): memory makes every split recompute at least `redo` ms per
// microbatch; it adds to C in the average, in GPipe's fill and in flush's.
//
// Round trips: flush's stage k with m >= w_k + 2 waits for two round trips below it (objective.hpp), so its
// part is at least 2 X_{>=k}, and the cycle through stage 0 adds X_{<k} and h_0; each stage's lane caps
// X_{<k} at k T / m, so T >= (h_0 + 2 (C + redo)) / (1 + k / m) with k = max(0, d - m + 1) < d - 1.
//
// With recompute (step_bound_flush.cpp, asked through rules_out and so refined()): at a step time T, the
// stages' own memory and lanes force recompute on all but the compute W(f_k) their plain runs can hold,
// which lifts the round trips' 2 (C + redo) above ForcedRedo's.
//
// Fill: flush's cycle through stage 0 (objective.hpp) passes every stage's forward and backward once, with
// the forced recompute, crosses every boundary twice and ends in stage 0's allreduce and update; and some
// stage k's part adds (m - 1) more of its forwards or of its backwards, at least (m - 1) max(F, B) / d of
// the model's forwards F and backwards B: T >= h_0 + C + redo + 2 (d - 1) p + (m - 1) max(F, B) / d.
//
// ZB-H1's cycle through stage 0 and stage k (objective.hpp) is at least m x_k - n_k W_k + sum_{j<k}
// (x_j - W_j), with n_k = min(k + 1, m) W's after stage k's last B. Every layer's W is at most r (its
// fwd + bwd) plus its excess over that, r the model's W share and E the excesses summed, so
// T + (m + 1) E >= (m - n_k r) x_k + (1 - r) X_{<k} for every k; as for flush, taking each x_k as large
// as that allows holds the most, g (T + (m + 1) E) in all, so T >= C / g - (m + 1) E. And flush's two
// round trips below a stage k with m >= w_k + 2 give T >= 2 Y - Y_{<k}, Y the fwd + bwd less the W's.
// ZB-H2's fold has the same cycle with n_k = min(2 k + 1, m) (its W's deferred by 2 k) and no round
// trips, so the same recursion with those n_k bounds it (looser, as more W's trail).
//
// Crowding: d stages over L layers put ceil(L / d) layers on some stage, so its busy time m (x + p2p) +
// allreduce + update is at least m times the least fwd + bwd of that many consecutive layers plus the least
// p2p of a stage with a neighbour, plus the allreduce of the fewest gradients of that many at the fastest
// level and their least update (each term only grows with a layer more, so each is at least its least).
//
// Capacity: at step time T a stage's compute c (fwd + bwd per microbatch) obeys m (c + p2p) + allreduce
// <= T, so c <= x = (T - allreduce) / m - p2p with the least p2p and allreduce any stage has. A stage
// that recomputes spends at least (1 + r) c, r the smallest redo share of a layer, so c <= x / (1 + r).
// A stage that keeps f microbatches without recomputing holds layers with sum(static + f * stash)
// <= device memory - reserve, so c <= that capacity times the largest (fwd + bwd) / (static + f * stash)
// of a layer. Whatever the stages choose, their capacities must add up to the whole model's compute;
// the least x at which they do bounds T (and for GPipe, T >= C + (m - 1) x as well).
//
// Chunked ranks' memory (chunked_bound; the proof is in step_bound_chunked.cpp): a chunked rank's layers
// are not one run, so the capacity and lanes bounds do not apply; instead each rank holds at most the layers
// its memory floor allows (chunk_floor.hpp), at most their largest compute, and recomputes past its plain cap.
//
// Whole-layer lanes (lanes_reach; the proof is in step_bound_lanes.cpp): the capacity bound treats compute
// and memory as divisible, which at a few layers per stage and stashes that differ by stage position is
// far (2BW's optimum sat ~20% above it at 400 layers, zb-h1's ~3x, as its early stages keep d - i
// activations and i W stashes). A stage's lane over whole layers, priced with its own in-flight count
// and the model's smallest boundary tensors, never exceeds its real lane and grows with the run, so
// stages taking in turn the longest run within T reach the last layer whenever some split has every lane
// within T. refined() bisects rules_out (which holds this walk) between the cheap bound and a ceiling
// (the search's seeds): the largest limit it rules out bounds the candidate.
// (rules_out and its whole-layer walks: step_bound_rules.cpp; the link levels both use: step_bound_links.cpp.)
#include "step_bound.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <tuple>

#include "bisect.hpp"
#include "objective.hpp"
#include "pd2bw/planner/partition.hpp"
#include "step_bound_links.hpp"

namespace pd2bw::planner {

using detail::fastest_levels;
using detail::LinkLevels;

StepLowerBound::StepLowerBound(const CostModel& model) : StepLowerBound(model, nullptr) {}

StepLowerBound::StepLowerBound(const CostModel& model, std::shared_ptr<Shared> memos)
    : model_(model),
      smallest_(smallest_sums(model)),
      forced_redo_(model),
      shared_(memos ? std::move(memos) : std::make_shared<Shared>()) {
  const auto& p = model.profile();
  cap_bytes_ = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  for (size_t bi = 0; bi < p.microbatch_sizes.size(); ++bi) {
    add_layer_extremes(bi);
    add_weight_share(bi);
    add_prefix_flags(bi);
  }
  for (size_t i = 0; i < kSchedules; ++i)
    for (int64_t j = 0; j < model.num_layers(); ++j) {
      auto& top = max_layer_static_[i];
      top = std::max(top, model.static_bytes(static_cast<Schedule>(i), j, j + 1));
    }
  const int64_t dsize = schemas::dtype_bytes(p.model.dtype);
  for (const auto& l : p.layers) total_grad_bytes_ += l.param_bytes / dsize * 4;
  first_grad_bytes_ = p.layers.front().param_bytes / dsize * 4;
  least_layer_params_ = INT64_MAX;
  for (int64_t j = 0; j < model.num_layers(); ++j) {
    least_layer_params_ = std::min(least_layer_params_, model.param_prefix()[static_cast<size_t>(j + 1)] -
                                                            model.param_prefix()[static_cast<size_t>(j)]);
    least_layer_update_ = std::min(least_layer_update_, model.update_prefix()[static_cast<size_t>(j + 1)] -
                                                            model.update_prefix()[static_cast<size_t>(j)]);
  }
  for (auto* v : {&capacity_vals_, &capacity_sums_})
    for (auto& per_b : *v) per_b.assign(p.microbatch_sizes.size(), std::vector<double>{0.0});
  least_window_.resize(p.microbatch_sizes.size());
  top_layers_.resize(p.microbatch_sizes.size());
  least_redo_layers_.resize(p.microbatch_sizes.size());
}

void StepLowerBound::add_layer_extremes(size_t bi) {
  const auto& layers = model_.profile().layers;
  const size_t n = layers.size();
  double big = 0.0, fwd = 0.0, bwd = 0.0;
  int64_t small_out = INT64_MAX, small_in = INT64_MAX, any_in = INT64_MAX;
  for (size_t j = 0; j < n; ++j) {
    const auto& t = layers[j].per_microbatch[bi];
    big = std::max(big, t.fwd_ms + t.bwd_ms);
    fwd += t.fwd_ms;
    bwd += t.bwd_ms;
    if (j + 1 < n) small_out = std::min(small_out, t.output_bytes);
    if (j > 0) small_in = std::min(small_in, t.input_bytes);
    any_in = std::min(any_in, t.input_bytes);
  }
  max_layer_ms_.push_back(big);
  // From the cost model's prefixes (the times the walks price), layers with no compute left out.
  const auto& cp = model_.compute_prefix(static_cast<int64_t>(bi));
  const auto& fp = model_.fwd_prefix(static_cast<int64_t>(bi));
  double share = 1.0;
  for (size_t j = 0; j + 1 < cp.size(); ++j) {
    const double x = cp[j + 1] - cp[j];
    if (x > 0.0) share = std::min(share, std::max(0.0, x - (fp[j + 1] - fp[j])) / x);
  }
  bwd_share_.push_back(share);
  total_fwd_ms_.push_back(fwd);
  total_bwd_ms_.push_back(bwd);
  min_out_.push_back(n > 1 ? small_out : 0);
  min_in_.push_back(n > 1 ? small_in : 0);
  min_input_any_.push_back(n > 0 ? any_in : 0);
}

void StepLowerBound::add_weight_share(size_t bi) {
  const auto& cp = model_.compute_prefix(static_cast<int64_t>(bi));
  const auto& wp = model_.weight_prefix(static_cast<int64_t>(bi));
  const double share = cp.back() > 0.0 ? wp.back() / cp.back() : 0.0;
  double excess = 0.0;
  for (size_t j = 0; j + 1 < cp.size(); ++j) excess += std::max(0.0, (wp[j + 1] - wp[j]) - share * (cp[j + 1] - cp[j]));
  weight_share_.push_back(share);
  weight_excess_ms_.push_back(excess);
}

void StepLowerBound::add_prefix_flags(size_t bi) {
  const auto b = static_cast<int64_t>(bi);
  const auto& cp = model_.compute_prefix(b);
  const auto& wp = model_.weight_prefix(b);
  bool cp_up = true, y_up = true;
  for (size_t j = 0; j + 1 < cp.size(); ++j) {
    cp_up = cp_up && cp[j] <= cp[j + 1];
    y_up = y_up && cp[j] - wp[j] <= cp[j + 1] - wp[j + 1];
  }
  cp_sorted_.push_back(cp_up ? 1 : 0);
  y_sorted_.push_back(y_up ? 1 : 0);
  bool small = true;
  for (const auto* v : {&model_.stash_prefix(b), &model_.weight_stash_prefix(b), &model_.param_prefix()})
    for (size_t j = 0; j < v->size(); ++j)
      small = small && (*v)[j] >= 0 && (*v)[j] < (int64_t{1} << 40) && (j == 0 || (*v)[j - 1] <= (*v)[j]);
  bytes_small_.push_back(small ? 1 : 0);
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

double StepLowerBound::fill_bound(const Candidate& c, double redo) const {
  const auto bi = static_cast<size_t>(c.microbatch_index);
  const double all = model_.compute_prefix(c.microbatch_index).back();
  const double d = static_cast<double>(c.depth), m = static_cast<double>(c.microbatches);
  const LinkLevels lvl = fastest_levels(model_, c);
  const double h0 = model_.allreduce_ms(first_grad_bytes_, c.width, lvl.replicas) + model_.update_prefix()[1];
  const double fill = h0 + all + redo + least_fill_p2p(c) + (m - 1.0) * std::max(total_fwd_ms_[bi], total_bwd_ms_[bi]) / d;
  // The round trips below stage k = max(0, d - m + 1), the first whose warm-up w_k = d - k - 1 leaves
  // m >= w_k + 2, when it is not the last stage: T >= h_0 + C + redo + X_{>=k} >= h_0 + 2 (C + redo) - X_{<k},
  // and every stage's lane m x_j <= T gives X_{<k} <= k T / m.
  const int64_t k = std::max<int64_t>(0, c.depth - c.microbatches + 1);
  if (k > c.depth - 2) return fill;
  return std::max(fill, (h0 + 2.0 * (all + redo)) / (1.0 + static_cast<double>(k) / m));
}

double StepLowerBound::least_fill_p2p(const Candidate& c) const {
  if (c.depth < 2) return 0.0;
  // Some replica of a boundary may cross a faster level than the one its group spans (fastest_levels),
  // so each boundary is priced at the fastest level of all: cheap, and the fill is mostly compute.
  const auto bi = static_cast<size_t>(c.microbatch_index);
  double least = kInfinity;
  for (size_t lv = 0; lv < model_.cluster().levels.size(); ++lv)
    least = std::min(least, model_.p2p_ms(min_out_[bi], static_cast<int64_t>(lv)));
  return 2.0 * static_cast<double>(c.depth - 1) * least;
}

double StepLowerBound::capacity_bound(const Candidate& c, double redo) {
  const double total = model_.compute_prefix(c.microbatch_index).back();
  const double d = static_cast<double>(c.depth);
  double lo = total / d;  // no stage holds more than x, so x >= total / d
  // With recompute allowed every stage holds x / (1 + r) at least, so this hi suffices but for rounding.
  double hi = lo * (1.0 + model_.min_redo_share(c.microbatch_index)) * (1.0 + 1e-12);
  for (int i = 0; i < 64 && capacity_sum(c, hi) < total; ++i) hi *= 2.0;
  if (capacity_sum(c, hi) < total) {
    if (model_.constraints().recompute == RecomputePolicy::never) return kInfinity;  // memory caps the capacity
    return 0.0;  // cannot happen
  }
  for (int it = 0; it < 30 && hi - lo > 1e-6 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    (capacity_sum(c, mid) < total ? lo : hi) = mid;
  }
  const LinkLevels lvl = fastest_levels(model_, c);
  const double p2p = least_stage_p2p_ms(c);
  const double allreduce = model_.allreduce_ms(0, c.width, lvl.replicas);
  const double m = static_cast<double>(c.microbatches);
  const double lane = m * (lo + p2p) + allreduce;
  if (c.schedule != Schedule::gpipe) return lane;
  // GPipe's fill and drain passes every layer once, redoes the forward of whatever the stages cannot
  // hold with m stashes each, crosses every boundary twice and ends in stage 0's allreduce and update.
  const auto policy = model_.constraints().recompute;
  const double plain = policy == RecomputePolicy::always
                           ? 0.0
                           : model_.plain_capacity_ms(c.schedule, c.microbatch_index, c.microbatches);
  const double redone = std::max(0.0, total - d * std::min(plain, total));
  const double fill = total + std::max(redo, model_.min_redo_share(c.microbatch_index) * redone) + least_fill_p2p(c);
  const double h0 = model_.allreduce_ms(first_grad_bytes_, c.width, lvl.replicas) + model_.update_prefix()[1];
  return std::max(lane, fill + (m - 1.0) * lo + h0);
}

double StepLowerBound::average_bound(const Candidate& c, double redo) const {
  const auto bi = static_cast<size_t>(c.microbatch_index);
  const double d = static_cast<double>(c.depth);
  const double m = static_cast<double>(c.microbatches);
  const double all = model_.compute_prefix(c.microbatch_index).back();
  const LinkLevels lvl = fastest_levels(model_, c);
  double p2p = 0.0;
  if (c.depth > 1)
    p2p = (d - 1.0) * 4.0 * model_.p2p_ms(min_out_[bi], lvl.boundary);  // both ways, on both sides
  double sum = m * (all + redo + p2p) + model_.update_prefix().back();
  if (c.width > 1)  // one allreduce per chunk: d v of them
    sum += model_.allreduce_sum_floor(total_grad_bytes_, c.depth * c.chunks, c.width, lvl.replicas);
  double bound = std::max(sum / d, m * max_layer_ms_[bi]);
  if (c.schedule == Schedule::flush) bound = std::max(bound, all / (1.0 - std::pow(1.0 - 1.0 / m, d)));
  if (c.schedule == Schedule::gpipe) bound = std::max(bound, all * (m + d - 1.0) / d);
  return bound;
}

double StepLowerBound::zb_cycle_bound(const Candidate& c, double transfers) {
  const auto bi = static_cast<size_t>(c.microbatch_index);
  const double r = weight_share_[bi], m = static_cast<double>(c.microbatches);
  if (!(r < 1.0)) return 0.0;
  // held[d - 1]: X_{<d} at T + (m + 1) E = 1, grown on demand (a prefix of the same recursion for every d).
  auto& held = zb_held_[{bi, c.microbatches, c.schedule}];
  for (auto k = static_cast<int64_t>(held.size()); k < c.depth; ++k) {
    const double before = k > 0 ? held.back() : 0.0;
    const double after = zb_trailing(c, k);
    held.push_back(before + std::max(0.0, 1.0 - (1.0 - r) * before) / (m - after * r));
  }
  const double g = held[static_cast<size_t>(c.depth - 1)], excess = (m + 1.0) * weight_excess_ms_[bi];
  const double all = model_.compute_prefix(c.microbatch_index).back();
  double bound = g > 0.0 ? all / g - excess : 0.0;
  // The round trips: the first stage k with m >= w_k + 2 (k = max(1, d - m + 1)) has
  // T >= 2 Y_all - Y_{<k}, Y the fwd + bwd less W, and Y_{<k} <= X_{<k} <= held[k - 1] (T + (m + 1) E);
  // refined() adds the transfers of those round trips.
  const int64_t k = zb_round_trip_stage(c);
  if (c.schedule == Schedule::zb_h1 && k < c.depth) {
    const double all_y = all - model_.weight_prefix(c.microbatch_index).back();
    const double h = held[static_cast<size_t>(k - 1)];
    bound = std::max(bound, (2.0 * all_y + transfers - h * excess) / (1.0 + h));
  }
  return bound;
}

namespace {

// The least prefix[j + k] - prefix[j] over j (1 <= k < prefix.size()), memoised by k in `memo` (-1: not yet).
template <class T>
T least_window(std::vector<T>& memo, const std::vector<T>& prefix, int64_t k) {
  if (memo.empty()) memo.assign(prefix.size(), T(-1));
  T& v = memo[static_cast<size_t>(k)];
  if (v < T(0)) {
    v = std::numeric_limits<T>::max();
    for (size_t j = 0; j + static_cast<size_t>(k) < prefix.size(); ++j)
      v = std::min(v, prefix[j + static_cast<size_t>(k)] - prefix[j]);
  }
  return v;
}

}  // namespace

double StepLowerBound::least_window_ms(size_t bi, int64_t k) {
  return least_window(least_window_[bi], model_.compute_prefix(static_cast<int64_t>(bi)), k);
}

double StepLowerBound::crowded_bound(const Candidate& c) {
  const int64_t most = (model_.num_layers() + c.depth - 1) / c.depth;
  const auto bi = static_cast<size_t>(c.microbatch_index);
  const double m = static_cast<double>(c.microbatches);
  const int64_t params = least_window(least_params_, model_.param_prefix(), most);
  const int64_t grads = model_.static_factors(c.schedule).grads(params);
  const double update = least_window(least_update_, model_.update_prefix(), most);
  return m * (least_window_ms(bi, most) + least_stage_p2p_ms(c)) + least_allreduce_ms(c.width, grads) + update;
}

double StepLowerBound::least_stage_p2p_ms(const Candidate& c) const {
  if (c.depth < 2) return 0.0;
  const auto bi = static_cast<size_t>(c.microbatch_index);
  return 2.0 * model_.p2p_ms(std::min(min_out_[bi], min_in_[bi]), fastest_levels(model_, c).boundary);
}

double StepLowerBound::operator()(const Candidate& c) {
  const int64_t total_static = model_.static_bytes(c.schedule, 0, model_.num_layers());
  if (max_layer_static_[static_cast<size_t>(c.schedule)] > cap_bytes_ || total_static > saturating_mul(cap_bytes_, c.depth))
    return kInfinity;
  // A chunked rank's layers are not one run, and its chunks keep different counts: only the average and
  // one microbatch's climb through the model hold here; refined() adds chunked_bound, each rank's memory
  // floor (step_bound_chunked.cpp).
  if (c.chunks > 1) {
    const int64_t redone = model_.constraints().recompute == RecomputePolicy::always ? model_.num_layers() : 0;
    const double climb = chunked_climb_floor(c, redone) + static_cast<double>(c.chunks) * least_chunk_held(c);
    return std::max(average_bound(c, 0.0), climb) * (1.0 - 1e-9);
  }
  const double crowded = crowded_bound(c);
  const double redo = forced_redo_(c);
  const double fill = c.schedule == Schedule::flush   ? fill_bound(c, redo)
                     : c.schedule == Schedule::zb_h1 || c.schedule == Schedule::zb_h2 ? zb_cycle_bound(c, 0.0)
                                                     : 0.0;
  // Scaled down so that rounding never lifts the bound above an exact cost.
  return std::max({average_bound(c, redo), capacity_bound(c, redo), crowded, fill}) * (1.0 - 1e-9);
}

double StepLowerBound::zb_trailing(const Candidate& c, int64_t k) {
  return detail::trailing_weights(detail::weight_defer(c.schedule, k), static_cast<double>(c.microbatches));
}

int64_t StepLowerBound::zb_round_trip_stage(const Candidate& c) {
  return std::max<int64_t>(1, c.depth - c.microbatches + 1);
}

}  // namespace pd2bw::planner

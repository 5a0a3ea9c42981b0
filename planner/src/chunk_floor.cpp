// The chunked candidates' memory floor (chunk_floor.hpp).
//
// Why a candidate it rules out has no fitting split. Take a split and a rank p holding n_p layers in its
// v chunks. ChunkPricer::rank_memory prices the rank as
//   reserve + sum over its chunks j of (statics.total(params_j) + comm_j) + stash_peak(walk, bytes),
// with bytes_j = (stash_j, 0, wst_j) without recompute and (in_j, stash_j, wst_j) with it, where stash_j
// and wst_j are sums over the chunk's layers, in_j the input of its first layer. Then:
// (1) statics.total of a window is at least the sum of statics.total of its layers (state() divides
//     by the compute dtype's size, rounding down, and floor(a/c) + floor(b/c) <= floor((a+b)/c)); comm >= 0.
// (2) stash_peak is the largest weighted sum over the moments the walk keeps, the weights are >= 0, and
//     every moment of the op list is covered by (is <= everywhere than) one the walk keeps: counts only
//     rise between the ops that lower one, and the walk keeps the moment before each of those (the
//     recomputing walk with the stash of the chunk whose backward comes next rebuilt) and the last. So
//     the peak is at least the weighted sum at the closed-form moments of floor_moments: as they are
//     without recompute (rebuilt weighs 0 there) and with it (test_chunk_floor.cpp checks that both
//     walks cover them).
// (3) At such a moment with counts (a_j, w_j), let a = min_j a_j and w = min_j w_j. The rank's layers
//     are n_p distinct layers, so its memory is at least
//       reserve + F + S_static(n_p) + s S_stash(n_p) + w S_wst(n_p),
//     S_x(n) being the sum of the n smallest per-layer x (each such sum over the rank's layers is at
//     least that), with s = a, F = 0 without recompute and s = 0, F = sum_j a_j min_in_j with it (in_j is
//     at least the least input a chunk of that index can start at: layer 0's for model chunk 0, else the
//     least of layers 1..L-1). Rebuilt counts, on one chunk at a time, and the counts above the least
//     weigh as in (4).
// On a given split (chunked_split_may_fit) the rank's own bytes are weighed at the same moments: its
// memory is at least reserve + sum_j statics.total(params_j) + the moment's sum, without and with recompute.
// If the rank fits under the recompute choice the policy makes, its plain or its recomputing memory is
// within the limit, so n_p <= cap_p: the largest n for which, in one of the two options, every moment's
// bound stays within the limit. A split puts at least one layer in each chunk and every layer somewhere:
// n_p >= v and sum_p n_p = L. So when some cap_p < v, or sum_p cap_p < L, no split fits.
// (4) Every chunk holds at least one layer, so chunk j's stash X_j (a sum over its layers) is at least
// s_j, the least per-layer stash of a layer it may hold (model chunk 0 any, every other chunk one of
// layers 1..L-1), and sum_j X_j >= S_stash(n_p). Hence sum_j a_j X_j = a sum_j X_j + sum_j (a_j - a) X_j
// >= a S_stash(n_p) + sum_j (a_j - a) s_j, and the same for the weight stashes with w; with recompute,
// the rebuilt stash of the chunk whose backward follows is at least its s_j too. The bounds of (3) take
// these terms (at n_p >= v, the only n_p that fit).
#include "chunk_floor.hpp"

#include <algorithm>
#include <memory>

#include "bisect.hpp"
#include "pd2bw/checked.hpp"

namespace pd2bw::planner::detail {

namespace {

void fill_interleaved(int64_t d, int64_t v, int64_t m, int64_t i, std::vector<FloorMoment>& out) {
  // interleaved_units: the warm-up's forwards and, unless the step is all warm-up, the first steady
  // forward, before the first backward. Forward k runs on local chunk (k mod dv) / d.
  const int64_t total = m * v;
  const int64_t warm = m == d ? total : std::min(total, 2 * (d - i - 1) + (v - 1) * d);
  const int64_t f = std::min(total, warm + 1), cycle = d * v;
  out.resize(1);
  out[0].assign(static_cast<size_t>(v), {});
  for (int64_t j = 0; j < v; ++j)
    out[0][static_cast<size_t>(j)].activations = (f / cycle) * d + std::clamp(f % cycle - j * d, int64_t{0}, d);
  out[0][static_cast<size_t>(v - 1)].rebuilt = 1;  // the first backward is the last local chunk's
}

void fill_zbv(int64_t d, int64_t m, int64_t i, std::vector<FloorMoment>& out) {
  // zbv_units: just before the first B (of chunk 1) chunk 0 ran min(m, 2d - i - 1) forwards and chunk 1
  // min(m, i + 1). After the cool-down's i pairs of B's (every earlier W done, so the W's waiting are
  // those B's), chunk 0 holds max(0, min(m, d) - i) activations and min(i, m) W's, chunk 1 none and
  // max(0, i - max(0, d - m)) W's.
  // The B that follows is chunk 1's, then chunk 0's where chunk 0 still holds one.
  out.resize(2);
  out[0].assign(2, {});
  out[0][0].activations = std::min(m, 2 * d - i - 1);
  out[0][1] = {std::min(m, i + 1), 1, 0};
  out[1].assign(2, {});
  const int64_t left = std::max<int64_t>(0, std::min(m, d) - i);
  out[1][0] = {left, left > 0 ? 1 : 0, std::min(i, m)};
  out[1][1] = {0, 0, std::max<int64_t>(0, i - std::max<int64_t>(0, d - m))};
}

void fill_moments(Schedule kind, int64_t d, int64_t v, int64_t m, int64_t i, std::vector<FloorMoment>& out) {
  if (kind == Schedule::interleaved) return fill_interleaved(d, v, m, i, out);
  if (kind == Schedule::zb_v && v == 2) return fill_zbv(d, m, i, out);
  out.clear();
}

std::vector<int64_t> sorted_prefix(std::vector<int64_t> per_layer) {
  std::sort(per_layer.begin(), per_layer.end());
  std::vector<int64_t> out{0};
  for (int64_t x : per_layer) out.push_back(saturating_add(out.back(), x));
  return out;
}

// What a rank may spend on its layers: memory_limit_bytes() + slack (saturating; negative as 0) less
// the reserve.
int64_t layer_budget(const CostModel& model, int64_t slack_bytes) {
  return saturating_add(model.memory_limit_bytes(), std::max<int64_t>(slack_bytes, 0)) -
         model.constraints().reserve_bytes;
}

// The most layers n in [0, L] whose bound fixed + S_static(n) + s S_stash(n) + w S_wst(n) stays within
// budget; -1 when not even none does. The bound only grows with n, so a search from `guess` (a
// neighbouring rank's answer, mostly near; -1: none) finds the same n in O(log |n - guess|) tests.
int64_t most_layers(const FloorTable& t, int64_t budget, int64_t fixed, int64_t s, int64_t w, int64_t guess) {
  const auto bound = [&](int64_t n) {
    const auto u = static_cast<size_t>(n);
    return saturating_add(saturating_add(fixed, t.s_static[u]),
                          saturating_add(saturating_mul(s, t.s_stash[u]), saturating_mul(w, t.s_wst[u])));
  };
  if (bound(0) > budget) return -1;
  const int64_t top = static_cast<int64_t>(t.s_static.size()) - 1;
  const auto ok = [&](int64_t n) { return bound(n) <= budget; };
  return guess < 0 ? last_true(int64_t{0}, top, ok) : gallop_from(int64_t{0}, top, std::min(guess, top), ok);
}

// cap_p of the proof, per option: the most layers rank `position` can hold within budget at the
// moments given. Model chunk 0 (the first rank's first chunk) starts at layer 0, every other chunk past it.
// `near` (optional): each moment's two answers of the rank before, where the searches start; replaced
// by this rank's.
RankFloor rank_capacity(const FloorTable& t, const std::vector<FloorMoment>& moments, bool first_rank, int64_t budget,
                        bool split_backward, std::vector<int64_t>* near = nullptr) {
  if (near) near->resize(2 * moments.size(), -1);
  size_t at = 0;
  RankFloor cap{static_cast<int64_t>(t.s_static.size()) - 1, static_cast<int64_t>(t.s_static.size()) - 1};
  for (const FloorMoment& fm : moments) {
    int64_t a = INT64_MAX, w = INT64_MAX, fixed = 0;
    for (const auto& h : fm) {
      a = std::min(a, h.activations);
      w = std::min(w, split_backward ? h.weight_stashes : 0);
    }
    // (4) of the proof: every chunk's own counts above the least, and its rebuilt stash, weigh its one layer.
    int64_t above = 0, rebuilt = 0;
    for (size_t j = 0; j < fm.size(); ++j) {
      const auto& h = fm[j];
      const bool first = first_rank && j == 0;  // model chunk 0: it starts at layer 0
      fixed = saturating_add(fixed, saturating_mul(h.activations, first ? t.in_first : t.in_rest));
      const int64_t least_stash = first ? t.stash_first : t.stash_rest, least_wst = first ? t.wst_first : t.wst_rest;
      const int64_t wj = split_backward ? saturating_mul(h.weight_stashes - w, least_wst) : 0;
      above = saturating_add(above, saturating_add(saturating_mul(h.activations - a, least_stash), wj));
      rebuilt = saturating_add(rebuilt, saturating_add(saturating_mul(h.rebuilt, least_stash), wj));
    }
    int64_t* guess = near ? near->data() + 2 * at++ : nullptr;
    const int64_t plain = most_layers(t, budget, above, a, w, guess ? guess[0] : -1);
    const int64_t redo = most_layers(t, budget, saturating_add(fixed, rebuilt), 0, w, guess ? guess[1] : -1);
    if (guess) guess[0] = plain, guess[1] = redo;
    cap.plain = std::min(cap.plain, plain);
    cap.redo = std::min(cap.redo, redo);
  }
  return cap;
}

// Local chunk j's model chunk on `position` (pipeline::chunks_at without its list).
int64_t position_chunk(Schedule kind, int64_t d, int64_t position, int64_t j) {
  if (kind == Schedule::zb_v) return j == 0 ? position : 2 * d - 1 - position;
  return position + j * d;  // interleaved
}

bool chunked(const Candidate& c) {
  return c.chunks >= 2 && c.depth >= 1 && (c.schedule == Schedule::interleaved || c.schedule == Schedule::zb_v);
}

// The memory floor of rank `position` whose local chunk j holds layers [windows[j].first, windows[j].second)
// (chunked_rank_floor) at its closed-form moments.
RankFloor rank_floor_in(const CostModel& model, const Candidate& c, const ChunkWindows& windows,
                        const std::vector<FloorMoment>& moments) {
  const auto mi = c.microbatch_index;
  const auto& params = model.param_prefix();
  const auto& stash = model.stash_prefix(mi);
  const auto& wst = model.weight_stash_prefix(mi);
  const auto& in = model.input_bytes(mi);
  const StaticFactors& statics = model.static_factors(c.schedule);
  const bool split_backward = schemas::splits_backward(c.schedule);
  const auto window = [&](size_t j) {
    return std::make_pair(static_cast<size_t>(windows[j].first), static_cast<size_t>(windows[j].second));
  };
  int64_t fixed = model.constraints().reserve_bytes;
  for (size_t j = 0; j < windows.size(); ++j) {
    const auto [b, e] = window(j);
    fixed = saturating_add(fixed, statics.total(params[e] - params[b]));
  }
  RankFloor out{fixed, fixed};
  for (const FloorMoment& fm : moments) {
    int64_t plain = fixed, redo = fixed;
    for (size_t j = 0; j < fm.size(); ++j) {
      const auto [b, e] = window(j);
      const auto& h = fm[j];
      const int64_t w = split_backward ? saturating_mul(h.weight_stashes, wst[e] - wst[b]) : 0;
      plain = saturating_add(plain, saturating_add(saturating_mul(h.activations, stash[e] - stash[b]), w));
      redo = saturating_add(redo, saturating_add(saturating_add(saturating_mul(h.activations, in[b]), w),
                                                 saturating_mul(h.rebuilt, stash[e] - stash[b])));
    }
    out.plain = std::max(out.plain, plain);
    out.redo = std::max(out.redo, redo);
  }
  return out;
}

// The windows of rank `position`'s chunks on split `bounds`.
ChunkWindows windows_on(const Candidate& c, const std::vector<int64_t>& bounds, int64_t position) {
  ChunkWindows out;
  out.reserve(static_cast<size_t>(c.chunks));
  for (int64_t j = 0; j < c.chunks; ++j) {
    const auto k = static_cast<size_t>(position_chunk(c.schedule, c.depth, position, j));
    out.emplace_back(bounds[k], bounds[k + 1]);
  }
  return out;
}

RankFloor rank_floor_at(const CostModel& model, const Candidate& c, const std::vector<int64_t>& bounds,
                        int64_t position, const std::vector<FloorMoment>& moments) {
  return rank_floor_in(model, c, windows_on(c, bounds, position), moments);
}

// The same, `moments` scratch.
RankFloor rank_floor(const CostModel& model, const Candidate& c, const std::vector<int64_t>& bounds, int64_t position,
                     std::vector<FloorMoment>& moments) {
  fill_moments(c.schedule, c.depth, c.chunks, pipeline::walk_microbatches(c.schedule, c.depth, c.microbatches),
               position, moments);
  return rank_floor_at(model, c, bounds, position, moments);
}

}  // namespace

RankFloors::RankFloors(const CostModel& model, const Candidate& c) : model_(model), c_(c) {
  if (!chunked(c)) return;
  const int64_t m = pipeline::walk_microbatches(c.schedule, c.depth, c.microbatches);
  moments_.resize(static_cast<size_t>(c.depth));
  for (int64_t p = 0; p < c.depth; ++p)
    fill_moments(c.schedule, c.depth, c.chunks, m, p, moments_[static_cast<size_t>(p)]);
}

RankFloor RankFloors::operator()(const std::vector<int64_t>& bounds, int64_t position) const {
  if (moments_.empty()) return {};
  return rank_floor_at(model_, c_, bounds, position, moments_[static_cast<size_t>(position)]);
}

RankFloor RankFloors::in(int64_t position, const ChunkWindows& windows) const {
  if (moments_.empty()) return {};
  return rank_floor_in(model_, c_, windows, moments_[static_cast<size_t>(position)]);
}

std::vector<FloorMoment> floor_moments(Schedule kind, int64_t depth, int64_t chunks, int64_t microbatches,
                                       int64_t position) {
  std::vector<FloorMoment> out;
  fill_moments(kind, depth, chunks, microbatches, position, out);
  return out;
}

RankFloor chunked_rank_capacity(const CostModel& model, const Candidate& c, int64_t position, int64_t slack_bytes) {
  const auto L = model.num_layers();
  if (!chunked(c)) return {L, L};
  std::vector<FloorMoment> moments;
  fill_moments(c.schedule, c.depth, c.chunks, pipeline::walk_microbatches(c.schedule, c.depth, c.microbatches),
               position, moments);
  const int64_t budget = layer_budget(model, slack_bytes);
  return rank_capacity(*model.floor_table(c.schedule, c.microbatch_index), moments, position == 0, budget,
                       schemas::splits_backward(c.schedule));
}

std::vector<RankFloor> chunked_rank_capacities(const CostModel& model, const Candidate& c, int64_t slack_bytes) {
  std::vector<RankFloor> out;
  if (!chunked(c)) return out;
  const auto table = model.floor_table(c.schedule, c.microbatch_index);
  const int64_t budget = layer_budget(model, slack_bytes);
  const int64_t m = pipeline::walk_microbatches(c.schedule, c.depth, c.microbatches);
  std::vector<FloorMoment> moments;
  std::vector<int64_t> near;
  for (int64_t p = 0; p < c.depth; ++p) {
    fill_moments(c.schedule, c.depth, c.chunks, m, p, moments);
    out.push_back(rank_capacity(*table, moments, p == 0, budget, schemas::splits_backward(c.schedule), &near));
  }
  return out;
}

bool chunked_may_fit(const CostModel& model, const Candidate& c, int64_t slack_bytes) {
  const int64_t d = c.depth, v = c.chunks, L = model.num_layers();
  if (!chunked(c)) return true;
  if (d * v > L) return false;  // no split at all
  const auto table = model.floor_table(c.schedule, c.microbatch_index);
  const int64_t budget = layer_budget(model, slack_bytes);
  const int64_t m = pipeline::walk_microbatches(c.schedule, d, c.microbatches);
  const bool split_backward = schemas::splits_backward(c.schedule);
  std::vector<FloorMoment> moments;
  std::vector<int64_t> near;
  int64_t room = 0;
  for (int64_t p = 0; p < d; ++p) {
    fill_moments(c.schedule, d, v, m, p, moments);
    const RankFloor cap = rank_capacity(*table, moments, p == 0, budget, split_backward, &near);
    const int64_t most = std::max(cap.plain, cap.redo);
    if (most < v) return false;
    room = saturating_add(room, most);
  }
  return room >= L;
}

RankFloor chunked_rank_floor(const CostModel& model, const Candidate& c, const std::vector<int64_t>& bounds,
                             int64_t position) {
  if (!chunked(c)) return {};
  std::vector<FloorMoment> moments;
  return rank_floor(model, c, bounds, position, moments);
}

bool chunked_split_may_fit(const CostModel& model, const Candidate& c, const std::vector<int64_t>& bounds,
                           int64_t slack_bytes) {
  if (!chunked(c)) return true;
  const int64_t limit = saturating_add(model.memory_limit_bytes(), std::max<int64_t>(slack_bytes, 0));
  std::vector<FloorMoment> moments;
  for (int64_t p = 0; p < c.depth; ++p) {
    const RankFloor f = rank_floor(model, c, bounds, p, moments);
    if (f.plain > limit && f.redo > limit) return false;
  }
  return true;
}

std::shared_ptr<const FloorTable> make_floor_table(const CostModel& model, Schedule kind, int64_t microbatch_index) {
  const int64_t L = model.num_layers();
  const auto& params = model.param_prefix();
  const auto& stash = model.stash_prefix(microbatch_index);
  const auto& wst = model.weight_stash_prefix(microbatch_index);
  const auto& in = model.input_bytes(microbatch_index);
  const StaticFactors& statics = model.static_factors(kind);
  auto t = std::make_shared<FloorTable>();
  std::vector<int64_t> st, sh, w;
  for (int64_t l = 0; l < L; ++l) {
    const auto u = static_cast<size_t>(l);
    st.push_back(statics.total(params[u + 1] - params[u]));
    sh.push_back(stash[u + 1] - stash[u]);
    w.push_back(wst.empty() ? 0 : wst[u + 1] - wst[u]);
  }
  const auto least = [](const std::vector<int64_t>& x, size_t from) {
    return from < x.size() ? *std::min_element(x.begin() + static_cast<std::ptrdiff_t>(from), x.end()) : 0;
  };
  t->stash_first = least(sh, 0);
  t->stash_rest = L > 1 ? least(sh, 1) : t->stash_first;
  t->wst_first = least(w, 0);
  t->wst_rest = L > 1 ? least(w, 1) : t->wst_first;
  t->s_static = sorted_prefix(std::move(st));
  t->s_stash = sorted_prefix(std::move(sh));
  t->s_wst = sorted_prefix(std::move(w));
  t->in_first = L > 0 ? in[0] : 0;
  t->in_rest = L > 1 ? *std::min_element(in.begin() + 1, in.begin() + L) : t->in_first;
  return t;
}

}  // namespace pd2bw::planner::detail

// least_overage_split: the split whose fullest stage exceeds device memory the least.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "bisect.hpp"
#include "chunk_price.hpp"
#include "pd2bw/pipeline/memory.hpp"
#include "partition_internal.hpp"
#include "partition_overage.hpp"
#include "prepared.hpp"
#include "split_tables.hpp"

namespace pd2bw::planner {

using detail::make_windows;
using detail::StageTerms;

namespace {

// Layers split so that stages hold about equal parameter bytes; a quick starting bound.
std::vector<int64_t> balanced_by_params(const CostModel& model, int64_t d) {
  const auto& pp = model.param_prefix();
  const int64_t L = model.num_layers();
  std::vector<int64_t> bounds{0};
  for (int64_t i = 1; i < d; ++i) {
    const double target = static_cast<double>(pp.back()) * static_cast<double>(i) / static_cast<double>(d);
    int64_t e = static_cast<int64_t>(std::lower_bound(pp.begin(), pp.end(), static_cast<int64_t>(target)) - pp.begin());
    e = std::clamp(e, bounds.back() + 1, L - (d - i));
    bounds.push_back(e);
  }
  bounds.push_back(L);
  return bounds;
}

// A stage's bytes in the option the recompute policy picks. The tables compare bytes, not overages: their
// relative slack assumes values >= 0, and an overage is negative when a split fits.
int64_t stage_bytes(const detail::PreparedCandidate& pc, int64_t i, int64_t a, int64_t e) {
  const auto q = detail::quick_price(pc, i, a, e);
  return q.recompute ? q.redo_bytes : q.plain_bytes;
}

// A lower bound on a stage's bytes in the policy's option, non-decreasing as layers are added at either
// end: the stage priced as quick_price does, but with its input boundary the smallest of the boundaries
// [1, a] (stage 0: layer 0's own input) and its output the smallest of the boundaries [e, L - 1], and, under
// --recompute auto, the smaller of its plain and recomputing bytes (auto takes the plain stage when it
// fits even where recomputing is smaller). Parameters, stash and W stash are sums over the layers, and
// the buffers and stash terms only grow with them and with the boundary tensors, so for any stage i
// holding [a, e) and any [a', e') inside it with a' >= 1 when i > 0, least(i, a', e') <= bytes(i, a, e).
class LeastBytes {
 public:
  LeastBytes(const CostModel& model, const detail::PreparedCandidate& pc) : pc_(pc), L_(model.num_layers()) {
    const auto L = static_cast<size_t>(L_);
    in_min_.assign(L, pc.in_bytes[0]);  // a split's stages start below L
    for (size_t a = 1; a < L; ++a) in_min_[a] = a == 1 ? pc.in_bytes[1] : std::min(in_min_[a - 1], pc.in_bytes[a]);
    out_min_.assign(L + 1, 0);  // out_min_[L]: the last stage has no output buffer
    for (size_t e = L - 1; e >= 1; --e)
      out_min_[e] = e + 1 == L ? pc.out_bytes[e - 1] : std::min(out_min_[e + 1], pc.out_bytes[e - 1]);
  }
  // Requires a >= 1 when i > 0 and e < L when i < d - 1 (as every split has).
  int64_t operator()(int64_t i, int64_t a, int64_t e) const {
    const auto ua = static_cast<size_t>(a), ue = static_cast<size_t>(e);
    detail::QuickCost q{};
    q.in_bytes = i > 0 ? in_min_[ua] : pc_.in_bytes[0];
    q.stash_one = pc_.stash[ue] - pc_.stash[ua];
    if (pc_.split_backward()) q.weight_stash = pc_.weight_stash[ue] - pc_.weight_stash[ua];
    const int64_t comm = pipeline::comm_buffer_bytes(i, pc_.candidate.depth, q.in_bytes, out_min_[ue]);
    const int64_t base =
        saturating_add(pc_.statics.total(pc_.params[ue] - pc_.params[ua]), saturating_add(comm, pc_.reserve_bytes));
    const int64_t plain = saturating_add(base, detail::stash_of(pc_, i, false, q));
    const int64_t redo = saturating_add(base, detail::stash_of(pc_, i, true, q));
    switch (pc_.policy) {
      case RecomputePolicy::never: return plain;
      case RecomputePolicy::always: return redo;
      case RecomputePolicy::auto_: break;
    }
    return std::min(plain, redo);
  }

 private:
  const detail::PreparedCandidate& pc_;
  int64_t L_;
  std::vector<int64_t> in_min_, out_min_;
};

// What a forward walk decides besides its own cap: one that reached, its stages holding at most `need`
// bytes each, reaches at every cap >= need (each stage still ends at least as far from at least as far:
// least bytes only grow with a stage's run); one that did not, a layer more on any stage costing at least
// `next`, fails at every cap < next (each stage ends no further from no further).
struct WalkSpan {
  int64_t need = 0, next = INT64_MAX;
};

// The forward walk over whole layers under `cap` bytes: g_0 = 0 and g_{k+1} is the furthest end of a stage
// k starting at g_k within the cap by `least` (g_k itself, an empty stage, when not one layer is). Every
// split with each stage within the cap has a_k <= g_k (when a_k <= g_k < a_{k+1}, [g_k, a_{k+1}) lies
// inside stage k, so its least bytes are within the cap), so false (g_d < L) proves there is none. When
// `hi` is given, caps hi[k] at g_k; when `span` is, fills it. O(d log) probes.
bool walk_forward(const LeastBytes& least, int64_t L, int64_t d, int64_t cap, std::vector<int64_t>* hi,
                  WalkSpan* span = nullptr) {
  int64_t g = 0, length = 1;
  for (int64_t k = 0; k < d; ++k) {
    if (g < k) return false;  // stage k starts at layer k or later
    if (hi) (*hi)[static_cast<size_t>(k)] = std::min((*hi)[static_cast<size_t>(k)], g);
    const int64_t last = k + 1 == d ? L : L - (d - 1 - k);
    const int64_t from = g;
    auto ok = [&](int64_t e) { return least(k, from, e) <= cap; };
    // Neighbouring stages hold about as many layers: the last stage's length is the first probe.
    const int64_t guess = std::min(std::max(from, last), from + std::max<int64_t>(1, length));
    if (guess > from && ok(guess))
      g = detail::gallop(guess, std::max(from, last), ok);
    else
      g = guess > from ? detail::last_true(from, guess - 1, [&](int64_t e) { return e == from || ok(e); }) : from;
    length = g - from;
    if (span && g > from) span->need = std::max(span->need, least(k, from, g));
    if (span && g < last) span->next = std::min(span->next, least(k, from, g + 1));
  }
  return g >= L;
}

// The least cap >= 0 at which the forward walk reaches the last layer, at most `bound` (none when it does
// not reach at `bound`): walks galloping down from there, each moving the known ends by what it decides.
std::optional<int64_t> least_reaching_cap(const LeastBytes& least, int64_t L, int64_t d, int64_t bound) {
  WalkSpan span;
  if (bound < 0 || !walk_forward(least, L, d, bound, nullptr, &span)) return std::nullopt;
  int64_t ok_at = span.need, lo = 0, step = 1;  // the walk reaches at ok_at and fails below lo
  while (lo < ok_at) {
    const int64_t probe = std::max(lo, ok_at - step);
    WalkSpan s;
    if (walk_forward(least, L, d, probe, nullptr, &s)) {
      ok_at = std::min(probe, s.need);
      step *= 2;
    } else {
      lo = std::max(probe + 1, s.next);
      step = std::max<int64_t>(1, (ok_at - lo) / 2);
    }
  }
  return ok_at;
}

// Narrows the tables' start windows to the starts a split with every stage within `cap` bytes can have:
// a_k <= g_k by the forward walk, and backward, h_d = L and h_k the nearest start of a stage k ending at
// h_{k+1} within the cap, a_k >= h_k likewise. False when the windows close (no split is within the cap).
bool narrow_starts(const LeastBytes& least, int64_t L, int64_t d, int64_t cap, std::vector<int64_t>& lo,
                   std::vector<int64_t>& hi) {
  if (!walk_forward(least, L, d, cap, &hi)) return false;
  int64_t h = L;
  for (int64_t k = d - 1; k >= 0; --k) {
    if (h > L - (d - 1 - k)) return false;  // stages k + 1.. need a layer each
    const int64_t to = h;
    // The smallest a in [k, to] within the cap (true on a suffix), galloping down from `to`.
    const auto within_back = [&](int64_t back) { return least(k, to - back, to) <= cap; };
    h = to - detail::gallop<int64_t>(0, std::max<int64_t>(0, to - k), within_back);
    lo[static_cast<size_t>(k)] = std::max(lo[static_cast<size_t>(k)], h);
    if (lo[static_cast<size_t>(k)] > hi[static_cast<size_t>(k)]) return false;
  }
  return h == 0;
}

// The least-overage split among those whose every stage is within `cap` bytes, from the tables over the
// starts narrow_starts leaves: nullopt when there is none. The tables' choice among equal splits does not
// depend on their bound, and every stage of the split they choose is within its fullest stage, so for any
// cap at or above the least fullest stage they choose the same split. Returns it and its fullest stage.
std::optional<std::pair<std::vector<int64_t>, int64_t>> split_within(const CostModel& model,
                                                                    const detail::PreparedCandidate& pc,
                                                                    const LeastBytes& least, const detail::Windows& w,
                                                                    int64_t cap) {
  const Candidate& c = pc.candidate;
  const int64_t L = model.num_layers();
  std::vector<int64_t> start_lo = w.start_lo, start_hi = w.start_hi;
  if (!narrow_starts(least, L, c.depth, cap, start_lo, start_hi)) return std::nullopt;
  const detail::SplitTables<detail::TwoBwFold> tables(
      L, c.depth, 1.0, static_cast<double>(cap), start_lo, start_hi, [&](int64_t i, int64_t a) { return w.hi(i, a); },
      [&](int64_t i, int64_t a, int64_t e) -> std::optional<StageTerms> {
        StageTerms s;
        s.lane = static_cast<double>(stage_bytes(pc, i, a, e));
        return s;
      },
      [&](int64_t, int64_t a, int64_t e) {
        return static_cast<double>(model.static_bytes(c.schedule, a, e) + model.constraints().reserve_bytes);
      },
      [](int64_t, int64_t) { return 0.0; });
  const auto* best = tables.best();
  // The tables check no state of a last stage against the bound: one stage comes back whatever it is.
  if (!best || static_cast<int64_t>(best->v[0]) > cap) return std::nullopt;
  return std::make_pair(tables.bounds(best), static_cast<int64_t>(best->v[0]));
}

// Whether the split that takes for each stage its furthest end within `cap` bytes (its real bytes) reaches
// the last layer: when it does, some split is within the cap.
bool greedy_within(const CostModel& model, const detail::PreparedCandidate& pc, int64_t cap) {
  const int64_t L = model.num_layers(), d = pc.candidate.depth;
  int64_t a = 0;
  for (int64_t k = 0; k < d; ++k) {
    const int64_t last = k + 1 == d ? L : L - (d - 1 - k);
    int64_t furthest = -1;
    for (int64_t e = a + 1; e <= last; ++e) {
      if (model.static_bytes(pc.candidate.schedule, a, e) + pc.reserve_bytes > cap) break;
      if ((k + 1 < d || e == L) && stage_bytes(pc, k, a, e) <= cap) furthest = e;
    }
    if (furthest < 0) return false;
    a = furthest;
  }
  return a == L;
}

// The least fullest stage (bytes) of any split of pc's candidate when it is at most `bound`, or nullopt;
// `w` gets the windows the tables use when they are needed. The least cap at which the forward walk
// passes is a lower bound on it; when the greedy split is within that cap, it is the answer. Otherwise
// the tables run under caps from it up to the bound (at most the balanced split's fullest stage), growing
// geometrically, until one holds a split (narrow windows make each try cheap).
std::optional<int64_t> least_fullest(const CostModel& model, const detail::PreparedCandidate& pc, int64_t bound,
                                     std::optional<detail::Windows>& w) {
  const Candidate& c = pc.candidate;
  const int64_t L = model.num_layers();
  const LeastBytes least(model, pc);
  const auto reached = least_reaching_cap(least, L, c.depth, bound);
  if (!reached) return std::nullopt;  // its first walk is the cheapest test: most candidates end there
  const int64_t floor_cap = *reached;
  if (greedy_within(model, pc, floor_cap)) return floor_cap;
  const auto start = balanced_by_params(model, c.depth);
  int64_t most = 0;  // the balanced split's fullest stage
  for (int64_t i = 0; i < c.depth; ++i)
    most = std::max(most, stage_bytes(pc, i, start[static_cast<size_t>(i)], start[static_cast<size_t>(i + 1)]));
  bound = std::min(bound, most);
  // Every stage holds at least its static bytes and the reserve: that narrows the windows.
  w = make_windows(model, pc, kInfinity, bound - pc.reserve_bytes, false, true);
  if (!w || floor_cap > bound) return std::nullopt;
  for (int64_t step = std::max<int64_t>(1, (bound - floor_cap) >> 20), cap = floor_cap;; step *= 8) {
    if (const auto split = split_within(model, pc, least, *w, cap)) return split->second;
    if (cap == bound) return std::nullopt;
    cap = bound - cap <= step ? bound : cap + step;
  }
}

}  // namespace

bool detail::overage_walk_reaches(const CostModel& model, const Candidate& c, int64_t cap) {
  const auto pc = detail::prepare_memory(model, c);
  return cap >= 0 && walk_forward(LeastBytes(model, pc), model.num_layers(), c.depth, cap, nullptr);
}

int64_t detail::least_walk_cap(const CostModel& model, const Candidate& c, int64_t bound) {
  const auto pc = detail::prepare_memory(model, c);
  return least_reaching_cap(LeastBytes(model, pc), model.num_layers(), c.depth, bound).value_or(-1);
}

int64_t detail::least_overage_bytes(const CostModel& model, const Candidate& c, int64_t bound_bytes) {
  if (c.depth < 1 || c.depth > model.num_layers()) return INT64_MAX;
  if (c.chunks > 1) {
    const auto o = detail::chunked_least_overage_split(model, c, bound_bytes);
    return o.bounds.empty() ? INT64_MAX : o.over_bytes;
  }
  const auto pc = detail::prepare_memory(model, c);
  const int64_t limit = model.memory_limit_bytes();
  std::optional<detail::Windows> w;
  const auto fullest = least_fullest(model, pc, saturating_add(limit, bound_bytes), w);
  return fullest ? *fullest - limit : INT64_MAX;
}

OverageSplit least_overage_split(const CostModel& model, const Candidate& c, int64_t bound_bytes) {
  OverageSplit out;
  if (c.depth < 1 || c.depth > model.num_layers()) return out;
  if (c.chunks > 1) return detail::chunked_least_overage_split(model, c, bound_bytes);
  out.over_bytes = INT64_MAX;
  const auto pc = detail::prepare_memory(model, c);
  const int64_t limit = model.memory_limit_bytes();
  std::optional<detail::Windows> w;
  const auto fullest = least_fullest(model, pc, saturating_add(limit, bound_bytes), w);
  if (!fullest) return out;
  if (!w) w = make_windows(model, pc, kInfinity, *fullest - pc.reserve_bytes, false, true);
  if (!w) return out;  // not reached: some split is within the cap
  // At the least fullest stage itself the tables hold the split they would choose under any larger bound.
  auto split = split_within(model, pc, LeastBytes(model, pc), *w, *fullest);
  if (!split) return out;  // not reached: the cap is some split's fullest stage
  out.bounds = std::move(split->first);
  out.over_bytes = split->second - limit;
  return out;
}

}  // namespace pd2bw::planner

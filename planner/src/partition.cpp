// Exact splitting of the layers into contiguous stages for the search's objective: windows from an upper
// bound on the step time, the dynamic program of split_tables.hpp over them, the enumeration of every
// split below a limit, and the least-overage split.
#include "pd2bw/planner/partition.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "bisect.hpp"
#include "chunk_price.hpp"
#include "prepared.hpp"
#include "split_tables.hpp"

namespace pd2bw::planner {

namespace {

using detail::StageTerms;

StageTerms terms_of(const detail::QuickCost& q, double m, int64_t stage, const Candidate& c) {
  return detail::stage_terms(m, stage, c.depth,
                             {q.compute_ms, q.p2p_ms, q.forward_ms, q.backward_ms, q.weight_ms, q.in_ms, q.out_ms,
                              q.allreduce_ms, q.update_ms},
                             detail::weight_defer(c.schedule, stage));
}

// The largest parameter bytes whose static memory (weights, master, grads, optimizer) fits `cap` bytes.
int64_t params_within(const StaticFactors& f, int64_t cap) {
  if (cap < 0) return -1;
  // Static bytes are at least the parameter bytes and total() never falls (it saturates at INT64_MAX).
  return detail::last_true(int64_t{0}, cap, [&](int64_t p) { return f.total(p) <= cap; });
}

// The least per-microbatch p2p a stage of `pc` can have: each boundary it has moves at least the smallest
// boundary tensor, twice, over the fastest of its levels.
double least_p2p(const CostModel& model, int64_t bi, const detail::PreparedStage& st) {
  auto least = [&](const std::vector<int64_t>& levels) {
    double out = kInfinity;
    for (int64_t lv : levels) out = std::min(out, model.least_boundary_p2p_ms(bi, lv));
    return levels.empty() ? 0.0 : 2.0 * out;
  };
  return least(st.in_levels) + least(st.out_levels);
}

// Per stage, the most compute (fwd + bwd per microbatch) it can hold in a split whose objective is <= bound:
// its busy time m (compute + p2p) + allreduce <= bound with at least its least p2p and allreduce latency;
// a stage that recomputes pays at least (1 + the smallest redo share) times its compute, and one that
// does not must fit its stash (CostModel::plain_capacity_ms). GPipe also runs (m - 1) of each slot after
// one microbatch has passed every layer: (m - 1) compute <= bound - all layers' compute.
// With `lanes_only` the bound is on the busiest stage alone.
std::vector<double> stage_compute_caps(const CostModel& model, const detail::PreparedCandidate& pc, double bound,
                                       bool lanes_only) {
  const Candidate& c = pc.candidate;
  const double m = static_cast<double>(c.microbatches);
  const double share = model.min_redo_share(c.microbatch_index);
  const double all = model.compute_prefix(c.microbatch_index).back();
  const auto policy = model.constraints().recompute;
  std::vector<double> caps;
  for (int64_t i = 0; i < c.depth; ++i) {
    const auto& st = pc.stages[static_cast<size_t>(i)];
    const double latency = st.ar_level >= 0 ? model.allreduce_ms(0, c.width, st.ar_level) : 0.0;
    double x = (bound - latency) / m - least_p2p(model, c.microbatch_index, st);
    if (!lanes_only && c.schedule == Schedule::gpipe && c.microbatches > 1) x = std::min(x, (bound - all) / (m - 1.0));
    const double plain = std::min(x, model.plain_capacity_ms(c.schedule, c.microbatch_index, st.in_flight));
    const double redo = x / (1.0 + share);
    const double cap = policy == RecomputePolicy::never    ? plain
                       : policy == RecomputePolicy::always ? redo
                                                           : std::max(plain, redo);
    caps.push_back(cap * (1.0 + 1e-9));  // slack for rounding: the caps only prune
  }
  return caps;
}

// Where each stage may start and end for splits whose objective is <= bound: hi(i, a) is the furthest
// end of stage i starting at a (its compute cap and static memory), and start_lo / start_hi bound the
// starts from which the later stages can still reach the last layer / that the earlier stages can reach.
struct Windows {
  std::vector<double> caps;
  int64_t max_params = 0;
  std::vector<int64_t> start_lo, start_hi;
  const std::vector<double>* cp = nullptr;
  const std::vector<int64_t>* pp = nullptr;

  int64_t hi(int64_t i, int64_t a) const {
    const auto& c = *cp;
    const auto by_compute = std::upper_bound(c.begin() + a, c.end(), c[static_cast<size_t>(a)] + caps[static_cast<size_t>(i)]);
    const auto& p = *pp;
    const auto by_memory = std::upper_bound(p.begin() + a, p.end(), p[static_cast<size_t>(a)] + max_params);
    return std::min(by_compute - c.begin(), by_memory - p.begin()) - 1;
  }
  // Smallest start of stage i ending at e.
  int64_t lo(int64_t i, int64_t e) const {
    const auto& c = *cp;
    const auto by_compute = std::lower_bound(c.begin(), c.begin() + e, c[static_cast<size_t>(e)] - caps[static_cast<size_t>(i)]);
    const auto& p = *pp;
    const auto by_memory = std::lower_bound(p.begin(), p.begin() + e, p[static_cast<size_t>(e)] - max_params);
    return std::max(by_compute - c.begin(), by_memory - p.begin());
  }
};

// Windows for `bound`; nullopt when no split can fit them.
std::optional<Windows> make_windows(const CostModel& model, const detail::PreparedCandidate& pc, double bound,
                                    int64_t static_cap, bool use_caps, bool lanes_only) {
  const Candidate& c = pc.candidate;
  const int64_t L = model.num_layers(), d = c.depth;
  Windows w;
  w.caps = use_caps ? stage_compute_caps(model, pc, bound, lanes_only)
                    : std::vector<double>(static_cast<size_t>(d), kInfinity);
  w.max_params = params_within(pc.statics, static_cap);
  w.cp = &model.compute_prefix(c.microbatch_index);
  w.pp = &model.param_prefix();
  if (w.max_params < 0) return std::nullopt;
  w.start_hi.assign(static_cast<size_t>(d), 0);
  w.start_lo.assign(static_cast<size_t>(d), 0);
  for (int64_t i = 1; i < d; ++i) {  // furthest start: each earlier stage as long as allowed
    const int64_t prev = w.start_hi[static_cast<size_t>(i - 1)];
    w.start_hi[static_cast<size_t>(i)] = std::min(w.hi(i - 1, prev), L - (d - i));
    if (w.start_hi[static_cast<size_t>(i)] < i) return std::nullopt;
  }
  int64_t need = L;  // earliest start from which stages i..d-1 reach L
  for (int64_t i = d - 1; i >= 0; --i) {
    need = std::max(w.lo(i, need), i);
    w.start_lo[static_cast<size_t>(i)] = need;
    if (need > w.start_hi[static_cast<size_t>(i)]) return std::nullopt;
  }
  if (w.hi(d - 1, w.start_hi[static_cast<size_t>(d - 1)]) < L) return std::nullopt;
  return w;
}

// Runs `body` with the fold of c's schedule.
template <class Body>
auto with_fold(Schedule s, Body&& body) {
  switch (s) {
    case Schedule::flush: return body(detail::FlushFold{});
    case Schedule::gpipe: return body(detail::GpipeFold{});
    case Schedule::zb_h1: return body(detail::ZbH1Fold{});
    case Schedule::zb_h2: return body(detail::ZbH2Fold{});
    case Schedule::two_bw:
    case Schedule::interleaved:
    case Schedule::zb_v: break;
  }
  return body(detail::TwoBwFold{});
}

// The tables of `c` for splits with objective <= bound, with the pricing they were built from.
template <class Fold>
struct Solved {
  detail::PreparedCandidate pc;
  Windows windows;
  std::optional<detail::SplitTables<Fold>> tables;
};

template <class Fold>
double stage_floor_of(const CostModel& model, const Candidate& c, int64_t a, int64_t e) {
  const auto& cp = model.compute_prefix(c.microbatch_index);
  const double m = static_cast<double>(c.microbatches);
  const double work = cp[static_cast<size_t>(e)] - cp[static_cast<size_t>(a)];
  if constexpr (std::is_same_v<Fold, detail::FlushFold>) return cp[static_cast<size_t>(a)] + m * work;
  if constexpr (std::is_same_v<Fold, detail::GpipeFold>) return cp.back() + (m - 1.0) * work;
  if constexpr (detail::kSplitFold<Fold>) {  // the layers before, and this stage, less their W's
    const auto& wp = model.weight_prefix(c.microbatch_index);
    const double before = cp[static_cast<size_t>(a)] - wp[static_cast<size_t>(a)];
    return std::max(m * work, before + m * (work - (wp[static_cast<size_t>(e)] - wp[static_cast<size_t>(a)])));
  }
  return m * work;
}

template <class Fold>
void solve(const CostModel& model, const detail::PreparedCandidate& prepared, double bound, Solved<Fold>& out,
           int64_t max_work) {
  const Candidate& c = prepared.candidate;
  out.pc = prepared;
  const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  auto w = make_windows(model, out.pc, bound, static_cap, true, std::is_same_v<Fold, detail::TwoBwFold>);
  if (!w) return;
  out.windows = std::move(*w);
  const auto& win = out.windows;
  const auto& pc = out.pc;
  const auto& cp = model.compute_prefix(c.microbatch_index);
  const double m = static_cast<double>(c.microbatches);
  out.tables.emplace(
      model.num_layers(), c.depth, m, bound, win.start_lo, win.start_hi,
      [&](int64_t i, int64_t a) { return win.hi(i, a); },
      [&](int64_t i, int64_t a, int64_t e) -> std::optional<StageTerms> {
        const auto q = detail::quick_price(model, pc, i, a, e);
        if (!q.feasible) return std::nullopt;
        return terms_of(q, m, i, c);
      },
      [&](int64_t, int64_t a, int64_t e) { return stage_floor_of<Fold>(model, c, a, e); },
      [&](int64_t a) {  // what layers [0, a) add to the drain and refill: zb-h1's W's are not on it
        const double fb = cp[static_cast<size_t>(a)];
        if constexpr (detail::kSplitFold<Fold>)
          return fb - model.weight_prefix(c.microbatch_index)[static_cast<size_t>(a)];
        return fb;
      }, max_work);
}

// A feasible split found greedily (each stage as long as allowed) with every stage's busy time <= t, or
// empty.
std::vector<int64_t> greedy_split(const CostModel& model, const detail::PreparedCandidate& pc, double t,
                                  int64_t static_cap) {
  const int64_t L = model.num_layers();
  const int64_t d = pc.candidate.depth;
  const auto& cp = model.compute_prefix(pc.candidate.microbatch_index);
  const double m = static_cast<double>(pc.candidate.microbatches);
  std::vector<int64_t> bounds{0};
  int64_t a = 0;
  for (int64_t i = 0; i < d; ++i) {
    const int64_t last = i == d - 1 ? L : L - (d - 1 - i);
    // The furthest end whose compute and static memory fit, then the furthest below it that fits in
    // full, by bisection (fitting is nearly monotone in the end; a greedy split only bounds from above).
    int64_t top = a;
    while (top < last && m * (cp[static_cast<size_t>(top + 1)] - cp[static_cast<size_t>(a)]) <= t &&
           model.static_bytes(pc.candidate.schedule, a, top + 1) <= static_cap)
      ++top;
    auto fits = [&](int64_t e) {
      const auto q = detail::quick_price(model, pc, i, a, e);
      return q.feasible && q.step_ms <= t;
    };
    int64_t pick = -1;
    if (i == d - 1) {
      if (top == L && fits(L)) pick = L;
    } else if (top > a && fits(a + 1)) {
      pick = detail::last_true(a + 1, top, fits);
    }
    if (pick < 0) return {};
    bounds.push_back(pick);
    a = pick;
  }
  return bounds;
}

// step_objective of `bounds`, priced through pc.
double objective_of(const CostModel& model, const detail::PreparedCandidate& pc, const std::vector<int64_t>& bounds) {
  std::vector<StageCost> stages;
  for (int64_t i = 0; i < pc.candidate.depth; ++i)
    stages.push_back(detail::price_stage(model, pc, i, bounds[static_cast<size_t>(i)], bounds[static_cast<size_t>(i + 1)]));
  return step_objective(pc.candidate, stages);
}

// The greedy split (greedy_split) at the least busy-time threshold that has one, by bisection on that
// threshold, priced with the full objective, or with its busiest stage when `lanes_only`; infeasible when
// no threshold up to `known` has one.
Split greedy_of(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap, double known,
                bool lanes_only = false) {
  const auto& cp = model.compute_prefix(pc.candidate.microbatch_index);
  const double m = static_cast<double>(pc.candidate.microbatches);
  Split out;
  auto attempt = [&](double t) {
    auto split = greedy_split(model, pc, t, static_cap);
    if (split.empty()) return false;
    out.bounds = std::move(split);
    return true;
  };
  double lo = m * cp.back() / static_cast<double>(pc.candidate.depth);
  double hi = lo;
  for (int doublings = 0; !attempt(hi); hi *= 2.0)
    if (++doublings > 40 || hi > known) return {};
  for (int it = 0; it < 10 && hi - lo > 1e-3 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    (attempt(mid) ? hi : lo) = mid;
  }
  out.step_ms = lanes_only ? hi : objective_of(model, pc, out.bounds);
  return out;
}

// An upper bound on the optimum from greedy_of, never above `known` (the DP's work grows with the gap
// between its bound and the optimum, and a greedy run is cheap).
double greedy_bound(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap, double known,
                    bool lanes_only = false) {
  return std::min(known, greedy_of(model, pc, static_cap, known, lanes_only).step_ms);
}

template <class Fold>
Split optimum_below(const CostModel& model, const detail::PreparedCandidate& pc, double bound,
                    int64_t max_work = INT64_MAX) {
  Split out;
  Solved<Fold> solved;
  solve<Fold>(model, pc, bound, solved, max_work);
  if (!solved.tables) return out;
  out.exhausted = solved.tables->exhausted();
  const auto* best = solved.tables->best();
  if (!best) return out;
  out.bounds = solved.tables->bounds(best);
  out.step_ms = best->v[0];
  return out;
}

Split balanced_split_of(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap);

template <class Fold>
Split best_split_with(const CostModel& model, const Candidate& c, double upper_bound_ms, int64_t max_work) {
  const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  // A greedy split's objective narrows the windows; when the greedy finds nothing (memory binds before
  // time does), the windows come from memory alone and the DP is still exact.
  const auto pc = detail::prepare(model, c);
  // Windows that cannot reach the last layer under the given bound rule out every split at once.
  if (upper_bound_ms < kInfinity &&
      !make_windows(model, pc, upper_bound_ms, static_cap, true, std::is_same_v<Fold, detail::TwoBwFold>))
    return {};
  Split greedy = greedy_of(model, pc, static_cap, upper_bound_ms);
  Split out = optimum_below<Fold>(model, pc, std::min(upper_bound_ms, greedy.step_ms), max_work);
  if (out.exhausted) {  // the cheapest split at hand: the greedy one, else the balanced one
    if (!greedy.feasible()) greedy = greedy_of(model, pc, static_cap, kInfinity);
    out = greedy.feasible() ? std::move(greedy) : balanced_split_of(model, pc, static_cap);
    out.exhausted = true;
    return out;
  }
  if (!(out.step_ms <= upper_bound_ms)) return {};
  return out;
}

// The split with the least busiest stage (one number per partial split: no budget needed), priced by
// the full objective; infeasible when none fits.
Split balanced_split_of(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap) {
  Split out = optimum_below<detail::TwoBwFold>(model, pc, greedy_bound(model, pc, static_cap, kInfinity, true));
  if (!out.feasible()) return {};
  out.step_ms = objective_of(model, pc, out.bounds);
  return out;
}

// Depth-first walk over the splits whose objective is <= limit, with the tables deciding which partial
// splits have a completion below it.
template <class Fold>
class SplitWalk {
 public:
  SplitWalk(const CostModel& model, const Solved<Fold>& s, double limit, int64_t max_nodes,
            const std::function<double(const Split&)>& visit)
      : model_(model), s_(s), limit_(limit), nodes_left_(max_nodes), visit_(visit),
        d_(s.pc.candidate.depth), m_(static_cast<double>(s.pc.candidate.microbatches)) {
    bounds_.assign(static_cast<size_t>(d_ + 1), 0);
    prefix_.resize(static_cast<size_t>(d_));
  }

  bool run() {
    walk(0, 0);
    return complete_;
  }

 private:
  // The fold of `v` (stages i + 1..d-1) with stage i = s and the prefix stages before it.
  detail::FoldState<Fold::K> fold(detail::FoldState<Fold::K> v, const StageTerms& s, int64_t i) const {
    v = Fold::prepend(v, s, m_);
    for (int64_t k = i - 1; k >= 0; --k) v = Fold::prepend(v, prefix_[static_cast<size_t>(k)], m_);
    return v;
  }

  void walk(int64_t i, int64_t a) {
    const int64_t L = model_.num_layers();
    const auto& t = *s_.tables;
    int64_t e_last = std::min(s_.windows.hi(i, a), L - (d_ - 1 - i));
    for (int64_t e = i == d_ - 1 ? L : a + 1; e <= e_last && stopped() == false; ++e) {
      if (stage_floor_of<Fold>(model_, s_.pc.candidate, a, e) > limit_ * (1.0 + 1e-9)) break;  // floors round
      if (i + 1 < d_ && t.count(i + 1, e) == 0) continue;
      if (--nodes_left_ < 0) {
        complete_ = false;
        return;
      }
      const auto q = detail::quick_price(model_, s_.pc, i, a, e);
      if (!q.feasible) continue;
      const StageTerms s = terms_of(q, m_, i, s_.pc.candidate);
      bounds_[static_cast<size_t>(i + 1)] = e;
      if (i + 1 == d_) {
        const double objective = fold(Fold::empty(), s, i)[0];
        if (objective <= limit_) limit_ = visit_(Split{bounds_, objective});
        continue;
      }
      bool reachable = false;
      for (int64_t j = 0; j < t.count(i + 1, e) && !reachable; ++j)
        reachable = fold(t.at(i + 1, e)[j].v, s, i)[0] <= limit_;
      if (!reachable) continue;
      prefix_[static_cast<size_t>(i)] = s;
      walk(i + 1, e);
    }
  }

  bool stopped() const { return limit_ < 0 || !complete_; }

  const CostModel& model_;
  const Solved<Fold>& s_;
  double limit_;
  int64_t nodes_left_;
  const std::function<double(const Split&)>& visit_;
  int64_t d_;
  double m_;
  bool complete_ = true;
  std::vector<int64_t> bounds_;
  std::vector<StageTerms> prefix_;
};

}  // namespace

double greedy_step_ms(const CostModel& model, const Candidate& c) {
  if (c.depth < 1 || c.depth > model.num_layers()) return kInfinity;
  if (c.chunks > 1) return detail::chunked_balanced_split(model, c).step_ms;
  const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  return greedy_bound(model, detail::prepare(model, c), static_cap, kInfinity);
}

Split best_split(const CostModel& model, const Candidate& c, double upper_bound_ms, int64_t max_work) {
  if (c.depth < 1 || c.depth > model.num_layers()) return {};
  if (c.chunks > 1) return detail::chunked_best_split(model, c, upper_bound_ms, max_work);
  return with_fold(c.schedule,
                   [&](auto fold) { return best_split_with<decltype(fold)>(model, c, upper_bound_ms, max_work); });
}

Split balanced_split(const CostModel& model, const Candidate& c) {
  if (c.depth < 1 || c.depth > model.num_layers()) return {};
  if (c.chunks > 1) return detail::chunked_balanced_split(model, c);
  const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  return balanced_split_of(model, detail::prepare(model, c), static_cap);
}

bool for_each_split_within(const CostModel& model, const Candidate& c, double limit_ms, int64_t max_nodes,
                           const std::function<double(const Split&)>& visit) {
  if (c.depth < 1 || c.depth > model.num_layers()) return true;
  if (c.chunks > 1) return detail::chunked_for_each_split_within(model, c, limit_ms, max_nodes, visit);
  return with_fold(c.schedule, [&](auto fold) {
    using Fold = decltype(fold);
    Solved<Fold> solved;
    solve<Fold>(model, detail::prepare(model, c), limit_ms, solved, kSplitWork);
    if (!solved.tables) return true;
    if (solved.tables->exhausted()) return false;
    return SplitWalk<Fold>(model, solved, limit_ms, max_nodes, visit).run();
  });
}

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

}  // namespace

OverageSplit least_overage_split(const CostModel& model, const Candidate& c, int64_t bound_bytes) {
  const int64_t L = model.num_layers();
  OverageSplit out;
  if (c.depth < 1 || c.depth > L) return out;
  if (c.chunks > 1) return detail::chunked_least_overage_split(model, c, bound_bytes);
  const auto pc = detail::prepare(model, c);
  auto over = [&](int64_t i, int64_t a, int64_t e) {
    const auto q = detail::quick_price(model, pc, i, a, e);
    return saturating_add(q.recompute ? q.redo_bytes : q.plain_bytes, -model.memory_limit_bytes());
  };
  const auto start = balanced_by_params(model, c.depth);
  int64_t bound = INT64_MIN;
  for (int64_t i = 0; i < c.depth; ++i)
    bound = std::max(bound, over(i, start[static_cast<size_t>(i)], start[static_cast<size_t>(i + 1)]));
  bound = std::min(bound, bound_bytes);
  // Every stage holds at least its static bytes and the reserve: that narrows the windows.
  const int64_t static_cap = saturating_add(model.memory_limit_bytes() - model.constraints().reserve_bytes, bound);
  const auto w = make_windows(model, pc, kInfinity, static_cap, false, true);
  if (!w) {
    out.over_bytes = INT64_MAX;
    return out;
  }
  const int64_t fixed = model.constraints().reserve_bytes - model.memory_limit_bytes();
  const detail::SplitTables<detail::TwoBwFold> tables(
      L, c.depth, 1.0, static_cast<double>(bound), w->start_lo, w->start_hi,
      [&](int64_t i, int64_t a) { return w->hi(i, a); },
      [&](int64_t i, int64_t a, int64_t e) -> std::optional<StageTerms> {
        StageTerms s;
        s.lane = static_cast<double>(over(i, a, e));
        return s;
      },
      [&](int64_t, int64_t a, int64_t e) { return static_cast<double>(model.static_bytes(c.schedule, a, e) + fixed); },
      [](int64_t) { return 0.0; });
  const auto* best = tables.best();
  if (!best) {
    out.over_bytes = INT64_MAX;
    return out;
  }
  out.bounds = tables.bounds(best);
  out.over_bytes = static_cast<int64_t>(best->v[0]);
  return out;
}

}  // namespace pd2bw::planner

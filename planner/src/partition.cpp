// Exact splitting of the layers into contiguous stages for the search's objective: windows from an upper
// bound on the step time, the dynamic program of split_tables.hpp over them, the enumeration of every
// split below a limit, and the least-overage split.
// (Windows: partition_windows.cpp; greedy splits: partition_greedy.cpp; least overage:
// partition_overage.cpp.)
#include "pd2bw/planner/partition.hpp"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "bisect.hpp"
#include "chunk_price.hpp"
#include "partition_internal.hpp"
#include "prepared.hpp"
#include "split_tables.hpp"

namespace pd2bw::planner {

namespace {

using detail::greedy_bound;
using detail::make_windows;
using detail::objective_of;
using detail::StageTerms;
using detail::Windows;

[[gnu::always_inline]] inline StageTerms terms_of(const detail::QuickCost& q, double m, int64_t stage,
                                                  const Candidate& c) {
  return detail::stage_terms(m, stage, c.depth,
                             {q.compute_ms, q.p2p_ms, q.forward_ms, q.backward_ms, q.weight_ms, q.in_ms, q.out_ms,
                              q.allreduce_ms, q.update_ms},
                             detail::weight_defer(c.schedule, stage));
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

// The tables of `c` for splits with objective <= bound, with the pricing they were built from (the
// caller's, which must outlive this).
template <class Fold>
struct Solved {
  const detail::PreparedCandidate* pc = nullptr;
  Windows windows;
  std::optional<detail::SplitTables<Fold>> tables;
  bool out_of_work = false;  // not built: it would have run out of work (solve's `has_split`)
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

// The least allreduce + update of a stage 0 ending at most at layer `last`.
double least_first_h(const CostModel& model, const detail::PreparedCandidate& pc, int64_t last) {
  double least = kInfinity;
  for (int64_t e = 1; e <= std::min(last, model.num_layers()); ++e)
    least = std::min(least, detail::stage_allreduce_ms(pc, 0, 0, e) + pc.update[static_cast<size_t>(e)] - pc.update[0]);
  return least < kInfinity ? least : 0.0;
}

// What stages 0..i-1 holding layers [0, a) recompute at least, as least_redo(i, a): under `always`
// every layer's; under `auto` a stage j that does not recompute holds at most plain_capacity_ms of its
// in-flight count (and its window's cap), so the others hold the rest of [0, a)'s compute and recompute
// at least least_redo_ms of it; nothing under `never`. Only a caller that `reads` it has its table built.
auto least_prefix_redo(const CostModel& model, const detail::PreparedCandidate& pc, const Windows& win, bool reads) {
  const Candidate& c = pc.candidate;
  const bool sums = reads && pc.policy == RecomputePolicy::auto_;
  std::vector<double> plain(sums ? static_cast<size_t>(c.depth) + 1 : 0, 0.0);  // sum over stages j < i
  for (int64_t j = 0; sums && j < c.depth; ++j) {
    const double one = model.plain_capacity_ms(c.schedule, c.microbatch_index, pc.stages[static_cast<size_t>(j)].in_flight);
    plain[static_cast<size_t>(j + 1)] = plain[static_cast<size_t>(j)] + std::min(one, win.caps[static_cast<size_t>(j)]);
  }
  return [&model, &pc, &cp = model.compute_prefix(c.microbatch_index), plain = std::move(plain),
          segment = size_t{0}](int64_t i, int64_t a) mutable {
    const auto k = static_cast<size_t>(a);
    switch (pc.policy) {
      case RecomputePolicy::never: return 0.0;
      case RecomputePolicy::always: return pc.redo[k] - pc.redo[0];
      case RecomputePolicy::auto_: break;
    }
    return model.least_redo_ms(pc.candidate.microbatch_index, std::max(0.0, cp[k] - plain[static_cast<size_t>(i)]),
                               segment);
  };
}

// `has_split`: a split with objective <= bound is known (so no row of the tables is left empty), and a
// construction with more starts than max_work is not begun: it would run out of work all the same.
// Without one, neither is a construction with more than kProjectedFactor times max_work starts: each start
// is a unit of work, so it runs out unless a row is left empty first, and it is SplitTables' projection
// made before the first row (at 4,096 GPUs two thirds of flush's programs, each of which spent a quarter
// of its budget on the rows it projected from).
// `windows`, when given, are make_windows' at `bound` (a caller that built them already).
template <class Fold>
void solve(const CostModel& model, const detail::PreparedCandidate& prepared, double bound, Solved<Fold>& out,
           int64_t max_work, bool has_split = false, std::optional<Windows> windows = std::nullopt,
           double cycle_tau_low = kInfinity) {
  const Candidate& c = prepared.candidate;
  out.pc = &prepared;
  const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  auto w = windows ? std::move(windows)
                   : make_windows(model, prepared, bound, static_cap, true, std::is_same_v<Fold, detail::TwoBwFold>);
  if (!w) return;
  out.windows = std::move(*w);
  const auto& win = out.windows;
  const int64_t starts = detail::SplitTables<Fold>::starts(win.start_lo, win.start_hi);
  if (max_work < INT64_MAX &&
      static_cast<double>(starts) >
          (has_split ? 1.0 : detail::SplitTables<Fold>::kProjectedFactor) * static_cast<double>(max_work)) {
    out.out_of_work = true;
    return;
  }
  const auto& pc = prepared;
  const auto& cp = model.compute_prefix(c.microbatch_index);
  const double m = static_cast<double>(c.microbatches);
  // 2BW's floors read the fwd + bwd alone
  constexpr bool kLanesOnly = std::is_same_v<Fold, detail::TwoBwFold> || std::is_same_v<Fold, detail::TwoBwCycleFold>;
  const double h_first = kLanesOnly ? 0.0 : least_first_h(model, prepared, win.hi(0, 0));
  // Flush's first stage with both round trips below it (FlushFold::floor): k = max(0, d - m + 1) when
  // it is not the last stage (then m >= its warm-up min(d - k - 1, m) + 2).
  const int64_t first_trips = std::max<int64_t>(0, c.depth - c.microbatches + 1);
  const int64_t trips = std::is_same_v<Fold, detail::FlushFold> && first_trips <= c.depth - 2 ? first_trips : -1;
  auto least_redo = least_prefix_redo(model, prepared, win, !kLanesOnly);
  detail::HiSweep hi(win);
  out.tables.emplace(
      model.num_layers(), c.depth, m, bound, win.start_lo, win.start_hi, hi,
      [&](int64_t i, int64_t a, int64_t e) -> std::optional<StageTerms> {
        const auto q = detail::quick_price(pc, i, a, e);
        if (!q.feasible) return std::nullopt;
        StageTerms s = terms_of(q, m, i, c);
        if constexpr (std::is_same_v<Fold, detail::TwoBwCycleFold>) {  // lanes m t + h <= bound
          s.tau = bound / m;
          s.tau_low = std::min(s.tau, cycle_tau_low);
        }
        return s;
      },
      [&](int64_t, int64_t a, int64_t e) { return stage_floor_of<Fold>(model, c, a, e); },
      [&](int64_t i, int64_t a) {  // what layers [0, a) add to the drain and refill: zb-h1's W's are not on it
        double fb = cp[static_cast<size_t>(a)];
        if constexpr (detail::kSplitFold<Fold>) fb -= model.weight_prefix(c.microbatch_index)[static_cast<size_t>(a)];
        detail::Prefix p(fb);
        if constexpr (kLanesOnly) return p;
        p.h_first = h_first;
        p.redo = least_redo(i, a);
        if (trips >= 0) {
          p.trips = static_cast<double>(trips);
          p.before_trips = cp[static_cast<size_t>(std::min(a, win.start_hi[static_cast<size_t>(trips)]))];
        }
        return p;
      },
      max_work);
}

template <class Fold>
Split optimum_below(const CostModel& model, const detail::PreparedCandidate& pc, double bound,
                    int64_t max_work = INT64_MAX, bool has_split = false, std::optional<Windows> windows = std::nullopt,
                    double cycle_tau_low = kInfinity) {
  Split out;
  Solved<Fold> solved;
  solve<Fold>(model, pc, bound, solved, max_work, has_split, std::move(windows), cycle_tau_low);
  if (solved.out_of_work) {
    out.exhausted = true;
    out.work = detail::SplitTables<Fold>::work_past(max_work);
    return out;
  }
  if (!solved.tables) return out;
  out.exhausted = solved.tables->exhausted();
  out.work = solved.tables->work();
  const auto* best = solved.tables->best();
  if (!best) return out;
  out.bounds = solved.tables->bounds(best);
  out.step_ms = best->v[0];
  return out;
}

Split balanced_split_of(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap);

template <class Fold>
Split best_split_with(const CostModel& model, const Candidate& c, double upper_bound_ms, int64_t max_work,
                      GreedyMemo* memo) {
  const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  // A greedy split's objective narrows the windows; when the greedy finds nothing (memory binds before
  // time does), the windows come from memory alone and the DP is still exact.
  const auto pc = detail::prepare(model, c);
  // Windows that cannot reach the last layer under the given bound rule out every split at once.
  std::optional<Windows> windows;
  if (upper_bound_ms < kInfinity) {
    windows = make_windows(model, pc, upper_bound_ms, static_cap, true, std::is_same_v<Fold, detail::TwoBwFold>);
    if (!windows) return {};
  }
  detail::GreedyEntry greedy_search(memo, c, static_cap);
  Split greedy = greedy_search.at_most(model, pc, upper_bound_ms);
  Split tiered;  // flush's, taken where its objective is less (a greedy split above the bound is none)
  if constexpr (std::is_same_v<Fold, detail::FlushFold>) tiered = greedy_search.tiered(model, pc);
  if (tiered.step_ms < greedy.step_ms && tiered.step_ms <= upper_bound_ms) std::swap(greedy, tiered);
  const bool has_split = greedy.feasible() && greedy.step_ms <= upper_bound_ms;  // the greedy split itself
  // The program's bound is the given one unless the greedy split is below it: then its windows are these.
  const double bound = std::min(upper_bound_ms, greedy.step_ms);
  if (!(bound == upper_bound_ms)) windows.reset();
  Split out;
  if (greedy_search.runs_out(bound, has_split, max_work)) {  // what the program would find again
    out.exhausted = true;
    out.work = detail::SplitTables<Fold>::work_past(max_work);
  } else {
    out = optimum_below<Fold>(model, pc, bound, max_work, has_split, std::move(windows));
    if (out.exhausted) greedy_search.record_run_out(bound, has_split, max_work);
  }
  const int64_t work = out.work;
  if (out.exhausted) {  // the cheapest split at hand: the greedy (or flush's tiered) one, else the balanced
                        // one (whose dynamic program has no budget: only a search with the full kSplitWork
                        // pays for it)
    if (!greedy.feasible()) greedy = greedy_search.at_most(model, pc, kInfinity);
    if (tiered.step_ms < greedy.step_ms) std::swap(greedy, tiered);
    if (greedy.feasible())
      out = std::move(greedy);
    else if (max_work >= kSplitWork)
      out = balanced_split_of(model, pc, static_cap);
    else
      out = Split{};
    out.exhausted = true;
    out.work = work;
    return out;
  }
  if (!(out.step_ms <= upper_bound_ms)) {
    Split none;
    none.work = work;
    return none;
  }
  return out;
}

// The split with the least busiest stage (one number per partial split: no budget needed), priced by
// the full objective; infeasible when none fits.
Split balanced_split_of(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap) {
  Split out = optimum_below<detail::TwoBwFold>(model, pc, greedy_bound(model, pc, static_cap, kInfinity, true));
  if (!out.feasible()) return {};
  out.step_ms = objective_of(pc, out.bounds);
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
        d_(s.pc->candidate.depth), m_(static_cast<double>(s.pc->candidate.microbatches)) {
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
      if (stage_floor_of<Fold>(model_, s_.pc->candidate, a, e) > limit_ * (1.0 + 1e-9)) break;  // floors round
      if (i + 1 < d_ && t.count(i + 1, e) == 0) continue;
      if (--nodes_left_ < 0) {
        complete_ = false;
        return;
      }
      const auto q = detail::quick_price(*s_.pc, i, a, e);
      if (!q.feasible) continue;
      const StageTerms s = terms_of(q, m_, i, s_.pc->candidate);
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

double greedy_step_ms(const CostModel& model, const Candidate& c, GreedyMemo* memo) {
  if (c.depth < 1 || c.depth > model.num_layers()) return kInfinity;
  if (c.chunks > 1) return detail::chunked_balanced_split(model, c).step_ms;
  const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  detail::GreedyEntry entry(memo, c, static_cap);
  if (const auto known = entry.settled_step_ms()) return *known;  // a search before this one asked
  const auto pc = detail::prepare(model, c);
  const double greedy = entry.at_most(model, pc, kInfinity).step_ms;
  return std::min(greedy, entry.tiered(model, pc).step_ms);  // infinite but for flush
}

Split best_split(const CostModel& model, const Candidate& c, double upper_bound_ms, int64_t max_work,
                 GreedyMemo* memo) {
  if (c.depth < 1 || c.depth > model.num_layers()) return {};
  if (c.chunks > 1) return detail::chunked_best_split(model, c, upper_bound_ms, max_work);
  return with_fold(c.schedule,
                   [&](auto fold) { return best_split_with<decltype(fold)>(model, c, upper_bound_ms, max_work, memo); });
}

Split balanced_split(const CostModel& model, const Candidate& c) {
  if (c.depth < 1 || c.depth > model.num_layers()) return {};
  if (c.chunks > 1) return detail::chunked_balanced_split(model, c);
  const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  return balanced_split_of(model, detail::prepare(model, c), static_cap);
}

Split detail::two_bw_cycle_split(const CostModel& model, const Candidate& c, double bound_ms, double tau_low,
                                 int64_t max_work) {
  if (c.schedule != Schedule::two_bw || c.chunks > 1 || c.depth < 1 || c.depth > model.num_layers() ||
      !(bound_ms < kInfinity))
    return {};
  Split s = optimum_below<detail::TwoBwCycleFold>(model, detail::prepare(model, c), bound_ms, max_work, false,
                                                  std::nullopt, tau_low);
  if (s.feasible() && !(s.step_ms <= bound_ms)) return {};  // the tables keep a little slack past the bound
  return s;
}

bool for_each_split_within(const CostModel& model, const Candidate& c, double limit_ms, int64_t max_nodes,
                           const std::function<double(const Split&)>& visit) {
  if (c.depth < 1 || c.depth > model.num_layers()) return true;
  if (c.chunks > 1) return detail::chunked_for_each_split_within(model, c, limit_ms, max_nodes, visit);
  return with_fold(c.schedule, [&](auto fold) {
    using Fold = decltype(fold);
    const auto pc = detail::prepare(model, c);
    Solved<Fold> solved;
    solve<Fold>(model, pc, limit_ms, solved, kSplitWork);
    if (!solved.tables) return true;
    if (solved.tables->exhausted()) return false;
    return SplitWalk<Fold>(model, solved, limit_ms, max_nodes, visit).run();
  });
}

}  // namespace pd2bw::planner

// The finer bounds (StepLowerBound::refined: memory, zb-h1's round trips and a bisection on rules_out) and
// the search's order by lower bound, with them where they matter.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <mutex>
#include <numeric>
#include <queue>
#include <vector>

#include "parallel.hpp"
#include "search_internal.hpp"
#include "step_bound_order.hpp"

namespace pd2bw::planner {

bool StepLowerBound::refinable(const Candidate& c) const {
  const bool chunked = c.chunks > 1 && (c.schedule == Schedule::interleaved || c.schedule == Schedule::zb_v);
  return (c.chunks == 1 || chunked) && c.depth >= 1;
}

bool StepLowerBound::refines_above(const Candidate& c, double t) const {
  if (!refinable(c) || c.chunks > 1) return false;
  const double above = t * (1.0 + kAboveMargin);
  Probe p(*this, c);
  return c.depth == 1 ? !lanes_reach(p, above) : rules_out(p, above);
}

namespace {

// bracket()'s first tests away from the guess, relative to the guess and as a share of the bisection's
// tolerance (4 times that at each further one).
constexpr double kGuessStep = 0.5;

// Narrows [out_at, in_at] (out(out_at) holds, out(in_at) does not) by tests near `guess`, galloping away
// from it until one answer of each kind brackets the bound.
template <class Out>
void bracket(double guess, double tolerance, double& out_at, double& in_at, Out&& out) {
  if (!(out_at < guess && guess < in_at)) return;
  double step = kGuessStep * tolerance * guess;
  const bool above = out(guess);
  (above ? out_at : in_at) = guess;
  for (;; step *= 4.0) {
    const double t = above ? out_at + step : in_at - step;
    if (!(out_at < t && t < in_at)) return;
    const bool ruled = out(t);
    (ruled ? out_at : in_at) = t;
    if (ruled != above) return;
  }
}

}  // namespace

double StepLowerBound::refined(const Candidate& c, double from, double ceiling, RuleBracket* tried, double guess,
                               double tolerance) {
  if (!refinable(c)) return 0.0;
  if (c.chunks > 1) return chunked_bound(c);  // whatever from and ceiling: O(levels) once memoised
  if (c.depth == 1) tolerance = kFineTolerance;  // its bracket is not recorded: sharpened_bound cannot narrow it
  double out = 0.0, transfers = 0.0;
  Probe p(*this, c);
  // Deep stashes can leave no whole-layer split in memory (at 4,096 GPUs most zb-h1 candidates under the
  // ceiling): one walk of memory alone per depth and stash shape (memoised) says so for every limit, and
  // the search then drops the candidate.
  if (!memory_fits(p)) return kInfinity;
  if (c.schedule == Schedule::zb_h1 && zb_round_trip_stage(c) < c.depth) {
    // The round trips below stage k cross its input boundary twice and each boundary below it four
    // times, and the stages above it pass their inputs twice (on the fastest replica of each boundary).
    const int64_t k = zb_round_trip_stage(c);
    const auto& links = p.links();
    for (int64_t j = 0; j < c.depth; ++j) transfers += (j > k ? 4.0 : 2.0) * links[static_cast<size_t>(j)].in_fast;
    out = zb_cycle_bound(c, transfers) * (1.0 - 1e-9);
  }
  // rules_out(c, t) proves that no split is at or below t: the largest such t found is a bound. One probe
  // serves every t (its walks narrow as the bisection does).
  auto out_at = [&](double t) {
    if (c.depth == 1) return !lanes_reach(p, t);
    const bool ruled = rules_out(p, t);
    if (tried) tried->record(t, ruled);
    return ruled;
  };
  double lo = std::max(from, out), hi = ceiling;
  if (hi < kInfinity) {
    if (!(lo < hi)) return out;
    if (out_at(hi)) return hi;  // most candidates under a ceiling: one test
  } else {  // no ceiling: double until a split may fit
    hi = std::max(2.0 * lo, 1e-3);
    for (int i = 0; i < 64 && out_at(hi); ++i) {
      lo = hi;
      hi *= 2.0;
    }
    if (out_at(hi)) return kInfinity;
  }
  // The tests near the guess decide the midpoints outside [known_out, known_in] (and out_at(lo) when one
  // of them ruled out), so the bisection's steps are those it takes without them.
  double known_out = lo, known_in = hi;
  if (guess > 0.0) bracket(guess, tolerance, known_out, known_in, out_at);
  if (known_out == lo && !out_at(lo)) return out;
  for (int it = 0; it < 40 && hi - lo > tolerance * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    (mid <= known_out || (mid < known_in && out_at(mid)) ? lo : hi) = mid;
  }
  return std::max(out, lo);
}

namespace detail {

double refined_below(StepLowerBound& bound, const Candidate& c, double from, double ceiling,
                     StepLowerBound::RuleBracket* tried, double guess, double tolerance) {
  return from < ceiling && bound.refinable(c) ? std::max(from, bound.refined(c, from, ceiling, tried, guess, tolerance))
                                              : from;
}

double sharpened_bound(SearchSpace& space, size_t idx) {
  if (!space.tried || idx >= space.fine_bounds.size()) return space.lower_bounds[idx];
  double& fine = space.fine_bounds[idx];
  if (!std::isnan(fine)) return fine;
  // Between the highest limit ruled out and the least one not (ruled_out's memo of them).
  const StepLowerBound::RuleBracket& known = (*space.tried)[idx];
  double lo = std::max(space.lower_bounds[idx], known.out_to), hi = known.in_from;
  if (lo < hi && hi < kInfinity)
    for (int it = 0; it < 40 && hi - lo > StepLowerBound::kFineTolerance * hi; ++it) {
      const double mid = 0.5 * (lo + hi);
      (space.ruled_out(idx, mid) ? lo : hi) = mid;
    }
  return fine = lo;
}

namespace {

// The candidates under `ceiling` in `order`, by depth family (depth_family; each in that order): the bound a
// family's next candidate is lifted by follows from the last ones' (refine_series).
std::vector<std::vector<size_t>> depth_series(const std::vector<Candidate>& candidates, const std::vector<double>& lb,
                                              const std::vector<size_t>& order, double ceiling) {
  std::map<DepthFamily, size_t> series;
  std::vector<std::vector<size_t>> out;
  for (size_t idx : order) {
    if (!(lb[idx] < ceiling)) break;
    const auto [it, fresh] = series.emplace(depth_family(candidates[idx]), out.size());
    if (fresh) out.emplace_back();
    out[it->second].push_back(idx);
  }
  return out;
}

// Refines one depth series in its order, each candidate with a guess of its bound: the lift above its cheap
// bound of the last two bisected ones, extrapolated linearly in the depth (the guess only saves tests).
void refine_series(StepLowerBound& bound, const std::vector<Candidate>& candidates, const std::vector<size_t>& series,
                   double ceiling, std::vector<double>& lb, std::vector<StepLowerBound::RuleBracket>* tried,
                   double tolerance) {
  struct Lift {
    double depth, lift;
  };
  std::vector<Lift> seen;
  for (size_t idx : series) {
    const double from = lb[idx], depth = static_cast<double>(candidates[idx].depth);
    double guess = 0.0;
    if (seen.size() >= 2) {
      const Lift& a = seen.back();
      const Lift& b = seen[seen.size() - 2];
      guess = from + a.lift + (a.depth != b.depth ? (a.lift - b.lift) * (depth - a.depth) / (a.depth - b.depth) : 0.0);
    } else if (!seen.empty()) {
      guess = from + seen.back().lift;
    }
    lb[idx] = refined_below(bound, candidates[idx], from, ceiling, tried ? &(*tried)[idx] : nullptr, guess, tolerance);
    if (from < lb[idx] && lb[idx] < ceiling) seen.push_back({depth, lb[idx] - from});
  }
}

}  // namespace

void refine_lower_bounds(StepLowerBound& bound, const std::vector<Candidate>& candidates, std::vector<double>& lb,
                         std::vector<size_t>& order, size_t first, double ceiling, int64_t threads,
                         std::vector<StepLowerBound::RuleBracket>* tried, double tolerance) {
  auto by_bound = [&] { std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lb[a] < lb[b]; }); };
  if (ceiling < kInfinity) {
    // Every candidate under the ceiling: those the finer bound lifts to it cannot be kept, and they no
    // longer hold the floor of the unsearched ones down. Each depth family is refined in turn, on one thread.
    const auto groups = depth_series(candidates, lb, order, ceiling);
    for_each_in_parallel_with(
        groups.size(), threads, [&] { return StepLowerBound(bound); },
        [&](StepLowerBound& own, size_t k) {
          refine_series(own, candidates, groups[k], ceiling, lb, tried, tolerance);
          return true;
        });
    by_bound();
    return;
  }
  // No ceiling: in the order of the cheap bounds until the first `first` by refined bound are known.
  // Once `first` are refined, the largest of the `first` least refined bounds caps every later
  // refinement (a candidate above it is not among them, and the cap still bounds it from below), and a
  // candidate whose cheap bound reaches it ends the pass.
  std::priority_queue<double> least;  // the `first` least refined bounds so far, largest on top
  for (size_t idx : order) {
    const bool full = least.size() >= first;
    if (!(lb[idx] < kInfinity) || (full && lb[idx] >= least.top())) break;
    if (bound.refinable(candidates[idx]))
      lb[idx] = std::max(lb[idx], bound.refined(candidates[idx], lb[idx], full ? least.top() : kInfinity,
                                                tried ? &(*tried)[idx] : nullptr, 0.0, tolerance));
    least.push(lb[idx]);
    if (least.size() > first) least.pop();
  }
  by_bound();
}

double least_refined_bound(const StepLowerBound& bound, const std::vector<Candidate>& candidates, double floor,
                           double ceiling, int64_t threads, const std::atomic<double>* stop_at) {
  const auto own = [&] { return StepLowerBound(bound); };
  std::vector<double> cheap(candidates.size()), key(candidates.size());
  for_each_in_parallel_with(candidates.size(), threads, own, [&](StepLowerBound& b, size_t k) {
    cheap[k] = b(candidates[k]);
    key[k] = std::max(floor, cheap[k]);
    return true;
  });
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key[a] < key[b]; });
  std::mutex least_mutex;
  double least = kInfinity;
  for_each_in_parallel_with(order.size(), threads, own, [&](StepLowerBound& b, size_t pos) {
    const size_t k = order[pos];
    const double stop = stop_at ? stop_at->load() : kInfinity;
    {
      const std::lock_guard<std::mutex> lock(least_mutex);
      if (key[k] >= least || key[k] >= stop) return false;  // and so are the keys after it
    }
    // Past the stop its value is not needed: one test shows most are.
    const bool testable = stop < kInfinity && stop * (1.0 + StepLowerBound::kAboveMargin) <= ceiling && cheap[k] < ceiling;
    if (testable && b.refines_above(candidates[k], stop)) return true;
    const double v = std::max(floor, refined_below(b, candidates[k], cheap[k], ceiling));
    const std::lock_guard<std::mutex> lock(least_mutex);
    least = std::min(least, v);
    return true;
  });
  return least;
}

}  // namespace detail

}  // namespace pd2bw::planner

// The search's use of StepLowerBound: the finer bounds of many candidates at once, in the order they
// matter (step_bound_order.cpp), and the left-out point that may still fit (search_infeasible.cpp).
// Private to the planner.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <vector>

#include "step_bound.hpp"

namespace pd2bw::planner {

namespace detail {

// `from` (a lower bound of c) lifted to bound.refined(c) up to `ceiling` when it is below the ceiling and
// c is refinable; `from` otherwise.
double refined_below(StepLowerBound& bound, const Candidate& c, double from, double ceiling,
                     StepLowerBound::RuleBracket* tried = nullptr, double guess = 0.0,
                     double tolerance = StepLowerBound::kFineTolerance);

// Lifts lb[idx] (a lower bound of candidates[idx]) to bound.refined() for every candidate whose bound is
// below `ceiling` (refined up to it), then sorts `order` (candidate indices) by lb, stably. Without a
// ceiling (infinity), candidates are refined in order until the first `first` by refined bound are all
// refined, each later one up to the largest of those. `order` must be sorted by lb on entry
// (step_bound_order.cpp). Under a ceiling the candidates are refined on `threads` threads (0: one per
// hardware thread), each with a copy of `bound` (refined() keeps memos that are not thread-safe; a
// bound's value does not depend on them), so lb does not depend on `threads`.
// With `tried` (one per candidate), each refined candidate's RuleBracket is recorded there. `tolerance`:
// refined()'s.
void refine_lower_bounds(StepLowerBound& bound, const std::vector<Candidate>& candidates, std::vector<double>& lb,
                         std::vector<size_t>& order, size_t first, double ceiling, int64_t threads = 1,
                         std::vector<StepLowerBound::RuleBracket>* tried = nullptr,
                         double tolerance = StepLowerBound::kFineTolerance);

// min over `candidates` of max(floor, refined_below(b, c, b(c), ceiling)), b a copy of `bound` (one per
// thread, `threads` of them): the candidates in the order of max(floor, b(c)), refined only while that
// is below the least so far (refined_below never lowers its `from`), so it is the least of them all
// whatever `threads`. Infinity for none. With `stop_at`, which another thread may lower while this runs,
// the candidates whose max(floor, b(c)) is at or above it are not refined: the result is then exact
// whenever it is below the last value of stop_at, and otherwise at least min(that, the true least).
double least_refined_bound(const StepLowerBound& bound, const std::vector<Candidate>& candidates, double floor,
                           double ceiling, int64_t threads, const std::atomic<double>* stop_at = nullptr);

// The first of `candidates` (in their order) whose cheap bound and refined_below (no ceiling; memory's walk
// among their terms) are finite, or none: what keeps "no plan fits" from being proven when these are the
// points a search left out and none it searched fits (search_infeasible.cpp).
std::optional<Candidate> first_not_ruled_out(const StepLowerBound& bound, const std::vector<Candidate>& candidates);

}  // namespace detail

}  // namespace pd2bw::planner

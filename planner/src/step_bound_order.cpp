// The search's order by lower bound, with the finer bounds (StepLowerBound::refined) where they matter.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <numeric>
#include <queue>
#include <vector>

#include "parallel.hpp"
#include "step_bound.hpp"

namespace pd2bw::planner::detail {

double refined_below(StepLowerBound& bound, const Candidate& c, double from, double ceiling) {
  return from < ceiling && bound.refinable(c) ? std::max(from, bound.refined(c, from, ceiling)) : from;
}

void refine_lower_bounds(StepLowerBound& bound, const std::vector<Candidate>& candidates, std::vector<double>& lb,
                         std::vector<size_t>& order, size_t first, double ceiling, int64_t threads) {
  auto by_bound = [&] { std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lb[a] < lb[b]; }); };
  if (ceiling < kInfinity) {
    // Every candidate under the ceiling: those the finer bound lifts to it cannot be kept, and they no
    // longer hold the floor of the unsearched ones down. Each is refined on its own.
    std::vector<size_t> under;
    for (size_t idx : order) {
      if (!(lb[idx] < ceiling)) break;
      under.push_back(idx);
    }
    for_each_in_parallel_with(
        under.size(), threads, [&] { return StepLowerBound(bound); },
        [&](StepLowerBound& own, size_t k) {
          const size_t idx = under[k];
          lb[idx] = refined_below(own, candidates[idx], lb[idx], ceiling);
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
      lb[idx] = std::max(lb[idx], bound.refined(candidates[idx], lb[idx], full ? least.top() : kInfinity));
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

}  // namespace pd2bw::planner::detail

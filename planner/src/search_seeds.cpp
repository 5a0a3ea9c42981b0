// The search's seeds: objectives of greedy splits, upper bounds on the kept candidates' objectives that
// the leaderboard has before any exact evaluation.
#include <algorithm>
#include <cstdint>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "parallel.hpp"
#include "search_internal.hpp"
#include "step_bound.hpp"

namespace pd2bw::planner::detail {

std::vector<double> greedy_objectives(const CostModel& model, const std::vector<Candidate>& candidates,
                                      const std::vector<size_t>& chosen, int64_t threads, GreedyMemo* memo) {
  std::vector<double> upper(chosen.size());
  for_each_in_parallel(chosen.size(), threads, [&](size_t k) {
    upper[k] = greedy_step_ms(model, candidates[chosen[k]], memo);
    return true;
  });
  return upper;
}

std::vector<size_t> seed_candidates(const std::vector<Candidate>& candidates, const std::vector<size_t>& order,
                                    const std::vector<double>& lb, bool pinned) {
  constexpr int kPerGroup = 8;
  const int kPerSize = pinned ? 8 : 2;
  std::map<std::pair<size_t, int64_t>, int> seeded;
  std::map<std::tuple<size_t, int64_t, int64_t>, int> by_size;
  std::vector<size_t> chosen;
  for (size_t idx : order) {
    if (lb[idx] == kInfinity) break;
    const auto& c = candidates[idx];
    if (c.chunks > 1) continue;  // a chunked split is priced per rank, too dear for a seed
    int& n = seeded[{static_cast<size_t>(c.schedule), c.width}];
    int& nb = by_size[{static_cast<size_t>(c.schedule), c.width, c.microbatch_index}];
    if (n < kPerGroup || nb < kPerSize) {
      ++n;
      ++nb;
      chosen.push_back(idx);
    }
  }
  return chosen;
}

std::vector<double> seeds_that_fit(const CostModel& model, const StepLowerBound& bound,
                                   const std::vector<Candidate>& candidates, const std::vector<size_t>& order,
                                   const std::vector<double>& lb, std::vector<size_t> seeded, size_t wanted,
                                   int64_t threads, GreedyMemo* memo) {
  constexpr size_t kBatch = 16, kMostGreedy = 256;
  std::sort(seeded.begin(), seeded.end());
  std::vector<double> out;
  size_t found = 0, tried = 0, pos = 0;
  while (found < wanted && tried < kMostGreedy && pos < order.size()) {
    std::vector<size_t> batch;
    for (; pos < order.size() && batch.size() < kBatch; ++pos) {
      const size_t idx = order[pos];
      if (lb[idx] == kInfinity) {
        pos = order.size();
        break;
      }
      const auto& c = candidates[idx];
      if (c.chunks == 1 && !std::binary_search(seeded.begin(), seeded.end(), idx) &&
          bound.lanes_reach(c, kInfinity))
        batch.push_back(idx);
    }
    tried += batch.size();
    for (double u : greedy_objectives(model, candidates, batch, threads, memo)) {
      found += u < kInfinity ? 1 : 0;
      out.push_back(u);
    }
  }
  return out;
}

}  // namespace pd2bw::planner::detail

// step_objective: the search's objective over a split's priced stages (objective.hpp's folds).
#include <algorithm>
#include <limits>
#include <vector>

#include "objective.hpp"
#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner {

double step_objective(const Candidate& c, const std::vector<StageCost>& stages) {
  if (stages.empty()) return std::numeric_limits<double>::infinity();
  for (const auto& s : stages)
    if (!s.feasible) return std::numeric_limits<double>::infinity();
  if (c.chunks > 1) {  // the busiest rank (its chunks' times added up), the climb, and interleaved's cycle
    const auto d = static_cast<size_t>(c.depth);
    std::vector<double> lanes(d, 0.0), h(d, 0.0), work(d), u(d), climb(stages.size());
    for (size_t k = 0; k < stages.size(); ++k) {
      const auto p = static_cast<size_t>(pipeline::chunk_position(c.schedule, c.depth, static_cast<int64_t>(k)));
      lanes[p] += stages[k].step_ms;
      h[p] += stages[k].allreduce_ms + stages[k].update_ms;
      climb[k] = stages[k].compute_ms - stages[k].weight_ms;
    }
    const double most = std::max(*std::max_element(lanes.begin(), lanes.end()),
                                 detail::chunked_climb(climb, h[0], static_cast<double>(c.microbatches)));
    if (c.schedule != Schedule::interleaved) return most;
    std::vector<double> f, b, x, scratch;
    for (const auto& s : stages) {
      f.push_back(s.forward_ms);
      b.push_back(s.backward_ms);
      x.push_back(s.in_ms + s.out_ms);
    }
    for (size_t p = 0; p < d; ++p) {
      work[p] = lanes[p] - h[p];
      u[p] = stages[p].forward_ms + stages[p].backward_ms;
    }
    detail::add_interleaved_waits(c.depth, c.chunks, f, b, x, work, scratch);
    return std::max(most, detail::interleaved_cycle(work, h, u));
  }
  return detail::folded_objective(c, static_cast<int64_t>(stages.size()),
                                  [&](int64_t k) -> const StageCost& { return stages[static_cast<size_t>(k)]; });
}

}  // namespace pd2bw::planner

// The exact best plan of each schedule for `pd2bw plan --explain` (see explain.hpp).
#include "pd2bw/planner/explain.hpp"

#include <algorithm>
#include <utility>

#include "candidate_key.hpp"

namespace pd2bw::planner {

namespace {

// The same candidate (of one profile: the microbatch size follows from its index) and split.
bool same_plan(const Evaluated& a, const Evaluated& b) {
  return detail::candidate_key(a.candidate) == detail::candidate_key(b.candidate) && a.split.bounds == b.split.bounds;
}

}  // namespace

std::vector<Evaluated> best_of_each_schedule(const schemas::Profile& profile, const schemas::Cluster& cluster,
                                             const Constraints& constraints, const SearchResult& result,
                                             int64_t threads, std::shared_ptr<SearchShare> share) {
  std::vector<Evaluated> out{result.ranked.front()};
  if (constraints.schedule) return out;
  const CostModel model(profile, cluster, constraints);
  for (schemas::Schedule s : searched_schedules(model)) {
    if (s == out.front().candidate.schedule) continue;
    Constraints pinned = constraints;
    pinned.schedule = s;
    SearchOptions options;
    options.top_k = 0;  // never changes the winner (search.hpp)
    options.threads = threads;
    options.bound_left_out = false;  // only the winner is shown, not its proven gap
    options.share = share;
    const SearchResult r = search(CostModel(profile, cluster, pinned), options);
    if (r.feasible()) out.push_back(r.ranked.front());
  }
  return out;
}

void put_exact_bests(SearchResult& result, std::vector<Evaluated>& bests) {
  if (result.ranked.empty()) return;
  std::vector<Evaluated> rows(std::make_move_iterator(result.ranked.begin() + 1),
                              std::make_move_iterator(result.ranked.end()));
  for (size_t k = 1; k < bests.size(); ++k) {
    const Evaluated& best = bests[k];
    std::erase_if(rows, [&](const Evaluated& e) {
      return e.candidate.schedule == best.candidate.schedule && (e.representative || same_plan(e, best));
    });
  }
  // The bests first, so that each stays ahead of a row of its schedule with the same step time.
  rows.insert(rows.begin(), bests.begin() + 1, bests.end());
  std::stable_sort(rows.begin(), rows.end(),
                   [](const Evaluated& a, const Evaluated& b) { return a.step_ms < b.step_ms; });
  // A pinned search may beat the winner where the search of all schedules is not exact (its proven gap):
  // the fastest pinned best (the first on ties) is chosen, and leads `bests` as the chosen plan does. A
  // row not replayed may show a step below both (its objective, a lower bound on its replay): it stays a row.
  const auto fastest = std::min_element(bests.begin() + 1, bests.end(),
                                        [](const Evaluated& a, const Evaluated& b) { return a.step_ms < b.step_ms; });
  if (fastest != bests.end() && fastest->step_ms < result.ranked.front().step_ms) {
    const auto row = std::find_if(rows.begin(), rows.end(), [&](const Evaluated& e) { return same_plan(e, *fastest); });
    Evaluated chosen = std::move(*row);
    rows.erase(row);
    rows.insert(std::upper_bound(rows.begin(), rows.end(), result.ranked.front().step_ms,
                                 [](double t, const Evaluated& e) { return t < e.step_ms; }),
                std::move(result.ranked.front()));
    result.ranked.front() = std::move(chosen);
    std::rotate(bests.begin(), fastest, fastest + 1);
  }
  result.ranked.resize(1);
  for (auto& e : rows) result.ranked.push_back(std::move(e));
}

}  // namespace pd2bw::planner

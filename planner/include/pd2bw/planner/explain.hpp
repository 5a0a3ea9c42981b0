// What `pd2bw plan --explain` compares: the exact best plan of every schedule the search may use, each
// found by the search pinned to it, and the winner's alternatives with those in place of the
// representatives a plain search leaves for the schedules it did not search exactly.
#pragma once

#include <cstdint>
#include <vector>

#include "pd2bw/planner/search.hpp"

namespace pd2bw::planner {

// The winner of `result` (a search under `constraints`; requires result.feasible()), then for each
// other schedule of searched_schedules, in that order, the winner of search() pinned to it with `threads`
// workers: the plan `pd2bw plan --schedule S` writes (same candidate, split and step_ms, whatever
// --top). A schedule none of whose candidates fits has no entry. When `constraints` pins a schedule,
// only the winner. `share`: the one the search of `result` had, if any (SearchOptions::share).
std::vector<Evaluated> best_of_each_schedule(const schemas::Profile& profile, const schemas::Cluster& cluster,
                                             const Constraints& constraints, const SearchResult& result,
                                             int64_t threads, std::shared_ptr<SearchShare> share = nullptr);

// Puts `bests` (best_of_each_schedule's) among result.ranked's alternatives: for every schedule of
// bests past the first, its representative (Evaluated::representative) and any row equal to its best
// (same candidate and split) leave, and its best enters, whatever top_k, so that each of those schedules
// has a row and its first row is its exact best. ranked[1..] are then in ascending step_ms (stable).
// The winner (ranked[0]) stays unless a best steps strictly faster (possible only where the search of all
// schedules is not exact, at scale): that best is then the winner, the old winner takes its place among
// the alternatives by step time, and `bests` is rotated so that it leads with the new winner.
void put_exact_bests(SearchResult& result, std::vector<Evaluated>& bests);

}  // namespace pd2bw::planner

// What the search's two halves share: the objective search (search.cpp) hands the replay search
// (replay.cpp) its finalists and what it learnt of each candidate's best split. Private to the planner.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <span>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "candidate_key.hpp"
#include "pd2bw/planner/partition.hpp"
#include "pd2bw/planner/search.hpp"
#include "step_bound.hpp"

namespace pd2bw::planner {

// SearchOptions::share: each candidate's cheap lower bound (StepLowerBound's operator()), the greedy memo
// and StepLowerBound's thread-safe memos of every search that shares it (the first search makes those).
struct SearchShare {
  std::mutex mutex;  // over `cheap` and `bound_memos`
  std::unordered_map<detail::CandidateKey, double, detail::CandidateKeyHash> cheap;
  std::shared_ptr<GreedyMemo> greedy = std::make_shared<GreedyMemo>();
  std::shared_ptr<StepLowerBound::Shared> bound_memos;
};
}  // namespace pd2bw::planner

namespace pd2bw::planner::detail {

// The search's order: less step time, then fewer devices, then the earlier candidate (index ia, ib in
// enumerate_candidates' order).
inline bool ranks_before(const Evaluated& a, size_t ia, const Evaluated& b, size_t ib) {
  if (a.step_ms != b.step_ms) return a.step_ms < b.step_ms;
  const int64_t da = a.candidate.width * a.candidate.depth, db = b.candidate.width * b.candidate.depth;
  if (da != db) return da < db;
  return ia < ib;
}

// A candidate's best split by the objective, as far as it was computed.
struct BestKnown {
  bool computed = false;
  double bound = 0;  // computed under this upper bound: split is the exact optimum, or none is <= bound,
                     // or (split.exhausted) the dynamic program ran out of work under it
  Split split;
  int64_t work = 0;  // the work best_split was given (split_work_at, or kSplitWork for a forced one)
};

// The objective search's view of the space: candidates, their lower bounds, the order of those bounds
// and what is known of each one's best split.
struct SearchSpace {
  std::vector<Candidate> candidates;
  std::vector<double> lower_bounds;  // refined at StepLowerBound::kCoarseTolerance (sharpened_bound)
  std::vector<size_t> order;  // candidate indices by lower bound; only the first searched() are searched
  std::vector<BestKnown> known;
  // Whether candidate idx has no split with an objective <= limit by StepLowerBound::rules_out;
  // thread-safe for distinct candidates.
  std::function<bool(size_t idx, double limit)> ruled_out;
  // What ruled_out and the refinement have answered per candidate, and sharpened_bound's bounds (NaN: not
  // yet narrowed).
  std::shared_ptr<std::vector<StepLowerBound::RuleBracket>> tried;
  std::vector<double> fine_bounds;
  std::vector<size_t> depth_rank;  // [candidate index]: depth_ranks over `order`
  size_t searched_count = 0;  // how many of `order` are searched (choose_searched)
  // The search's lower bound, for copies on other threads, and the ceiling the left-out candidates are
  // refined up to (the greedy seeds' bound): what bound_left_out needs once the search is done.
  std::shared_ptr<const StepLowerBound> bound;
  double left_out_ceiling = kInfinity;
  // The candidates' greedy splits, for every best_split and seed of this search.
  std::shared_ptr<GreedyMemo> greedy = std::make_shared<GreedyMemo>();
  // The candidates searched: the first searched_count of `order`.
  std::span<const size_t> searched() const {
    return std::span<const size_t>(order).first(std::min(order.size(), searched_count));
  }
};

// Candidate idx's lower bound narrowed from the search's coarse refinement to within
// StepLowerBound::kFineTolerance of the least limit rules_out does not rule out (a bisection between
// lower_bounds[idx] and its bracket's in_from, through ruled_out), for the bounds an answer reports: the
// proven gap and the floors. Kept in fine_bounds (lower_bounds stays as sorted); lower_bounds[idx] where
// nothing was bisected (chunked candidates, d = 1, no bracket). Thread-safe for distinct candidates, as
// ruled_out is (step_bound_order.cpp).
double sharpened_bound(SearchSpace& space, size_t idx);

// The leaderboard's seeds (search_seeds.cpp): upper bounds on some candidates' objectives before any
// exact evaluation (without them the first exact evaluations run with loose bounds and cost the most).
// Each seed must stand for a distinct candidate: the leaderboard's bound is the keep-th least of them.
//
// The candidates to seed first: in `order` (ascending lb), the first 8 of each (schedule, width) with
// one chunk per rank, so that different pipeline depths are represented and a group of near-equal depths
// alone can set the bound for the --top kept, and the first 2 of each (schedule, width, microbatch size),
// 8 when one schedule is searched (`pinned`): the cheap bound ranks the smallest microbatches first, and
// where memory makes them recompute a larger one is faster; the seeds' bound is what the finer bounds
// are refined up to. A pinned search has a seventh of the candidates and its seeds alone set its
// ceiling (at 4,096 GPUs flush's fell from 19,513 to 18,727 ms with 8, 0.3 CPU-s less), while the
// search of all schedules paid 0.15 CPU-s for them there and its ceiling did not move.
std::vector<size_t> seed_candidates(const std::vector<Candidate>& candidates, const std::vector<size_t>& order,
                                    const std::vector<double>& lb, bool pinned);
// greedy_step_ms of each of `chosen` (infinity where the greedy split finds nothing), on `threads`.
std::vector<double> greedy_objectives(const CostModel& model, const std::vector<Candidate>& candidates,
                                      const std::vector<size_t>& chosen, int64_t threads, GreedyMemo* memo = nullptr);
// For when those give too few finite seeds (their candidates do not fit in memory) or poor ones: the
// greedy objectives of the candidates in `order`, but those `seeded` already, whose whole-layer stages can
// fit in memory at all (StepLowerBound::lanes_reach at infinity), until `wanted` are finite or 256 were
// tried.
std::vector<double> seeds_that_fit(const CostModel& model, const StepLowerBound& bound,
                                   const std::vector<Candidate>& candidates, const std::vector<size_t>& order,
                                   const std::vector<double>& lb, std::vector<size_t> seeded, size_t wanted,
                                   int64_t threads, GreedyMemo* memo = nullptr);

// Replays `finalists` (candidate indices with computed splits), then every candidate whose objective
// could still beat the best replay, each with its own search over splits (replay_candidate), and fills
// result.ranked (best first: the top_k + 1, then the best of each other schedule replayed, then the
// replayed `representatives` of schedules that have none; these never win), result.replayed and
// result.proven_gap.
void replay_search(const CostModel& model, SearchSpace& space, const std::vector<size_t>& finalists,
                   std::vector<Evaluated> representatives, const SearchOptions& options, SearchResult& result);

// The ops a replay of e's split would take (estimated_replay_ops of its simulator input).
int64_t replay_ops_of(const CostModel& model, const Evaluated& e);

// Replays e's split until steady (simulate_steady, the measured step only) and records the step, the
// idle fractions, the step's breakdown and whether it settled in e (analytic_step_ms keeps the objective); returns the
// ops replayed, a replay that one step proved periodic counted as the default replay's (default_sim_steps steps).
int64_t replay_into(const CostModel& model, Evaluated& e);

// The best replayed split of `c`, starting from `best` (its best split by the objective): replays it, and
// then every split whose objective is below the best replay so far while a replay budget lasts (within
// kReplayTolerance of it when the replays are large). When `best` is exhausted (not the optimum) only it
// is replayed, and its proven_gap is measured from lower_ms, a lower bound on every split of `c`.
// Deterministic: it depends on nothing but its arguments. `replays` counts the splits replayed; `memo`
// (may be null) is the one best_split was given.
Evaluated replay_candidate(const CostModel& model, const Candidate& c, const Split& best, double lower_ms,
                           int64_t* replays, GreedyMemo* memo = nullptr);

// The work best_split may spend on the candidate at position `pos` of the search's order (by lower
// bound), the `rank`-th of its depth family there (depth_ranks): the full kSplitWork for the first
// kFullWorkPositions when it is among the first kFullWorkPerFamily of its family, a 16th for the others up
// to kSomeWorkPositions, a 64th past them; a candidate whose dynamic program runs out of work gets its
// greedy split and counts in the proven gap by its lower bound. The candidates of one family differ in
// depth alone, and the dynamic programs of neighbouring depths need about the same work, so the family's
// most promising depths are the ones worth the full work: at 2,000 layers on 4,096 GPUs 1,987 of 1,990 flush
// programs ran out of it, and at 400 layers the programs that finish are among the first of their
// families. The work depends on the order alone, so what the search finds does not depend on timing or
// the thread count. Spaces of a few hundred layers rarely reach the position cuts; they do reach the
// family cut, and on the 400-layer block at 64 and 128 GPUs the plans and proven gaps are the same as with
// the full work for every one of the first kFullWorkPositions.
inline constexpr size_t kFullWorkPositions = 1024, kSomeWorkPositions = 2048, kFullWorkPerFamily = 8;
inline int64_t split_work_at(size_t pos, size_t rank) {
  if (pos < kFullWorkPositions && rank < kFullWorkPerFamily) return kSplitWork;
  return pos < kSomeWorkPositions ? kSplitWork / 16 : kSplitWork / 64;
}

// A candidate's depth family: the same schedule, microbatch size, width, placement and chunks (and so the
// same microbatch count), any depth.
using DepthFamily = std::tuple<Schedule, int64_t, int64_t, Placement, int64_t>;
inline DepthFamily depth_family(const Candidate& c) {
  return {c.schedule, c.microbatch_index, c.width, c.placement, c.chunks};
}

// Per candidate index, how many candidates before it in `order` are of its depth family.
inline std::vector<size_t> depth_ranks(const std::vector<Candidate>& candidates, std::span<const size_t> order) {
  std::map<DepthFamily, size_t> seen;
  std::vector<size_t> rank(candidates.size(), 0);
  for (size_t idx : order) rank[idx] = seen[depth_family(candidates[idx])]++;
  return rank;
}

// The work each of a round's candidates gets to run its dynamic program again, in the search's order:
// what it `wants` while `budget` lasts, each taking its share off before the next (so the round spends at
// most `budget` whatever the thread count), then what is left (0 once it is spent).
inline std::vector<int64_t> round_work(std::span<const int64_t> wants, int64_t budget) {
  std::vector<int64_t> out;
  for (int64_t w : wants) {
    out.push_back(std::clamp<int64_t>(w, 0, std::max<int64_t>(budget, 0)));
    budget -= out.back();
  }
  return out;
}

// Splits inside a candidate whose objective is within this fraction of the best replay are not replayed
// once the exact search's budget is spent.
inline constexpr double kReplayTolerance = 0.005;

}  // namespace pd2bw::planner::detail

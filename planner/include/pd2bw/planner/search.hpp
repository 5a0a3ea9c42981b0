// The planner's search over schedule, microbatch size, width, depth, placement and stage splits
// (DESIGN.md section 6), and the assembly of the winning candidate into a Plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/partition.hpp"

namespace pd2bw::planner {

// A candidate with its best split and the cost of each stage.
struct Evaluated {
  Candidate candidate;
  Split split;
  std::vector<StageCost> stages;
  double step_ms = kInfinity;           // the cost model's, or the simulator's after rank_by_simulation
  double analytic_step_ms = kInfinity;  // the cost model's, kept by rank_by_simulation
  double bubble_fraction = 0;           // simulated idle share (set by rank_by_simulation)
  bool simulated() const { return analytic_step_ms < kInfinity; }
};

struct SearchOptions {
  int64_t top_k = 5;    // alternatives to keep besides the winner (the best of each other schedule is
                        // always kept as well)
  int64_t threads = 0;  // workers evaluating candidates; 0 = one per hardware thread. The result does
                        // not depend on it (only the count of evaluated candidates may).
};

struct SearchResult {
  std::vector<Evaluated> ranked;  // feasible, best first: the winner then the alternatives
  int64_t candidates = 0;         // points of the search space
  int64_t evaluated = 0;          // candidates whose split was computed (the rest were pruned)
  bool feasible() const { return !ranked.empty(); }
};

// Every valid candidate, in a fixed order: schedule (2bw, flush, gpipe), microbatch size (ascending),
// depth (1..min(layers, devices, max_depth)), width (ascending, w * d <= devices and b * w dividing the
// global batch), placement (replicas-inner, then stages-inner when both w > 1 and d > 1). 2bw needs
// m >= d. Pinned constraints restrict the lists.
std::vector<Candidate> enumerate_candidates(const CostModel& model);

// Prices every stage of `split` for `c`.
Evaluated evaluate_split(const CostModel& model, const Candidate& c, const Split& split);

// Exact search: the winner has the least step time over all candidates and splits (ties: fewer
// devices, then enumeration order). Pruning by lower bounds never changes the result.
SearchResult search(const CostModel& model, const SearchOptions& options = {});

// Replays each ranked candidate in the simulator (default_sim_steps steps) and re-ranks them by the
// simulated steady-state step time (stable: ties keep the search's order). The cost model is an upper
// bound used to search; the simulator also counts the pipeline's fill overlapping across stages and each
// replica's own links. `threads` replay finalists in parallel (0 = one per hardware thread); the result
// does not depend on it.
void rank_by_simulation(const CostModel& model, SearchResult& result, int64_t threads = 0);

// When search() found nothing feasible: the candidate and split with the smallest largest per-stage
// overage, for the error message.
Evaluated closest_infeasible(const CostModel& model);

// Turns the winner (ranked[0]) and the alternatives into a Plan. `profile_sha256` is of the profile file.
schemas::Plan build_plan(const CostModel& model, const SearchResult& result,
                         const std::string& profile_sha256, const schemas::Provenance& provenance);

// Describes why `loser` is worse than `winner` in one line, e.g. "12% slower: stage 0 allreduce ...".
std::string why_lost(const Evaluated& winner, const Evaluated& loser);

}  // namespace pd2bw::planner

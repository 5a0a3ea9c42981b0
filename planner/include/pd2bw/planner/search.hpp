// The planner's search over schedule, microbatch size, width, depth, placement and stage splits
// (DESIGN.md section 6), and the assembly of the winning candidate into a Plan.
#pragma once

#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/partition.hpp"

namespace pd2bw::planner {

// A replayed step's time per rank, averaged over the stages (ms): the measured step's compute, transfers,
// allreduces and update, and the rest of it idle (SimStageResult's terms).
struct StepBreakdown {
  double compute_ms = 0, p2p_ms = 0, allreduce_ms = 0, update_ms = 0, idle_ms = 0;
};

// A candidate with a split and the cost of each stage.
struct Evaluated {
  Candidate candidate;
  Split split;                          // split.step_ms is the split's objective (step_objective)
  std::vector<StageCost> stages;
  double step_ms = kInfinity;           // the replayed steady step once replayed, else the objective
  double analytic_step_ms = kInfinity;  // the objective of the split, kept when replayed
  double bubble_fraction = 0;           // replayed: idle while even the busiest stage idles (fill, drain)
  double imbalance_fraction = 0;        // replayed: idle of the less busy stages (unequal stages)
  StepBreakdown breakdown;              // replayed: where its step's time goes
  bool steady = false;                  // the replay reached its steady state (SimResult::steady)
  double proven_gap = 0;                // no split of this candidate replays faster than
                                        // step_ms / (1 + proven_gap); 0: this split is the best
  bool representative = false;          // stands for a schedule that was not searched exactly: the
                                        // least-busiest-stage split of one of its most promising candidates
  bool unreplayed = false;              // a kept alternative not replayed (too large for a row, or past
                                        // the replay budget): step_ms is its objective, a lower bound on
                                        // its replay, which may be below the winner's step
  bool simulated() const { return analytic_step_ms < kInfinity; }
};

struct SearchShare;  // search_internal.hpp

struct SearchOptions {
  int64_t top_k = 5;    // alternatives to keep besides the winner (each other schedule is always
                        // represented as well). Never changes the winner.
  int64_t threads = 0;  // workers evaluating candidates; 0 = one per hardware thread. The result does
                        // not depend on it (only the count of evaluated candidates may).
  // Whether search() bounds the left-out points one by one (LeftOut). Only the proven gap reads that
  // floor: without it the floor is 0 when there are left-out points, and the proven gap then infinite
  // (nothing proven). --explain's pinned searches, which report their winners alone, skip it.
  bool bound_left_out = true;
  // Searches of one model that differ in their pinned schedule alone (--explain's) may share what depends
  // on a candidate alone: its cheap lower bound and its greedy threshold search. A search reads what the
  // ones before it left and adds its own; its result is the same without the share.
  std::shared_ptr<SearchShare> share;
};

// An empty share for SearchOptions::share.
std::shared_ptr<SearchShare> make_search_share();

// Candidates enumerate_candidates left out for their size (see kMaxReplayedMicrobatches): how many, and
// a lower bound on the objective (and so the replay) of every one of them (search() finds it exactly where
// it is below the winner's step, and gives the winner's step otherwise).
struct LeftOut {
  int64_t count = 0;
  double floor_ms = std::numeric_limits<double>::infinity();
  std::vector<Candidate> candidates;  // enumerate_candidates' left-out points (the search bounds them
                                      // from below one by one, then empties this)
  // Set by search() only when no searched point fits: the first left-out point (in enumeration order)
  // that neither memory nor the other lower bounds rule out, so "no plan fits" would not be proven.
  std::optional<Candidate> not_ruled_out;
};

struct SearchResult {
  std::vector<Evaluated> ranked;  // feasible and replayed, best first: the winner then the alternatives
  int64_t candidates = 0;         // points of the search space
  LeftOut left_out;               // points left out: more than kMaxReplayedMicrobatches microbatch-stages
  LeftOut unsearched;             // feasible-looking points past the searched ones by lower bound
  int64_t searched = 0;           // candidates searched: the first kMaxSearched by lower bound, or more
                                  // when none of those fits
  int64_t evaluated = 0;          // candidates whose best split was computed (the rest were pruned)
  int64_t replayed = 0;           // splits replayed in the simulator
  int64_t unproven = 0;           // candidates that could still win whose best split was not found within
                                  // kSplitWork (their balanced split was replayed; proven_gap counts them)
  int64_t unreplayed = 0;         // candidates that could still win left unreplayed for the replay budget
                                  // (kRoundReplayOps in replay.cpp; proven_gap counts their objective)
  double proven_gap = 0;          // no split of any candidate replays faster than the winner's step_ms /
                                  // (1 + proven_gap); 0: the winner is the best of all (left-out ones too)
  bool feasible() const { return !ranked.empty(); }
};

// A step's replay takes about m x d x 7 ops per distinct replica; candidates with more microbatch-stages
// per step than this are left out of the search (SearchResult::left_out says how many and how fast they
// could be at best), so that every plan it keeps can be replayed in seconds. They run so many
// microbatches per stage that they hardly ever come close to the winner.
inline constexpr int64_t kMaxReplayedMicrobatches = int64_t{1} << 22;

// A chunked candidate (interleaved, zb-v) is priced per rank by walking its op list, m v ops per rank, and
// its splits are replayed chunk by chunk: those with more chunk-microbatches per step (m d v) than this are
// left out like the ones above (SearchResult::left_out).
inline constexpr int64_t kMaxChunkedMicrobatches = int64_t{1} << 17;

// The search looks at most at this many candidates, the most promising by their lower bounds; the rest
// are summed up in SearchResult::unsearched (and counted in its proven_gap). Only spaces where thousands
// of candidates come within a few percent of each other reach it.
inline constexpr size_t kMaxSearched = 2048;
// Of which at most this many chunked ones (interleaved, zb-v), by their own lower bounds, when other
// schedules are searched too: those bounds are weaker (a chunked rank's layers are no single run), and
// each costs a walk of its ranks' op lists. A search pinned to a chunked schedule searches up to
// kMaxPinnedChunkedSearched.
inline constexpr size_t kMaxChunkedSearched = 64, kMaxPinnedChunkedSearched = 256;

// The schedules the search tries, in order: the pinned one, else 2bw, flush, gpipe, and zb-h1 when the
// profile times the backward in halves (CostModel::split_backward).
std::vector<Schedule> searched_schedules(const CostModel& model);

// Every valid candidate, in a fixed order: schedule (searched_schedules), microbatch size (ascending),
// depth (1..min(layers, devices, max_depth)), width (ascending, w * d <= devices and b * w dividing the
// global batch), placement (replicas-inner, then stages-inner when both w > 1 and d > 1). 2bw needs m >= d; zb-h1 on one
// stage runs flush's ops (nothing to defer) and is left to flush unless zb-h1 is pinned; m x d must not
// pass kMaxReplayedMicrobatches (those left out are summed up in *left_out). Pinned constraints restrict
// the lists. Work: O(sqrt(global batch) + depths x widths), whatever the device count.
std::vector<Candidate> enumerate_candidates(const CostModel& model, LeftOut* left_out = nullptr);

// Prices every stage of `split` for `c`; step_ms and split.step_ms are the split's objective.
Evaluated evaluate_split(const CostModel& model, const Candidate& c, const Split& split);

// Replays e's split as the search does (until steady, the measured step alone) and records its step, idle
// fractions, breakdown and whether it settled in e; analytic_step_ms keeps its objective.
void replay_evaluated(const CostModel& model, Evaluated& e);

// The search: the winner has the least replayed steady step over all candidates and splits (ties: fewer
// devices, then enumeration order), within result.proven_gap. Candidates are bounded from below
// (step_bound), their exact best split by the objective found by the partitioner, and replayed in the
// simulator while their objective, a lower bound on the replay, could still beat the best replay; inside
// a candidate, splits are replayed while theirs could (replay.cpp). Pruning never changes the result,
// whatever top_k and the thread count.
SearchResult search(const CostModel& model, const SearchOptions& options = {});

// The first half of search(), alone: every candidate's best split by the objective, pruned by lower
// bounds, without replays. ranked holds the top_k + 1 by objective (step_ms = the objective); the
// winner has the least objective over all candidates and splits (ties: fewer devices, then enumeration order). Exact; for tests and for explaining the search.
SearchResult objective_search(const CostModel& model, const SearchOptions& options = {});

// When search() found nothing feasible: the candidate and split with the smallest largest per-stage
// overage, for the error message.
Evaluated closest_infeasible(const CostModel& model);

// Turns the winner (ranked[0]) and the alternatives into a Plan. `profile_sha256` is of the profile file.
schemas::Plan build_plan(const CostModel& model, const SearchResult& result,
                         const std::string& profile_sha256, const schemas::Provenance& provenance);

// Describes why `loser` is worse than `winner` in one line, e.g. "12% slower: stage 0 allreduce ...".
std::string why_lost(const Evaluated& winner, const Evaluated& loser);

}  // namespace pd2bw::planner

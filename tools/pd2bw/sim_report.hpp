// Human-readable and JSON output of simulated runs: `pd2bw simulate`'s table and `pd2bw plan --explain`.
#pragma once

#include <string>
#include <vector>

#include "pd2bw/planner/search.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "pd2bw/schemas/plan.hpp"

namespace pd2bw::cli {

// The per-stage table of a simulated plan next to the plan's own numbers (stderr), with a warning for
// every stage whose simulated peak memory passes its device's memory. A row is a rank position: with
// several model chunks per rank (v > 1) its layers are its chunks' ranges and its planned memory their
// totals added up, so the replay's peak and the plan compare per rank; with v = 1 a row is a stage.
void print_sim_table(const schemas::Plan& plan, const planner::SimInput& in, const planner::SimResult& sim);

// The stages (ranks, when v > 1) whose simulated peak memory passes the device's memory, one line each
// ("" when none).
std::string memory_warnings(const planner::SimInput& in, const planner::SimResult& sim);

// Machine-readable report of the same numbers (deterministic JSON text): one "stages" entry per rank
// position; with v > 1 also "chunks_per_rank" and each entry's "chunks" (its model chunks).
std::string sim_report_json(const schemas::Plan& plan, const planner::SimInput& in, const planner::SimResult& sim);

// For each of `bests` (the chosen plan first, then the best of each other schedule): where a rank's
// steady step goes (compute, p2p, allreduce, update, fill/drain bubble, idle on less busy stages;
// averaged over ranks) and which memory term binds on the fullest rank (its chunks' terms added up);
// then how much faster 2bw steps than the best synchronous plan among them and what its stale update
// costs (stderr).
void print_explain(const planner::CostModel& model, const std::vector<planner::Evaluated>& bests);

}  // namespace pd2bw::cli

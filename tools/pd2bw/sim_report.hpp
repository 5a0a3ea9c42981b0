// Human-readable and JSON output of simulated runs: `pd2bw simulate`'s table and `pd2bw plan --explain`.
#pragma once

#include <string>
#include <vector>

#include "pd2bw/planner/search.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "pd2bw/schemas/plan.hpp"

namespace pd2bw::cli {

// The per-stage table of a simulated plan next to the plan's own numbers (stderr), with a warning for
// every stage whose simulated peak memory passes its device's memory.
void print_sim_table(const schemas::Plan& plan, const planner::SimInput& in, const planner::SimResult& sim);

// The stages whose simulated peak memory passes the device's memory, one line each ("" when none).
std::string memory_warnings(const planner::SimInput& in, const planner::SimResult& sim);

// Machine-readable report of the same numbers (deterministic JSON text).
std::string sim_report_json(const schemas::Plan& plan, const planner::SimInput& in, const planner::SimResult& sim);

// For each of `bests` (the chosen plan first, then the best of each other schedule): where a rank's
// steady step goes (compute, p2p, allreduce, update, fill/drain bubble, idle on less busy stages;
// averaged over ranks) and which memory term binds; then how much faster 2bw steps than the best
// synchronous plan among them and what its stale update costs (stderr).
void print_explain(const planner::CostModel& model, const std::vector<planner::Evaluated>& bests);

}  // namespace pd2bw::cli

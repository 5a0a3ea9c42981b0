// Human-readable output of `pd2bw plan` (stderr): the inputs, the chosen plan's stage table, the
// alternatives, and the infeasibility report.
#pragma once

#include "pd2bw/planner/search.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "plan_options.hpp"

namespace pd2bw::cli {

void print_plan_header(const PlanInputs& in, const planner::CostModel& model);
void print_plan_table(const schemas::Plan& plan, const planner::CostModel& model);
// The alternatives that lost, and a line naming each schedule of `searched` (the schedules the search
// looked at) that has no row.
void print_alternatives(const schemas::Plan& plan, const std::vector<schemas::Schedule>& searched);
// Throws InfeasiblePlanError describing `closest` (by how many bytes each stage is over).
[[noreturn]] void throw_infeasible(const planner::CostModel& model, const planner::Evaluated& closest);
// Throws InfeasiblePlanError saying that no searched point fits but that `left`'s not_ruled_out (set),
// left out for its size, may: "no plan fits" is then not proven.
[[noreturn]] void throw_left_out_may_fit(const planner::LeftOut& left);

}  // namespace pd2bw::cli

// least_overage_split's overage alone, for closest_infeasible: it compares many candidates' overages and
// needs the split of one. Private to the planner.
#pragma once

#include <cstdint>

#include "pd2bw/planner/partition.hpp"

namespace pd2bw::planner::detail {

// least_overage_split(model, c, bound_bytes).over_bytes (INT64_MAX when no split is within bound_bytes
// over the memory), often without building the split's tables: the walks' lower bound is the answer when
// the greedy split reaches it.
int64_t least_overage_bytes(const CostModel& model, const Candidate& c, int64_t bound_bytes = INT64_MAX);

}  // namespace pd2bw::planner::detail

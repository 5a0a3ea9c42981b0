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

// The forward walk least_overage_split bounds with (c unchunked): d stages of whole layers, each priced at
// the least bytes any stage holding its run can have; false proves that no split of `c` has every stage
// within `cap` bytes.
bool overage_walk_reaches(const CostModel& model, const Candidate& c, int64_t cap);
// The least cap >= 0 at which overage_walk_reaches holds, at most `bound`; -1 when it does not hold at
// `bound`. Exact: the walks least_overage_split makes to find it decide intervals of caps, not one each.
int64_t least_walk_cap(const CostModel& model, const Candidate& c, int64_t bound);

}  // namespace pd2bw::planner::detail

// closest_infeasible (the error message's closest plan when nothing fits) against the plain reference:
// every candidate in enumeration order, least_overage_split under the best overage so far, the first of
// the least overage kept. The search orders and prunes (deepest first, the whole-layer memory walk,
// repeats of the same memory shape skipped); the answer must not change.
#include <doctest/doctest.h>

#include <cstdint>
#include <string>

#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/partition.hpp"
#include "pd2bw/planner/search.hpp"
#include "random_instances.hpp"

namespace {

using pd2bw::planner::Candidate;
using pd2bw::planner::CostModel;

struct Closest {
  Candidate c;
  std::vector<int64_t> bounds;
  int64_t over = INT64_MAX;
};

Closest reference(const CostModel& model) {
  Closest best;
  for (const Candidate& c : pd2bw::planner::enumerate_candidates(model)) {
    const auto o = pd2bw::planner::least_overage_split(model, c, best.over);
    if (o.bounds.empty() || o.over_bytes >= best.over) continue;
    best = {c, o.bounds, o.over_bytes};
  }
  return best;
}

}  // namespace

TEST_CASE("closest_infeasible picks the reference's candidate and split") {
  int64_t compared = 0, deeper = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    for (int64_t shrink : {1, 4, 16}) {  // the drawn memory, then too little for most or all candidates
      auto inst = pd2bw::testing::make_random_instance(seed);
      const int64_t reserve = inst.constraints.reserve_bytes;
      pd2bw::testing::set_device_memory(inst, reserve + (inst.profile.device.memory_bytes - reserve) / shrink);
      INFO(inst.describe() << "memory / " << shrink);
      const CostModel model(inst.profile, inst.cluster, inst.constraints);
      const Closest want = reference(model);
      const auto got = pd2bw::planner::closest_infeasible(model);
      if (want.bounds.empty()) {
        CHECK(got.split.bounds.empty());
        continue;
      }
      ++compared;
      deeper += want.c.depth > 1 ? 1 : 0;
      const auto& c = got.candidate;
      CHECK(c.schedule == want.c.schedule);
      CHECK(c.microbatch == want.c.microbatch);
      CHECK(c.width == want.c.width);
      CHECK(c.depth == want.c.depth);
      CHECK(c.microbatches == want.c.microbatches);
      CHECK(c.placement == want.c.placement);
      CHECK(c.chunks == want.c.chunks);
      CHECK(got.split.bounds == want.bounds);
    }
  }
  MESSAGE("instances compared " << compared << ", closest deeper than one stage " << deeper);
  CHECK(compared >= 300);
  CHECK(deeper >= 100);
}

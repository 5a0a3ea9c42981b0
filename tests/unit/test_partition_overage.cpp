// least_overage_split (planner/src/partition_overage.cpp) against brute force over every split, on small
// random instances whose memory is often too small. What it minimises (partition.hpp), for one chunk per
// rank: over the contiguous splits of the layers into d stages, the largest over stages of (the stage's
// total memory in the option the recompute policy picks, its least-memory option when nothing fits) minus
// the device memory. The brute force prices each stage with CostModel::stage_cost (StageCost::memory: that
// same option) and keeps the least largest overage; whether it is > 0 (no split fits) or not, the
// planner's answer must equal it, its bounds must reach it, and bound_bytes must cut, for one stage too:
// at the least overage the split is found, below it (by more than the split tables' relative slack of
// 1e-9) there is none. A chunked candidate (interleaved, zb-v) gets its equal-chunk split, priced as
// evaluate_split prices it.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "brute_force.hpp"
#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/partition.hpp"
#include "pd2bw/planner/search.hpp"
#include "random_instances.hpp"

namespace {

using pd2bw::planner::Candidate;
using pd2bw::planner::CostModel;
using pd2bw::testing::for_each_candidate;
using pd2bw::testing::make_random_instance;
using pd2bw::testing::RandomInstance;

// The least, over every split of `c` into c.depth stages, of the largest stage overage; each stage's
// overage is its StageCost's total memory less the device memory.
int64_t brute_least_overage(const CostModel& model, const Candidate& c) {
  const int64_t L = model.num_layers(), d = c.depth, limit = model.memory_limit_bytes();
  std::vector<int64_t> over(static_cast<size_t>(d * (L + 1) * (L + 1)), 0);
  auto at = [&](int64_t s, int64_t b, int64_t e) -> int64_t& {
    return over[static_cast<size_t>((s * (L + 1) + b) * (L + 1) + e)];
  };
  for (int64_t s = 0; s < d; ++s)
    for (int64_t b = s; b <= L - (d - s); ++b)
      for (int64_t e = b + 1; e <= L - (d - 1 - s); ++e) at(s, b, e) = model.stage_cost(c, s, b, e).memory.total_bytes - limit;
  int64_t least = INT64_MAX;
  const std::function<void(int64_t, int64_t, int64_t)> walk = [&](int64_t s, int64_t begin, int64_t worst) {
    if (worst >= least) return;  // prunes only splits that cannot be below the least found
    if (s == d) {
      least = worst;
      return;
    }
    for (int64_t end = s == d - 1 ? L : begin + 1; end <= L - (d - 1 - s); ++end)
      walk(s + 1, end, std::max(worst, at(s, begin, end)));
  };
  walk(0, 0, INT64_MIN);
  return least;
}

// The largest stage overage of the split `bounds` (d + 1 bounds, 0 to L, increasing), priced as above.
int64_t overage_of(const CostModel& model, const Candidate& c, const std::vector<int64_t>& bounds) {
  int64_t worst = INT64_MIN;
  for (size_t s = 0; s + 1 < bounds.size(); ++s)
    worst = std::max(worst, model.stage_cost(c, static_cast<int64_t>(s), bounds[s], bounds[s + 1]).memory.total_bytes -
                                model.memory_limit_bytes());
  return worst;
}

bool valid_bounds(const std::vector<int64_t>& bounds, int64_t parts, int64_t layers) {
  if (bounds.size() != static_cast<size_t>(parts + 1) || bounds.front() != 0 || bounds.back() != layers) return false;
  return std::adjacent_find(bounds.begin(), bounds.end(), std::greater_equal<>()) == bounds.end();
}

struct Tally {
  int64_t candidates = 0, fitting = 0, multi_stage = 0, chunked = 0;
};

void check_candidate(const CostModel& model, const Candidate& c, Tally& tally) {
  const auto got = pd2bw::planner::least_overage_split(model, c);
  if (c.chunks > 1) {
    ++tally.chunked;
    REQUIRE(valid_bounds(got.bounds, c.depth * c.chunks, model.num_layers()));
    pd2bw::planner::Split split;
    split.bounds = got.bounds;
    int64_t over = 0;
    for (const auto& st : pd2bw::planner::evaluate_split(model, c, split).stages) over = std::max(over, st.over_bytes);
    CHECK(got.over_bytes == over);
    return;
  }
  const int64_t least = brute_least_overage(model, c);
  CAPTURE(least);
  if (least <= 0) {
    ++tally.fitting;
  } else {
    ++tally.candidates;
    tally.multi_stage += c.depth > 1;
  }
  CHECK(got.over_bytes == least);
  REQUIRE(valid_bounds(got.bounds, c.depth, model.num_layers()));
  CHECK(overage_of(model, c, got.bounds) == least);
  // bound_bytes: splits over it are not looked for.
  const auto at_least = pd2bw::planner::least_overage_split(model, c, least);
  CHECK(at_least.over_bytes == least);
  CHECK(overage_of(model, c, at_least.bounds) == least);
  const auto below = pd2bw::planner::least_overage_split(model, c, least - 1 - std::abs(least) / 100000000);
  CHECK(below.bounds.empty());
}

}  // namespace

TEST_CASE("least_overage_split finds the least largest stage overage of every split, as brute force does") {
  Tally tally;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    RandomInstance inst = make_random_instance(seed);
    // The instance's memory, and a tenth of what it has above the reserve: most candidates then fit nowhere.
    const int64_t spare = inst.cluster.device.memory_bytes - inst.constraints.reserve_bytes;
    for (const int64_t memory : {inst.cluster.device.memory_bytes, inst.constraints.reserve_bytes + spare / 10}) {
      pd2bw::testing::set_device_memory(inst, memory);
      INFO(inst.describe());
      const CostModel model(inst.profile, inst.cluster, inst.constraints);
      for_each_candidate(model, [&](const Candidate& c) {
        const std::string schedule = pd2bw::testing::schedule_name(c.schedule);
        CAPTURE(schedule);
        CAPTURE(c.microbatch);
        CAPTURE(c.depth);
        CAPTURE(c.width);
        CAPTURE(c.chunks);
        check_candidate(model, c, tally);
      });
    }
  }
  MESSAGE("candidates that fit nowhere " << tally.candidates << " (" << tally.multi_stage
                                         << " of more than one stage), that fit " << tally.fitting << ", chunked "
                                         << tally.chunked);
  // The instances must reach the cases that matter, or the comparison proves little.
  CHECK(tally.candidates >= 2000);
  CHECK(tally.fitting >= 1000);
  CHECK(tally.multi_stage >= tally.candidates / 2);
  CHECK(tally.chunked >= 200);
}

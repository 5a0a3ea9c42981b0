// The stages of a candidate by stash bucket (forced_redo.hpp: stages_by_stash_bucket), which the recompute
// bound memory forces (ForcedRedo) reads for every candidate: for the schedules of one chunk per rank it
// is found by bisection on the stage (their in-flight counts never grow with it), and it must equal the
// count stage by stage, as it is taken for the chunked schedules.
#include <doctest/doctest.h>

#include <bit>
#include <cstdint>
#include <vector>

#include "forced_redo.hpp"
#include "pd2bw/planner/cost_model.hpp"

namespace {

using pd2bw::planner::Candidate;
using pd2bw::planner::CostModel;
using pd2bw::schemas::Schedule;

// out[j]: the stages k with 2^j <= in_flight(c, k) < 2^(j+1), one stage at a time.
std::vector<int64_t> stage_by_stage(const Candidate& c) {
  std::vector<int64_t> out;
  for (int64_t k = 0; k < c.depth; ++k) {
    const auto j = static_cast<size_t>(std::bit_width(static_cast<uint64_t>(CostModel::in_flight(c, k))) - 1);
    if (out.size() <= j) out.resize(j + 1, 0);
    ++out[j];
  }
  return out;
}

Candidate candidate(Schedule s, int64_t d, int64_t m, int64_t v = 1) {
  Candidate c;
  c.schedule = s;
  c.depth = d;
  c.microbatches = m;
  c.chunks = v;
  return c;
}

}  // namespace

TEST_CASE("stages_by_stash_bucket counts each stage once, in the bucket of its in-flight count") {
  int64_t cases = 0;
  for (Schedule s : {Schedule::two_bw, Schedule::flush, Schedule::gpipe, Schedule::zb_h1, Schedule::zb_h2})
    for (int64_t d = 1; d <= 70; ++d)
      for (int64_t m = 1; m <= 140; m += (m < 20 ? 1 : 7)) {
        const Candidate c = candidate(s, d, m);
        CHECK_MESSAGE(pd2bw::planner::stages_by_stash_bucket(c) == stage_by_stage(c), "d=", d, " m=", m);
        ++cases;
      }
  // Deep pipelines, with m on either side of d and of the powers of two.
  for (Schedule s : {Schedule::flush, Schedule::zb_h2})
    for (int64_t d : {255, 256, 257, 1023, 4096})
      for (int64_t m : {1, 63, 64, 65, 512, 4095, 4096, 4097, 8192}) {
        const Candidate c = candidate(s, d, m);
        CHECK(pd2bw::planner::stages_by_stash_bucket(c) == stage_by_stage(c));
        ++cases;
      }
  // The chunked schedules, stage by stage either way.
  for (int64_t d = 2; d <= 6; ++d)
    for (int64_t m : {d, 2 * d, 3 * d}) {
      for (int64_t v : {2, 3})
        CHECK(pd2bw::planner::stages_by_stash_bucket(candidate(Schedule::interleaved, d, m, v)) ==
              stage_by_stage(candidate(Schedule::interleaved, d, m, v)));
      CHECK(pd2bw::planner::stages_by_stash_bucket(candidate(Schedule::zb_v, d, m, 2)) ==
            stage_by_stage(candidate(Schedule::zb_v, d, m, 2)));
      cases += 3;
    }
  CHECK(cases > 5000);
}

// Flush's tiered splits (planner/src/partition_tiered.cpp) on the BERT 2.2B block repeated to 300 layers,
// 4 nodes of 8, 40 GiB, global batch 64 (b = 4, w = 1: m = 16, so every d > 16 has stages whose warm-up
// covers the step):
// - each tiered split is a real split: 0 = b_0 < ... < b_d = L, every stage fits, and its step_ms is its
//   objective priced from scratch; its first d - m + 1 stages hold more compute, on average, than the rest;
//   none exists where d < m or for another schedule;
// - it beats the greedy split's objective on most of these depths (the reason it exists);
// - best_split out of work returns the lesser objective of the two (greedy_step_ms's value);
// - replay_candidate of a flush candidate out of work replays both and keeps the faster: at d = 32 the
//   tiered split has the lesser objective but the greedy one replays faster, and the result is no slower
//   than either (it fails when the replay keeps only the search's split).
#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

#include "partition_internal.hpp"
#include "pd2bw/planner/partition.hpp"
#include "pd2bw/planner/search.hpp"
#include "prepared.hpp"
#include "repeated_profile.hpp"
#include "search_internal.hpp"

using namespace pd2bw::planner;
using pd2bw::schemas::Schedule;
namespace detail = pd2bw::planner::detail;

namespace {

// Four nodes of eight devices of 40 GiB.
Cluster four_nodes() {
  Cluster c;
  c.device = {"NVIDIA H200", int64_t{40} << 30};
  c.levels.push_back({"node", 8, 300.0, 0.005, 300.0});
  c.levels.push_back({"cluster", 4, 25.0, 0.010, 25.0});
  return c;
}

struct Setup {
  Profile profile = pd2bw::testing::repeated_profile("bert-2.2b", 300);
  Constraints constraints = [] {
    Constraints k;
    k.global_batch = 64;
    return k;
  }();
  CostModel model{profile, four_nodes(), constraints};
  size_t bi = 0;  // b = 4
  Setup() {
    while (profile.microbatch_sizes[bi] != 4) ++bi;
  }
  Candidate flush(int64_t d) const {
    return {Schedule::flush, static_cast<int64_t>(bi), 4, 1, d, 16, pd2bw::schemas::Placement::replicas_inner, 1};
  }
};

Split greedy_split_of(const CostModel& model, const Candidate& c) {
  const int64_t cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  return detail::greedy_of(model, detail::prepare(model, c), cap, kInfinity);
}

double replayed(const CostModel& model, const Candidate& c, const Split& s) {
  Evaluated e = evaluate_split(model, c, s);
  detail::replay_into(model, e);
  return e.step_ms;
}

}  // namespace

TEST_CASE("flush's tiered split is a real split, tiered, and beats the greedy split's objective") {
  const Setup s;
  const CostModel& model = s.model;
  const auto& cp = model.compute_prefix(static_cast<int64_t>(s.bi));
  int64_t tiered = 0, beats = 0;
  for (int64_t d = 17; d <= 32; ++d) {
    CAPTURE(d);
    const Candidate c = s.flush(d);
    const Split t = detail::tiered_split(model, detail::prepare(model, c));
    if (!t.feasible()) continue;
    ++tiered;
    REQUIRE(t.bounds.size() == static_cast<size_t>(d + 1));
    CHECK(t.bounds.front() == 0);
    CHECK(t.bounds.back() == model.num_layers());
    for (int64_t k = 0; k < d; ++k) CHECK(t.bounds[static_cast<size_t>(k)] < t.bounds[static_cast<size_t>(k + 1)]);
    const Evaluated e = evaluate_split(model, c, t);
    for (const auto& st : e.stages) CHECK(st.feasible);
    CHECK(e.step_ms == t.step_ms);
    double early = 0, late = 0;
    const int64_t last_one_trip = d - c.microbatches;
    for (int64_t k = 0; k < d; ++k) {
      const double x = cp[static_cast<size_t>(t.bounds[static_cast<size_t>(k + 1)])] -
                       cp[static_cast<size_t>(t.bounds[static_cast<size_t>(k)])];
      (k <= last_one_trip ? early : late) += x;
    }
    CHECK(early / static_cast<double>(last_one_trip + 1) > late / static_cast<double>(d - 1 - last_one_trip));
    beats += t.step_ms < greedy_split_of(model, c).step_ms ? 1 : 0;
  }
  MESSAGE("depths with a tiered split: " << tiered << ", of which it beats the greedy split: " << beats);
  CHECK(tiered == 16);
  CHECK(beats >= 8);
  // None where d < m, nor for another schedule.
  CHECK(!detail::tiered_split(model, detail::prepare(model, s.flush(8))).feasible());
  Candidate gpipe = s.flush(24);
  gpipe.schedule = Schedule::gpipe;
  CHECK(!detail::tiered_split(model, detail::prepare(model, gpipe)).feasible());
}

TEST_CASE("out of work, flush keeps the lesser objective of its greedy and tiered splits and replays both") {
  const Setup s;
  const CostModel& model = s.model;
  for (int64_t d : {20, 24, 32}) {
    CAPTURE(d);
    const Candidate c = s.flush(d);
    const Split greedy = greedy_split_of(model, c);
    const Split tiered = detail::tiered_split(model, detail::prepare(model, c));
    REQUIRE(greedy.feasible());
    REQUIRE(tiered.feasible());
    const Split out = best_split(model, c, kInfinity, 1);
    REQUIRE(out.exhausted);
    CHECK(out.step_ms == std::min(greedy.step_ms, tiered.step_ms));
    CHECK(out.bounds == (tiered.step_ms < greedy.step_ms ? tiered.bounds : greedy.bounds));
    CHECK(greedy_step_ms(model, c) == out.step_ms);
    int64_t replays = 0;
    const Evaluated won = detail::replay_candidate(model, c, out, 0.0, &replays);
    const double by_greedy = replayed(model, c, greedy), by_tiered = replayed(model, c, tiered);
    CAPTURE(by_greedy);
    CAPTURE(by_tiered);
    CHECK(won.step_ms <= std::min(by_greedy, by_tiered));
    CHECK(replays >= 2);
    // Where the two disagree (the lesser objective, the tiered one, replays slower), only both replays find
    // the faster one.
    if (d == 32) {
      CHECK(tiered.step_ms < greedy.step_ms);
      CHECK(by_greedy < by_tiered);
    }
  }
}

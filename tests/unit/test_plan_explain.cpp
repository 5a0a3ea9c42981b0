// `pd2bw plan --explain`'s rows against the searches they stand for: on random small and medium
// instances, best_of_each_schedule's plan of each schedule equals the winner of search() pinned to it
// (what `pd2bw plan --schedule S` writes, at the default --top) in candidate, split and step_ms exactly,
// and put_exact_bests leaves each of those schedules a row among the alternatives whose first is that
// plan, with no representative left, whatever top_k. The searches share what they can as the CLI's do
// (SearchOptions::share), and the pinned searches they are compared with share nothing. Each best's
// breakdown (what `--explain` prints of where its step goes) is its split's own replay, averaged over the
// stages: replayed again here, bit for bit.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "pd2bw/planner/explain.hpp"
#include "pd2bw/planner/search.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "random_instances.hpp"

using namespace pd2bw;
using pd2bw::testing::make_random_instance;
using pd2bw::testing::RandomInstance;
using pd2bw::testing::RandomInstanceOptions;

namespace {

bool same_plan(const planner::Evaluated& a, const planner::Evaluated& b) {
  const auto &x = a.candidate, &y = b.candidate;
  return x.schedule == y.schedule && x.microbatch == y.microbatch && x.microbatches == y.microbatches &&
         x.depth == y.depth && x.width == y.width && x.placement == y.placement && x.chunks == y.chunks &&
         a.split.bounds == b.split.bounds && a.step_ms == b.step_ms;
}

// e's breakdown against a replay of its split made here, the stages' terms averaged in the same order; the
// terms make up its step (each rank is busy or idle over the measured step's window).
void check_breakdown(const planner::CostModel& model, const planner::Evaluated& e) {
  std::vector<bool> recompute;
  for (const auto& st : e.stages) recompute.push_back(st.recompute);
  const planner::SimResult sim =
      planner::simulate_steady(planner::make_sim_input(model, e.candidate, e.split.bounds, recompute,
                                                       planner::default_sim_steps(e.candidate.schedule)),
                               false, true);
  planner::StepBreakdown want;
  const auto n = static_cast<double>(sim.stages.size());
  for (const auto& s : sim.stages) {
    want.compute_ms += s.compute_ms / n;
    want.p2p_ms += s.p2p_ms / n;
    want.allreduce_ms += s.allreduce_ms / n;
    want.update_ms += s.update_ms / n;
    want.idle_ms += s.idle_ms / n;
  }
  CHECK(e.step_ms == sim.step_ms);
  CHECK(e.breakdown.compute_ms == want.compute_ms);
  CHECK(e.breakdown.p2p_ms == want.p2p_ms);
  CHECK(e.breakdown.allreduce_ms == want.allreduce_ms);
  CHECK(e.breakdown.update_ms == want.update_ms);
  CHECK(e.breakdown.idle_ms == want.idle_ms);
  CHECK(e.breakdown.compute_ms > 0.0);
  const auto& b = e.breakdown;
  CHECK(b.compute_ms + b.p2p_ms + b.allreduce_ms + b.update_ms + b.idle_ms ==
        doctest::Approx(sim.step_ms).epsilon(1e-9));
}

// Checks one instance; returns how many schedules' rows were compared.
int64_t check_instance(const RandomInstance& inst, int64_t top_k) {
  const planner::CostModel model(inst.profile, inst.cluster, inst.constraints);
  planner::SearchOptions options;
  options.top_k = top_k;
  options.threads = 1;
  const auto share = planner::make_search_share();  // as the CLI's --explain: the searches below reuse it
  options.share = share;
  planner::SearchResult result = planner::search(model, options);
  if (!result.feasible()) return 0;
  // The share changes nothing: the same winner, alternatives and proven gap as a search without one.
  options.share = nullptr;
  const planner::SearchResult unshared = planner::search(model, options);
  REQUIRE(unshared.ranked.size() == result.ranked.size());
  for (size_t k = 0; k < result.ranked.size(); ++k) CHECK(same_plan(result.ranked[k], unshared.ranked[k]));
  CHECK(result.proven_gap == unshared.proven_gap);
  auto bests = planner::best_of_each_schedule(inst.profile, inst.cluster, inst.constraints, result, 1, share);
  REQUIRE(!bests.empty());
  CHECK(same_plan(bests.front(), result.ranked.front()));
  for (const auto& best : bests) check_breakdown(model, best);
  planner::put_exact_bests(result, bests);
  CHECK(same_plan(result.ranked.front(), bests.front()));
  int64_t compared = 0;
  for (schemas::Schedule s : planner::searched_schedules(model)) {
    if (s == bests.front().candidate.schedule) continue;
    const std::string name = testing::schedule_name(s);
    CAPTURE(name);
    planner::Constraints pinned = inst.constraints;
    pinned.schedule = s;
    const planner::SearchResult alone = planner::search(planner::CostModel(inst.profile, inst.cluster, pinned), {});
    const planner::Evaluated* best = nullptr;
    for (size_t k = 1; k < bests.size(); ++k)
      if (bests[k].candidate.schedule == s) best = &bests[k];
    CHECK(alone.feasible() == (best != nullptr));
    if (!alone.feasible() || !best) continue;
    CHECK(same_plan(*best, alone.ranked.front()));
    const planner::Evaluated* row = nullptr;
    for (size_t k = 1; k < result.ranked.size(); ++k) {
      const auto& e = result.ranked[k];
      if (e.candidate.schedule != s) continue;
      CHECK(!e.representative);
      if (!row) row = &e;
    }
    REQUIRE(row != nullptr);
    CAPTURE(row->step_ms);
    CAPTURE(alone.ranked.front().step_ms);
    CHECK(same_plan(*row, alone.ranked.front()));
    ++compared;
  }
  for (size_t k = 2; k < result.ranked.size(); ++k) CHECK(result.ranked[k - 1].step_ms <= result.ranked[k].step_ms);
  return compared;
}

// A one-stage row of `s` at depth `depth` stepping in step_ms, for put_exact_bests' tests.
planner::Evaluated row(schemas::Schedule s, int64_t depth, double step_ms) {
  planner::Evaluated e;
  e.candidate.schedule = s;
  e.candidate.depth = depth;
  e.split.bounds = {0, 4};
  e.step_ms = step_ms;
  return e;
}

}  // namespace

TEST_CASE("explain: each schedule's row is the plan a search pinned to it finds (small instances)") {
  RandomInstanceOptions opt;
  opt.pin_schedule_p = 0.0;
  opt.split_backward_p = 0.7;
  int64_t compared = 0;
  for (uint64_t seed = 1; seed <= 24; ++seed) {
    const RandomInstance inst = make_random_instance(seed, opt);
    CAPTURE(inst.describe());
    compared += check_instance(inst, static_cast<int64_t>(seed % 3));  // top_k 0, 1, 2: a row whatever --top
  }
  CHECK(compared > 40);
}

TEST_CASE("explain: each schedule's row is the plan a search pinned to it finds (medium instances)") {
  RandomInstanceOptions opt = pd2bw::testing::medium_instance_options();
  opt.pin_schedule_p = 0.0;
  opt.split_backward_p = 1.0;
  opt.min_layers = 24;
  opt.max_layers = 48;
  int64_t compared = 0;
  for (uint64_t seed = 100; seed < 110; ++seed) {
    const RandomInstance inst = make_random_instance(seed, opt);
    CAPTURE(inst.describe());
    compared += check_instance(inst, 0);
  }
  CHECK(compared > 16);
}

TEST_CASE("explain: a pinned best faster than the winner becomes the winner") {
  // Where the search of all schedules is not exact (at scale), a pinned search can beat its winner.
  planner::SearchResult result;
  result.ranked = {row(schemas::Schedule::two_bw, 1, 10.0), row(schemas::Schedule::flush, 2, 12.0)};
  result.ranked[1].representative = true;
  std::vector<planner::Evaluated> bests = {result.ranked[0], row(schemas::Schedule::flush, 3, 8.0),
                                           row(schemas::Schedule::gpipe, 1, 11.0)};
  planner::put_exact_bests(result, bests);
  REQUIRE(result.ranked.size() == 3);
  CHECK(result.ranked[0].step_ms == 8.0);
  CHECK(result.ranked[0].candidate.depth == 3);
  CHECK(result.ranked[1].candidate.schedule == schemas::Schedule::two_bw);
  CHECK(result.ranked[2].candidate.schedule == schemas::Schedule::gpipe);
  CHECK(same_plan(bests.front(), result.ranked.front()));
  CHECK(bests.size() == 3);
}

TEST_CASE("explain: a row not replayed below the winner's step does not become the chosen plan") {
  // At scale an alternative past the replay budget shows its objective, a lower bound on its replay,
  // which may be below the winner's step. Only a pinned best (replayed) may take the winner's place.
  for (double pinned : {12.0, 9.0}) {  // the flush best slower, then faster than the winner
    CAPTURE(pinned);
    planner::SearchResult result;
    result.ranked = {row(schemas::Schedule::two_bw, 1, 10.0), row(schemas::Schedule::flush, 2, 8.0)};
    result.ranked[1].unreplayed = true;
    std::vector<planner::Evaluated> bests = {result.ranked[0], row(schemas::Schedule::flush, 3, pinned)};
    planner::put_exact_bests(result, bests);
    REQUIRE(result.ranked.size() == 3);
    REQUIRE(bests.size() == 2);
    const double chosen = std::min(10.0, pinned);
    CHECK(result.ranked[0].step_ms == chosen);
    CHECK_FALSE(result.ranked[0].unreplayed);
    CHECK(same_plan(bests.front(), result.ranked.front()));
    CHECK(result.ranked[1].step_ms == 8.0);  // the row not replayed stays, marked
    CHECK(result.ranked[1].unreplayed);
    CHECK(result.ranked[2].step_ms == std::max(10.0, pinned));
  }
}

TEST_CASE("explain: a pinned search that skips the left-out floor finds the same plan and proves no gap") {
  // Global batches of millions of samples leave the candidates with the most microbatch-stages out
  // (kMaxReplayedMicrobatches); the floor search() proves over them only enters the proven gap.
  int64_t with_left_out = 0;
  for (uint64_t seed = 1; seed <= 40 && with_left_out < 6; ++seed) {
    RandomInstance inst = make_random_instance(seed);
    inst.constraints.global_batch = int64_t{3} << 21;
    inst.constraints.microbatch.reset();
    CAPTURE(inst.describe());
    const planner::CostModel model(inst.profile, inst.cluster, inst.constraints);
    planner::SearchOptions options;
    options.top_k = 0;
    options.threads = 1;
    const planner::SearchResult full = planner::search(model, options);
    options.bound_left_out = false;
    const planner::SearchResult quick = planner::search(model, options);
    REQUIRE(full.feasible() == quick.feasible());
    CHECK(full.left_out.count == quick.left_out.count);
    if (!full.feasible() || full.left_out.count == 0) continue;
    ++with_left_out;
    CHECK(same_plan(full.ranked.front(), quick.ranked.front()));
    CHECK(full.left_out.floor_ms > 0.0);
    CHECK(quick.left_out.floor_ms == 0.0);
    CHECK(quick.proven_gap == std::numeric_limits<double>::infinity());
  }
  CHECK(with_left_out >= 6);
}

// The chunked split search where the equal-compute split does not fit (planner/src/chunk_split.cpp:
// memory_fitted): on the BERT example's block repeated to 200 layers, eight 80 GiB devices, zb-v's middle
// ranks cannot hold their equal share, yet a split that gives the outer ranks more does fit. For every
// such candidate the search returns a split whose ranks all fit by the simulator's own memory walk (the
// equal split's do not), covering every layer once. The GPT block's, whose deferred weight gradients
// stash half as much as its activations, fits only when the layout weighs that stash too. Under
// --recompute never and always the fitted split fits with every chunk recomputing as the policy says. On
// models small enough to walk every split (zb-v and interleaved, 9 and 12 layers, devices of 2 to 80
// GiB), where the equal split does not fit and the fitted one starts the walk, the search's split is
// still the optimum of every split (brute force).
#include <doctest/doctest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "brute_force.hpp"
#include "chunk_floor.hpp"
#include "chunk_price.hpp"
#include "pd2bw/planner/partition.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "pd2bw/schemas/profile.hpp"
#include "repeated_profile.hpp"

using namespace pd2bw::planner;
using pd2bw::schemas::Schedule;
namespace detail = pd2bw::planner::detail;

namespace {

using pd2bw::testing::one_node;

Profile repeated_bert(int64_t layers) {
  return pd2bw::testing::repeated_profile("bert-3.8b", layers);
}

// The zb-v candidate of microbatch size index bi, w replicas and d ranks for a global batch `batch`.
Candidate zbv(const Profile& profile, size_t bi, int64_t w, int64_t d, int64_t batch) {
  const int64_t b = profile.microbatch_sizes[bi];
  return {
      Schedule::zb_v, static_cast<int64_t>(bi), b, w, d, batch / (b * w), pd2bw::schemas::Placement::replicas_inner, 2};
}

// Where the equal split of zb-v candidate c is over but the floor does not rule c out: counts it in
// `tried`, and returns the search's split (counted in `fitted` when it fits). Empty otherwise.
std::optional<Split> fitted_where_equal_over(const CostModel& model, const Candidate& c, int64_t& tried,
                                             int64_t& fitted) {
  if (!detail::chunked_may_fit(model, c) || balanced_split(model, c).feasible()) return std::nullopt;
  ++tried;
  Split s = best_split(model, c);
  if (!s.feasible()) return std::nullopt;
  ++fitted;
  return s;
}

// The simulator's peak memory of each rank of candidate c on split `bounds`, each chunk recomputing as
// its rank's price chose.
std::vector<int64_t> simulated_peaks(const CostModel& model, const Candidate& c, const std::vector<int64_t>& bounds) {
  const detail::ChunkPricer pricer(model, c);
  double objective = 0;
  std::vector<bool> recompute;
  for (const StageCost& sc : pricer.price(bounds, &objective)) recompute.push_back(sc.recompute);
  const SimResult r = simulate(make_sim_input(model, c, bounds, recompute, 2));
  std::vector<int64_t> peaks;
  for (int64_t i = 0; i < c.depth; ++i) peaks.push_back(r.stages[static_cast<size_t>(i)].peak_bytes);
  return peaks;
}

// The least reference objective (brute_force.hpp) of any split of candidate c that fits (infinity when
// none does), ties to the lexicographically first bounds.
Split brute_force_best(const CostModel& model, const Candidate& c) {
  Split best;
  pd2bw::testing::for_each_split(model, c, [&](const std::vector<int64_t>& bounds, const std::vector<StageCost>& st) {
    const double objective = pd2bw::testing::reference_objective(c, st);
    if (objective < best.step_ms) best = {bounds, objective};
  });
  return best;
}

bool all_within(const std::vector<int64_t>& peaks, int64_t limit) {
  for (int64_t p : peaks)
    if (p > limit) return false;
  return true;
}

}  // namespace

TEST_CASE("where zb-v's equal-compute split does not fit, the search's split fits by the simulator's walk") {
  const Profile profile = repeated_bert(200);
  Constraints constraints;
  constraints.global_batch = 512;
  const CostModel model(profile, one_node(), constraints);
  const int64_t limit = model.memory_limit_bytes(), L = model.num_layers();
  int64_t fitted = 0, tried = 0;
  for (int64_t d = 2; d <= 8; ++d)
    for (size_t bi = 0; bi < profile.microbatch_sizes.size(); ++bi) {
      const int64_t b = profile.microbatch_sizes[bi], w = 8 / d;
      if (constraints.global_batch % (b * w) != 0) continue;
      const Candidate c = zbv(profile, bi, w, d, constraints.global_batch);
      if (!detail::chunked_may_fit(model, c)) continue;
      const Split equal = balanced_split(model, c);
      if (equal.feasible()) continue;  // the case the equal split covers
      CAPTURE(d);
      CAPTURE(b);
      ++tried;
      CHECK(!all_within(simulated_peaks(model, c, equal.bounds), limit));
      const Split s = best_split(model, c);
      if (!s.feasible()) continue;
      ++fitted;
      REQUIRE(s.bounds.size() == static_cast<size_t>(2 * d + 1));
      CHECK(s.bounds.front() == 0);
      CHECK(s.bounds.back() == L);
      for (size_t k = 0; k + 1 < s.bounds.size(); ++k) CHECK(s.bounds[k] < s.bounds[k + 1]);
      CHECK(all_within(simulated_peaks(model, c, s.bounds), limit));
    }
  // The equal split is over on several candidates, and the search fits some of them (the others may fit
  // no split: the memory floor's test is one-sided).
  CHECK(tried >= 4);
  CHECK(fitted >= 2);
}

TEST_CASE("zb-v's fitted split weighs the deferred weight-gradient stash: the GPT block fits where m < 2d") {
  // The GPT block's deferred W stash is half its activation stash. Where m < 2d, a late rank's two
  // chunks hold the same microbatches in flight before its first B, and the layout only fits with the
  // chunk that waits on fewer W's holding most layers.
  const Profile profile = pd2bw::testing::repeated_profile("gpt-3.8b", 200);
  int64_t fitted = 0, tried = 0;
  for (int64_t gib : {40, 60, 80})
    for (int64_t batch : {16, 32, 64})
      for (int64_t d = 4; d <= 8; ++d)
        for (size_t bi = 0; bi < profile.microbatch_sizes.size(); ++bi) {
          const int64_t b = profile.microbatch_sizes[bi];
          if (batch % b != 0 || batch / b >= 2 * d) continue;
          Constraints constraints;
          constraints.global_batch = batch;
          const CostModel model(profile, one_node(gib), constraints);
          const Candidate c = zbv(profile, bi, 1, d, batch);
          CAPTURE(gib);
          CAPTURE(batch);
          CAPTURE(d);
          CAPTURE(b);
          if (const auto s = fitted_where_equal_over(model, c, tried, fitted))
            CHECK(all_within(simulated_peaks(model, c, s->bounds), model.memory_limit_bytes()));
        }
  // 15 candidates' equal splits are over; a layout that ignores the W stash fits one of them.
  CHECK(tried >= 10);
  CHECK(fitted >= 4);
}

TEST_CASE("under --recompute never and always, the fitted split fits by the walk with the policy's recompute") {
  const Profile profile = repeated_bert(200);
  for (const auto policy : {RecomputePolicy::never, RecomputePolicy::always}) {
    int64_t fitted = 0, tried = 0;
    for (int64_t gib : {40, 80})
      for (int64_t d = 2; d <= 8; ++d)
        for (size_t bi = 0; bi < profile.microbatch_sizes.size(); ++bi) {
          const int64_t b = profile.microbatch_sizes[bi], batch = 128;
          Constraints constraints;
          constraints.global_batch = batch;
          constraints.recompute = policy;
          const CostModel model(profile, one_node(gib), constraints);
          const Candidate c = zbv(profile, bi, 1, d, batch);
          CAPTURE(static_cast<int>(policy));
          CAPTURE(gib);
          CAPTURE(d);
          CAPTURE(b);
          const auto s = fitted_where_equal_over(model, c, tried, fitted);
          if (!s) continue;
          for (const StageCost& sc : detail::ChunkPricer(model, c).price(s->bounds, nullptr))
            CHECK(sc.recompute == (policy == RecomputePolicy::always));
          CHECK(all_within(simulated_peaks(model, c, s->bounds), model.memory_limit_bytes()));
        }
    CHECK(tried >= 5);   // 10 under never, 5 under always
    CHECK(fitted >= 1);  // 1 and 2: none when a rank's layouts never fit under the policy
  }
}

TEST_CASE("on splits few enough to walk, a fitted start leaves the search's split the optimum of every split") {
  int64_t fitted = 0;
  for (int64_t layers : {9, 12}) {
    const Profile profile = repeated_bert(layers);
    for (int64_t gib = 2; gib <= 80; gib += 1)
      for (const auto& [kind, v] :
           std::vector<std::pair<Schedule, int64_t>>{{Schedule::zb_v, 2}, {Schedule::interleaved, 2}})
        for (int64_t d = 2; d <= 4; ++d)
          for (size_t bi = 0; bi < profile.microbatch_sizes.size(); ++bi) {
            const int64_t b = profile.microbatch_sizes[bi], m = 4 * d;
            Constraints constraints;
            constraints.global_batch = m * b;
            const CostModel model(profile, one_node(gib), constraints);
            const Candidate c{kind, static_cast<int64_t>(bi), b, 1, d, m, pd2bw::schemas::Placement::replicas_inner, v};
            if (!detail::chunked_may_fit(model, c) || balanced_split(model, c).feasible()) continue;
            const Split brute = brute_force_best(model, c);
            const std::string schedule(pd2bw::schemas::to_string(kind));
            CAPTURE(layers);
            CAPTURE(gib);
            CAPTURE(d);
            CAPTURE(b);
            CAPTURE(schedule);
            const Split s = best_split(model, c);
            REQUIRE(s.feasible() == brute.feasible());
            if (!brute.feasible()) continue;
            CHECK(!s.exhausted);
            CHECK(s.step_ms == doctest::Approx(brute.step_ms).epsilon(1e-12));
            double at_split = kInfinity;  // the search's split, priced by the planner
            detail::ChunkPricer(model, c).price(s.bounds, &at_split);
            CHECK(at_split == doctest::Approx(brute.step_ms).epsilon(1e-12));
            ++fitted;
          }
  }
  CHECK(fitted >= 20);  // cases where some split fits and the equal one does not
}

// The simulator against closed forms (flush and GPipe bubbles, 2BW's bubble-free steady state, the
// stash counts of each schedule), and the planner's predictions against an independent replay of every
// rank of the written plan, on random instances for every schedule.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "pd2bw/planner/search.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "random_instances.hpp"

using namespace pd2bw::planner;
using pd2bw::schemas::Schedule;

namespace {

// d equal stages: forward f, backward b, transfers p, allreduce a (ms); memory: weights 100 bytes per
// version, 10 fixed, 1000 per stashed microbatch.
SimInput uniform_input(Schedule kind, int64_t d, int64_t m, int64_t w, int64_t steps, double f, double b,
                       double p = 0.0, double a = 0.0) {
  SimInput in;
  in.spec = {kind, d, m, steps, w};
  for (int64_t i = 0; i < d; ++i) {
    SimStage st;
    st.forward_ms = f;
    st.backward_ms = b;
    st.allreduce_ms = w > 1 ? a : 0.0;
    st.weights_bytes = 100;
    st.fixed_bytes = 10;
    st.stash_bytes = 1000;
    in.stages.push_back(st);
    in.ranks.push_back({});
    for (int64_t r = 0; r < w; ++r) in.ranks.back().push_back(i * w + r);
  }
  in.boundary_ms.assign(static_cast<size_t>(w), std::vector<double>(static_cast<size_t>(d - 1), p));
  return in;
}

}  // namespace

TEST_CASE("simulator: flush and gpipe bubbles with equal stages match (d-1)/(m+d-1)") {
  for (Schedule kind : {Schedule::flush, Schedule::gpipe})
    for (int64_t d = 1; d <= 6; ++d)
      for (int64_t m = 1; m <= 8; ++m) {
        CAPTURE(d);
        CAPTURE(m);
        const double f = 1.0, b = 2.0;
        const SimResult r = simulate(uniform_input(kind, d, m, 1, default_sim_steps(kind), f, b));
        const double k = static_cast<double>(m + d - 1);
        CHECK(r.step_ms == doctest::Approx(k * (f + b)).epsilon(1e-12));
        CHECK(r.first_step_ms == doctest::Approx(k * (f + b)).epsilon(1e-12));
        CHECK(r.bubble_fraction == doctest::Approx(static_cast<double>(d - 1) / k).epsilon(1e-12));
        for (int64_t i = 0; i < d; ++i) {
          const auto& s = r.stages[static_cast<size_t>(i)];
          const int64_t stash = kind == Schedule::gpipe ? m : std::min(d - i, m);
          CHECK(s.peak_in_flight == stash);
          CHECK(s.max_live_versions == 1);
          CHECK(s.peak_bytes == 10 + 100 + 1000 * stash);
        }
      }
}

TEST_CASE("simulator: 2bw steady state has no bubble; stage i stashes d - i; two versions") {
  for (int64_t d = 1; d <= 6; ++d)
    for (int64_t m = d; m <= d + 4; ++m) {
      CAPTURE(d);
      CAPTURE(m);
      const double f = 1.0, b = 2.5;
      const SimResult r = simulate(uniform_input(Schedule::two_bw, d, m, 1, default_sim_steps(Schedule::two_bw), f, b));
      CHECK(r.step_ms == doctest::Approx(static_cast<double>(m) * (f + b)).epsilon(1e-12));
      CHECK(r.bubble_fraction == doctest::Approx(0.0));
      CHECK(r.first_step_ms >= r.step_ms);
      for (int64_t i = 0; i < d; ++i) {
        const auto& s = r.stages[static_cast<size_t>(i)];
        CHECK(s.peak_in_flight == d - i);
        CHECK(s.max_live_versions == 2);
        CHECK(s.peak_bytes == 10 + 2 * 100 + 1000 * (d - i));
      }
    }
}

TEST_CASE("simulator: allreduce and transfers add to the step; replicas are all replayed with events") {
  const SimResult r = simulate(uniform_input(Schedule::flush, 3, 4, 2, 2, 1.0, 2.0, 0.5, 7.0), true);
  // Fill: two forwards and two transfers before the last stage starts; the allreduce ends the step.
  CHECK(r.step_ms > (4 + 2) * 3.0 + 7.0);
  CHECK(r.step_ms == doctest::Approx(r.step_end_ms[1] - r.step_end_ms[0]));
  CHECK(r.simulated_ranks == 6);
  int64_t allreduces = 0;
  for (const auto& e : r.events)
    if (e.kind == OpKind::allreduce) ++allreduces;
  CHECK(allreduces == 2 * 3 * 2);  // steps x stages x replicas
  // Without events, identical replicas are replayed once and give the same answer.
  const SimResult q = simulate(uniform_input(Schedule::flush, 3, 4, 2, 2, 1.0, 2.0, 0.5, 7.0));
  CHECK(q.simulated_ranks == 3);
  CHECK(q.step_ms == r.step_ms);
  CHECK(q.bubble_fraction == doctest::Approx(r.bubble_fraction).epsilon(1e-12));
}

TEST_CASE("planner predictions equal a replay of every rank of the written plan (within 2%)") {
  using pd2bw::testing::make_random_instance;
  int64_t compared = 0;
  double lowest = 1e300, highest = 0.0;
  for (uint64_t seed = 1; seed <= 150; ++seed)
    for (Schedule kind : {Schedule::two_bw, Schedule::flush, Schedule::gpipe}) {
      auto inst = make_random_instance(seed);
      inst.constraints.schedule = kind;
      const CostModel model(inst.profile, inst.cluster, inst.constraints);
      SearchResult result = search(model, {3, 1});
      if (!result.feasible()) continue;
      rank_by_simulation(model, result);
      const auto plan = pd2bw::schemas::parse_plan(
          pd2bw::schemas::dump_plan(build_plan(model, result, std::string(64, '0'), {})));
      CAPTURE(inst.describe());
      const PlanModel pm = plan_model(inst.profile, plan);
      const SimResult sim = simulate(
          make_sim_input(pm.model, pm.candidate, pm.bounds, pm.recompute, default_sim_steps(kind)), true);
      CHECK(plan.predictions.step_ms == doctest::Approx(sim.step_ms).epsilon(0.02));
      for (size_t i = 0; i < plan.stages.size(); ++i)
        CHECK(static_cast<double>(plan.stages[i].memory.total_bytes) ==
              doctest::Approx(static_cast<double>(sim.stages[i].peak_bytes)).epsilon(0.02));
      // Without a pipeline the cost model is exact: m microbatches back to back, then the allreduce.
      const double analytic = result.ranked.front().analytic_step_ms;
      if (plan.depth == 1) CHECK(sim.step_ms == doctest::Approx(analytic).epsilon(1e-12));
      lowest = std::min(lowest, analytic / sim.step_ms);
      highest = std::max(highest, analytic / sim.step_ms);
      ++compared;
    }
  MESSAGE("compared " << compared << " plans; cost model / simulated step in [" << lowest << ", " << highest
                      << "]");
  CHECK(compared > 200);
}

// The simulator against closed forms (flush and GPipe bubbles, 2BW's bubble-free steady state, the
// stash counts of each schedule), and the planner's predictions against an independent replay of every
// rank of the written plan, on random instances for every schedule.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "brute_force.hpp"
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
        CHECK(r.imbalance_fraction == doctest::Approx(0.0));
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

TEST_CASE("simulator: zb-h1 with equal stages idles (d - 1)(F + B - W) per step, with 1F1B's activations") {
  // B is the input-gradient half, W the weight-gradient half: 1F1B (flush) idles (d - 1)(F + B + W).
  struct Times {
    double f, b, w;
  };
  for (const Times x : {Times{1.0, 1.0, 1.0}, Times{1.0, 2.0, 1.0}, Times{1.0, 1.5, 0.5}, Times{2.0, 1.0, 0.75}})
    for (int64_t d = 1; d <= 6; ++d)
      for (int64_t m : {d, d + 1, d + 3, 2 * d}) {
        CAPTURE(d);
        CAPTURE(m);
        CAPTURE(x.f);
        CAPTURE(x.b);
        CAPTURE(x.w);
        SimInput in = uniform_input(Schedule::zb_h1, d, m, 1, 3, x.f, x.b + x.w);
        for (auto& st : in.stages) {
          st.weight_ms = x.w;
          st.weight_grad_bytes = 300;
        }
        const SimResult r = simulate_steady(in);
        const double work = static_cast<double>(m) * (x.f + x.b + x.w);
        const double idle = static_cast<double>(d - 1) * (x.f + x.b - x.w);
        CHECK(r.steady);
        CHECK(r.step_ms == doctest::Approx(work + idle).epsilon(1e-12));
        CHECK(r.bubble_fraction == doctest::Approx(idle / (work + idle)).epsilon(1e-9));
        for (int64_t i = 0; i < d; ++i) {
          const auto& s = r.stages[static_cast<size_t>(i)];
          CHECK(s.peak_in_flight == std::min(d - i, m));
          CHECK(s.max_live_versions == 1);
          // The stash peaks just before a B (d - i activations, i deferred W's: m >= d) or just after it.
          CHECK(s.peak_bytes == 10 + 100 + std::max((d - i) * 1000 + i * 300, (d - i - 1) * 1000 + (i + 1) * 300));
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

TEST_CASE("planner predictions equal a replay of every rank of the written plan") {
  using pd2bw::testing::make_random_instance;
  int64_t compared = 0, not_steady = 0, zb = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed)
    for (Schedule kind : {Schedule::two_bw, Schedule::flush, Schedule::gpipe, Schedule::zb_h1}) {
      auto inst = make_random_instance(seed);
      if (kind == Schedule::zb_h1 && !inst.profile.layers.front().per_microbatch.front().split) continue;
      inst.constraints.schedule = kind;
      const CostModel model(inst.profile, inst.cluster, inst.constraints);
      SearchResult result = search(model, {3, 1});
      if (!result.feasible()) continue;
      const auto plan = pd2bw::schemas::parse_plan(
          pd2bw::schemas::dump_plan(build_plan(model, result, std::string(64, '0'), {})));
      CAPTURE(inst.describe());
      const PlanModel pm = plan_model(inst.profile, plan);
      const SimResult sim = simulate_steady(
          make_sim_input(pm.model, pm.candidate, pm.bounds, pm.recompute, default_sim_steps(kind)), true);
      // The planner replays replicas with equal links once; every rank replayed gives the same step.
      CHECK(plan.predictions.step_ms == doctest::Approx(sim.step_ms).epsilon(1e-12));
      CHECK(plan.predictions.bubble_fraction == doctest::Approx(sim.bubble_fraction).epsilon(1e-9));
      CHECK(plan.predictions.imbalance_fraction == doctest::Approx(sim.imbalance_fraction).epsilon(1e-9));
      if (!sim.steady) ++not_steady;
      for (size_t i = 0; i < plan.stages.size(); ++i)
        CHECK_MESSAGE(static_cast<double>(plan.stages[i].memory.total_bytes) ==
              doctest::Approx(static_cast<double>(sim.stages[i].peak_bytes)).epsilon(0.02),
                      "stage " << i << " of d=" << plan.depth << " m=" << plan.microbatches_per_step << " recompute "
                               << plan.stages[i].recompute);
      // The objective is a lower bound on the replay; without a pipeline it is the replay.
      const double analytic = result.ranked.front().analytic_step_ms;
      CHECK(analytic <= sim.step_ms * (1.0 + 1e-9));
      if (plan.depth == 1) CHECK(sim.step_ms == doctest::Approx(analytic).epsilon(1e-12));
      ++compared;
      if (kind == Schedule::zb_h1) ++zb;
    }
  CHECK(zb > 30);
  MESSAGE("compared " << compared << " plans (" << zb << " zb-h1); " << not_steady << " not steady within " << kMaxSteadySteps << " steps");
  CHECK(compared > 200);
  CHECK(not_steady * 50 <= compared);  // a few nearly balanced pipelines settle over hundreds of steps
}

namespace {

// Every split of every candidate of random small instances, replayed until steady.
template <class Visit>
void for_each_replayed_split(uint64_t first_seed, uint64_t seeds, Visit&& visit) {
  for (uint64_t seed = first_seed; seed < first_seed + seeds; ++seed) {
    const auto inst = pd2bw::testing::make_random_instance(seed);
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    pd2bw::testing::for_each_candidate(model, [&](const Candidate& c) {
      pd2bw::testing::for_each_split(model, c, [&](const std::vector<int64_t>& bounds, const std::vector<StageCost>& st) {
        std::vector<bool> recompute;
        for (const auto& s : st) recompute.push_back(s.recompute);
        const SimResult sim = simulate_steady(make_sim_input(model, c, bounds, recompute, default_sim_steps(c.schedule)));
        visit(c, st, sim);
      });
    });
  }
}

}  // namespace

TEST_CASE("the search's objective never exceeds the replay, and is the replay for one-replica gpipe") {
  int64_t splits = 0, gpipe_exact = 0, below = 0, not_steady = 0, zb = 0;
  int64_t climbs = 0, climbs_close = 0;  // chunked splits whose climb passes the busiest rank's lane
  double loosest = 1.0;
  for_each_replayed_split(1, 120, [&](const Candidate& c, const std::vector<StageCost>& st, const SimResult& sim) {
    const double objective = step_objective(c, st);
    CAPTURE(objective);
    CAPTURE(sim.step_ms);
    if (!sim.steady) ++not_steady;
    CHECK(objective <= sim.step_ms * (1.0 + 1e-9));
    if (c.schedule == Schedule::gpipe && c.width == 1) {
      CHECK(objective == doctest::Approx(sim.step_ms).epsilon(1e-9));
      ++gpipe_exact;
    }
    if (c.chunks > 1) {  // the climb alone, against the busiest rank's lane and the replay
      const auto d = static_cast<size_t>(c.depth);
      std::vector<double> ranks(d, 0.0), h(d, 0.0), u;
      for (size_t k = 0; k < st.size(); ++k) {
        const auto p =
            static_cast<size_t>(pd2bw::pipeline::chunk_position(c.schedule, c.depth, static_cast<int64_t>(k)));
        ranks[p] += st[k].step_ms;
        h[p] += st[k].allreduce_ms + st[k].update_ms;
        u.push_back(st[k].compute_ms - st[k].weight_ms);
      }
      // From rank 0's update up chunks 0..k, m of chunk k's forward and B, back down to chunk 0.
      double climb = 0.0;
      for (size_t k = 0; k < u.size(); ++k) {
        double path = h[0] + static_cast<double>(c.microbatches) * u[k];
        for (size_t j = 0; j < k; ++j) path += u[j];
        climb = std::max(climb, path);
      }
      CHECK(climb <= objective * (1.0 + 1e-12));  // the same sums, added in another order
      if (climb > *std::max_element(ranks.begin(), ranks.end()) * (1.0 + 1e-9)) {
        ++climbs;
        if (climb >= sim.step_ms * 0.98) ++climbs_close;
      }
    }
    if (objective < sim.step_ms * (1.0 - 1e-9)) ++below;
    if (c.schedule == Schedule::zb_h1) ++zb;
    loosest = std::max(loosest, sim.step_ms / objective);
    ++splits;
  });
  CHECK(zb > 1000);
  MESSAGE(splits << " splits (" << zb << " zb-h1): " << gpipe_exact << " one-replica gpipe; objective below the replay in " << below
                 << "; replay / objective at most " << loosest << "; " << not_steady << " not steady");
  CHECK(gpipe_exact > 500);
  CHECK(not_steady * 100 <= splits);
  // The climb binds where the microbatches are few for the chunks, and there it is often close to the replay.
  MESSAGE(climbs << " chunked splits whose climb passes the busiest rank, " << climbs_close
                 << " of them within 2% of their replay");
  CHECK(climbs > 400);
  CHECK(climbs_close > 15);
}

TEST_CASE("simulate_steady replays until two consecutive steps agree") {
  // Large transfers: a 2bw pipeline whose stages wait on each other settles only after a few steps.
  SimInput in = uniform_input(Schedule::two_bw, 4, 4, 1, 4, 1.0, 2.0, 1.5);
  in.stages[1].backward_ms = 4.0;
  in.stages[2].allreduce_ms = 0.0;
  in.stages[3].update_ms = 6.0;
  const SimResult r = simulate_steady(in);
  CHECK(r.steady);
  CHECK(r.step_ms == doctest::Approx(r.previous_step_ms).epsilon(kSteadyTolerance));
  // More steps give the same steady step.
  in.spec.steps = static_cast<int64_t>(r.step_end_ms.size()) * 2;
  const SimResult longer = simulate(in);
  CHECK(longer.step_ms == doctest::Approx(r.step_ms).epsilon(1e-9));
  // Fixed steps report whether they were enough: a steady step took the time of the one before it.
  for (int64_t steps = 3; steps <= 12; ++steps) {
    in.spec.steps = steps;
    const SimResult fixed = simulate(in);
    if (fixed.steady) CHECK(std::abs(fixed.previous_step_ms - fixed.step_ms) <= kSteadyTolerance * fixed.step_ms);
    if (fixed.steady) CHECK(fixed.step_ms == doctest::Approx(r.step_ms).epsilon(1e-9));
    // The measured step's own time: 2bw's step is never below it (where both steps were measured, the
    // larger of the two, as its ops reach two steps back); steady, it took the time of the step before.
    CHECK(fixed.last_step_ms > 0);
    CHECK(fixed.last_step_ms <= fixed.step_ms);
    if (fixed.steady) CHECK(fixed.last_step_ms == doctest::Approx(r.step_ms).epsilon(1e-9));
  }
}

TEST_CASE("idle time splits into the fill/drain bubble and the unequal stages") {
  // Equal stages: flush idles (d - 1) / (m + d - 1) of the time in fill and drain, none from imbalance.
  const SimResult flush = simulate_steady(uniform_input(Schedule::flush, 4, 8, 1, 3, 1.0, 2.0));
  CHECK(flush.bubble_fraction == doctest::Approx(3.0 / 11.0).epsilon(1e-12));
  CHECK(flush.imbalance_fraction == doctest::Approx(0.0));
  // 2bw with one slow stage: no bubble, and the other stages idle for the difference.
  SimInput in = uniform_input(Schedule::two_bw, 3, 6, 1, 4, 1.0, 2.0);
  in.stages[1].forward_ms = 2.0;
  in.stages[1].backward_ms = 4.0;
  const SimResult r = simulate_steady(in);
  CHECK(r.step_ms == doctest::Approx(6.0 * 6.0).epsilon(1e-12));
  CHECK(r.bubble_fraction == doctest::Approx(0.0));
  CHECK(r.imbalance_fraction == doctest::Approx(2.0 * 18.0 / (3.0 * 36.0)).epsilon(1e-12));
  CHECK(r.idle_fraction == doctest::Approx(r.bubble_fraction + r.imbalance_fraction).epsilon(1e-12));
}

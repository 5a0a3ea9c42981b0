// The one-step replay of simulate_steady (the search's replays: measured step only, no events): where it
// proves the first step's period, every later step repeats the first one that much later, which a long
// replay of every split of random instances confirms step by step; where it does not, the default
// replay decides.
#include <doctest/doctest.h>

#include <cmath>

#include "brute_force.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "random_instances.hpp"

using namespace pd2bw::planner;
using pd2bw::schemas::Schedule;

namespace {

bool close(double a, double b, double rel) { return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b)); }

}  // namespace

TEST_CASE("a one-step replay that proves its period gives every later step, and the default replay's answer") {
  int64_t periodic = 0, refused = 0, chunked = 0, split_backward = 0;
  for (uint64_t seed = 1; seed <= 120; ++seed) {
    const auto inst = pd2bw::testing::make_random_instance(seed);
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    pd2bw::testing::for_each_candidate(model, [&](const Candidate& c) {
      if (c.schedule == Schedule::two_bw) return;  // its steps overlap: always the default replay
      pd2bw::testing::for_each_split(model, c, [&](const std::vector<int64_t>& bounds, const std::vector<StageCost>& st) {
        std::vector<bool> recompute;
        for (const auto& s : st) recompute.push_back(s.recompute);
        const SimInput in = make_sim_input(model, c, bounds, recompute, default_sim_steps(c.schedule));
        const SimResult fast = simulate_steady(in, false, true);
        const SimResult full = simulate_steady(in);
        CAPTURE(inst.describe());
        CAPTURE(to_string(c.schedule));
        CAPTURE(c.depth);
        CAPTURE(c.microbatches);
        if (fast.step_end_ms.size() != 1) {  // refused: the default replay, measured step only
          ++refused;
          CHECK(fast.step_ms == full.step_ms);
          CHECK(fast.steady == full.steady);
          return;
        }
        ++periodic;
        chunked += c.chunks > 1;
        split_backward += pd2bw::pipeline::splits_backward(c.schedule);
        CHECK(fast.steady);
        // Six steps replayed: each ends the proven period after the one before.
        SimInput longer = in;
        longer.spec.steps = 6;
        const SimResult six = simulate(longer);
        for (size_t k = 1; k < six.step_end_ms.size(); ++k)
          CHECK(close(six.step_end_ms[k] - six.step_end_ms[k - 1], fast.step_ms, 1e-9));
        CHECK(full.steady);
        CHECK(close(fast.step_ms, full.step_ms, 1e-9));
        CHECK(std::abs(fast.bubble_fraction - full.bubble_fraction) <= 1e-9);
        CHECK(std::abs(fast.imbalance_fraction - full.imbalance_fraction) <= 1e-9);
        for (size_t i = 0; i < full.stages.size(); ++i) {
          const auto &a = fast.stages[i], &b = full.stages[i];
          CHECK(close(a.compute_ms, b.compute_ms, 1e-9));
          CHECK(close(a.idle_ms + 1.0, b.idle_ms + 1.0, 1e-9));
          CHECK(a.peak_bytes == b.peak_bytes);
          CHECK(a.peak_in_flight == b.peak_in_flight);
        }
      });
    });
  }
  MESSAGE(periodic << " splits proven periodic after one step (" << chunked << " chunked, " << split_backward
                   << " with a split backward), " << refused << " refused");
  CHECK(periodic > 15000);
  CHECK(chunked > 8000);
  CHECK(split_backward > 2000);
  CHECK(refused > 2000);
}

TEST_CASE("a stage that ends the first step late refuses the one-step replay") {
  // Flush, 3 stages, 4 microbatches, 2 replicas: the last stage's long allreduce ends its first step after
  // the second step's first activation reaches it, so the second step is not the first one shifted.
  SimInput in;
  in.spec = {Schedule::flush, 3, 4, 3, 2};
  for (int64_t i = 0; i < 3; ++i) {
    SimStage st;
    st.forward_ms = 1.0;
    st.backward_ms = 2.0;
    st.allreduce_ms = i == 2 ? 20.0 : 0.1;
    in.stages.push_back(st);
    in.ranks.push_back({2 * i, 2 * i + 1});
  }
  in.boundary_ms.assign(2, std::vector<double>(2, 0.0));
  const SimResult fast = simulate_steady(in, false, true);
  const SimResult full = simulate_steady(in);
  CHECK(fast.step_end_ms.size() > 1);
  CHECK(fast.step_ms == full.step_ms);
  // The first step is not the steady one: the default replay was needed.
  CHECK(std::abs(full.step_end_ms[0] - full.step_ms) > 1.0);
  // With the long allreduce on the first stage instead, the first step proves its period.
  std::swap(in.stages[0].allreduce_ms, in.stages[2].allreduce_ms);
  const SimResult shifted = simulate_steady(in, false, true);
  CHECK(shifted.step_end_ms.size() == 1);
  CHECK(close(shifted.step_ms, simulate_steady(in).step_ms, 1e-12));
}

// The one-step replay of simulate_steady (the search's replays: measured step only, no events): where it
// proves the steady period, the default replay and a long one agree with it, and where the second step
// is not the first one shifted (the proof by a lane's own chain) every later step still ends within the
// period of the one before; where it does not, the default replay decides.
#include <doctest/doctest.h>

#include <cmath>
#include <map>
#include <utility>

#include "brute_force.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "random_instances.hpp"

using namespace pd2bw::planner;
using pd2bw::schemas::Schedule;

namespace {

bool close(double a, double b, double rel) { return std::abs(a - b) <= rel * std::max(std::abs(a), std::abs(b)); }

// Each rank's events of a replay, in its order.
std::map<std::pair<int64_t, int64_t>, std::vector<SimEvent>> by_rank(const SimResult& r) {
  std::map<std::pair<int64_t, int64_t>, std::vector<SimEvent>> out;
  for (const auto& e : r.events) out[{e.stage, e.replica}].push_back(e);
  return out;
}

// Whether the second step of `in` replays the first one `period` later, op for op.
bool second_step_shifted(SimInput in, double period) {
  in.spec.steps = 2;
  for (const auto& [rank, events] : by_rank(simulate(in, true))) {
    std::vector<const SimEvent*> steps[2];
    for (const auto& e : events) steps[e.step].push_back(&e);
    if (steps[0].size() != steps[1].size()) return false;
    for (size_t k = 0; k < steps[0].size(); ++k)
      if (!close(steps[1][k]->start_ms, steps[0][k]->start_ms + period, 1e-12)) return false;
  }
  return true;
}

// The longest time, over the ranks of a one-step replay, from when a rank enters the step (0, or when
// the message its first op receives was sent) to its last op's end.
double longest_entry_to_end(SimInput in) {
  in.spec.steps = 1;
  double longest = 0.0;
  for (const auto& [rank, events] : by_rank(simulate(in, true))) {
    const SimEvent& first = events.front();
    const bool receives = first.kind == OpKind::recv_activation || first.kind == OpKind::recv_gradient;
    longest = std::max(longest, events.back().end_ms - (receives ? first.start_ms : 0.0));
  }
  return longest;
}

}  // namespace

TEST_CASE("a one-step replay that proves its period gives every later step, and the default replay's answer") {
  int64_t periodic = 0, refused = 0, chunked = 0, split_backward = 0, chained = 0;
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
        // Six steps replayed: each ends the proven period after the one before where the second step is
        // the first one shifted, and at most that long after it otherwise (the period bounds them above).
        SimInput longer = in;
        longer.spec.steps = 6;
        const SimResult six = simulate(longer);
        const bool shifted = second_step_shifted(in, fast.step_ms);
        chained += !shifted;
        for (size_t k = 1; k < six.step_end_ms.size(); ++k) {
          const double step = six.step_end_ms[k] - six.step_end_ms[k - 1];
          if (shifted)
            CHECK(close(step, fast.step_ms, 1e-9));
          else
            CHECK(step <= fast.step_ms * (1.0 + 1e-9));
        }
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
                   << " with a split backward, " << chained << " whose second step is not the first shifted), "
                   << refused << " refused");
  CHECK(periodic > 15000);
  CHECK(chunked > 8000);
  CHECK(split_backward > 2000);
  CHECK(chained > 500);
  CHECK(refused > 100);
}

// Flush, 3 stages, 4 microbatches, 2 replicas, unit forwards and backwards of 2 ms but for `first_forward`
// on the first stage, and the last stage's allreduce of `last_allreduce`.
SimInput three_stages(double first_forward, double last_allreduce) {
  SimInput in;
  in.spec = {Schedule::flush, 3, 4, 3, 2};
  for (int64_t i = 0; i < 3; ++i) {
    SimStage st;
    st.forward_ms = i == 0 ? first_forward : 1.0;
    st.backward_ms = 2.0;
    st.allreduce_ms = i == 2 ? last_allreduce : 0.1;
    in.stages.push_back(st);
    in.ranks.push_back({2 * i, 2 * i + 1});
  }
  in.boundary_ms.assign(2, std::vector<double>(2, 0.0));
  return in;
}

TEST_CASE("a stage that ends the first step late proves the period by its own chain, or refuses") {
  // The last stage's long allreduce ends its first step after the second step's first activation reaches
  // it, so the second step is not the first one shifted; but that stage's own ops, from its first receive
  // to its allreduce's end, recur every step: the period is theirs, and the one-step replay proves it.
  SimInput in = three_stages(1.0, 20.0);
  const SimResult fast = simulate_steady(in, false, true);
  const SimResult full = simulate_steady(in);
  CHECK(fast.step_end_ms.size() == 1);
  CHECK(full.steady);
  CHECK(fast.step_ms == doctest::Approx(full.step_ms).epsilon(1e-12));
  CHECK(!second_step_shifted(in, fast.step_ms));
  CHECK(std::abs(full.step_end_ms[0] - full.step_ms) > 1.0);  // the first step is not the steady one
  // A slow first forward holds every later stage up: the last stage's clock is reached from the first
  // stage's start, not from its own entry, and its entry-to-end time is longer than the period: refused.
  in = three_stages(5.0, 20.0);
  const SimResult slow = simulate_steady(in, false, true);
  const SimResult slow_full = simulate_steady(in);
  CHECK(slow.step_end_ms.size() > 1);
  CHECK(slow.step_ms == slow_full.step_ms);
  CHECK(longest_entry_to_end(in) > slow_full.step_ms + 1.0);
  // With the long allreduce on the first stage instead, the second step is the first one shifted.
  in = three_stages(1.0, 0.1);
  in.stages[0].allreduce_ms = 20.0;
  const SimResult shifted = simulate_steady(in, false, true);
  CHECK(shifted.step_end_ms.size() == 1);
  CHECK(second_step_shifted(in, shifted.step_ms));
  CHECK(close(shifted.step_ms, simulate_steady(in).step_ms, 1e-12));
}

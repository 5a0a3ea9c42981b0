// Output of simulated runs.
#include "sim_report.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "pd2bw/schemas/common.hpp"

namespace pd2bw::cli {

namespace {

double gib(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30); }

// Averages of a stage's window breakdown over all stages (ms per rank).
planner::SimStageResult average(const planner::SimResult& sim) {
  planner::SimStageResult a;
  const double n = static_cast<double>(sim.stages.size());
  for (const auto& s : sim.stages) {
    a.compute_ms += s.compute_ms / n;
    a.p2p_ms += s.p2p_ms / n;
    a.allreduce_ms += s.allreduce_ms / n;
    a.update_ms += s.update_ms / n;
    a.idle_ms += s.idle_ms / n;
  }
  return a;
}

double fill(const schemas::MemoryBreakdown& m) {
  return static_cast<double>(m.total_bytes) / static_cast<double>(m.limit_bytes);
}

}  // namespace

std::string memory_warnings(const planner::SimInput& in, const planner::SimResult& sim) {
  std::string out;
  for (size_t i = 0; i < sim.stages.size(); ++i) {
    const auto& st = in.stages[i];
    if (sim.stages[i].peak_bytes > st.limit_bytes)
      out += fmt::format("warning: stage {} peaks at {} in the replay, over the device's {} by {} bytes\n", i,
                         schemas::format_bytes(sim.stages[i].peak_bytes), schemas::format_bytes(st.limit_bytes),
                         sim.stages[i].peak_bytes - st.limit_bytes);
  }
  return out;
}

void print_sim_table(const schemas::Plan& plan, const planner::SimInput& in, const planner::SimResult& sim) {
  const auto& p = plan.predictions;
  fmt::print(stderr, "step time: steady {:.3f} ms (plan predicts {:.3f} ms, {:+.2f}%), first step {:.3f} ms\n",
             sim.step_ms, p.step_ms, 100.0 * (sim.step_ms / p.step_ms - 1.0), sim.first_step_ms);
  if (sim.steady)
    fmt::print(stderr, "steady after {} steps: the measured step took the time of the one before it (within {:g}%)\n",
               sim.step_end_ms.size(), 100.0 * planner::kSteadyTolerance);
  else
    fmt::print(stderr, "not steady after {} steps: the last two measured steps took {:.3f} and {:.3f} ms\n",
               sim.step_end_ms.size(), sim.previous_step_ms, sim.step_ms);
  fmt::print(stderr, "throughput: {:.1f} samples/s, {:.0f} tokens/s; idle {:.1f}% of rank time in the steady step "
                     "({:.3f}-{:.3f} ms): fill/drain bubble {:.1f}%, unequal stages {:.1f}%\n",
             static_cast<double>(plan.global_batch) / (sim.step_ms / 1e3),
             static_cast<double>(plan.global_batch * plan.model.seq_len) / (sim.step_ms / 1e3),
             100.0 * sim.idle_fraction, sim.window_begin_ms, sim.window_end_ms, 100.0 * sim.bubble_fraction,
             100.0 * sim.imbalance_fraction);
  fmt::print(stderr, "{:>5} {:>8} {:>6} {:>6} {:>10} {:>9} {:>10} {:>9}  {:>19} {:>9} {:>8}\n", "stage", "layers",
             "recmp", "busy", "compute", "p2p", "allreduce", "idle", "peak GiB (plan)", "versions",
             "inflight");
  for (size_t i = 0; i < sim.stages.size(); ++i) {
    const auto& s = sim.stages[i];
    const auto& st = in.stages[i];
    fmt::print(stderr, "{:>5} {:>8} {:>6} {:>5.1f}% {:>7.2f} ms {:>6.2f} ms {:>7.2f} ms {:>6.2f} ms  {:>9.3f} ({:>7.3f}) {:>9} {:>8}\n",
               i, fmt::format("{}-{}", st.layer_begin, st.layer_end - 1), st.recompute ? "yes" : "no",
               100.0 * s.busy_fraction, s.compute_ms, s.p2p_ms, s.allreduce_ms, s.idle_ms, gib(s.peak_bytes),
               gib(plan.stages[i].memory.total_bytes), s.max_live_versions, s.peak_in_flight);
  }
  fmt::print(stderr, "{}", memory_warnings(in, sim));
}

std::string sim_report_json(const schemas::Plan& plan, const planner::SimInput& in, const planner::SimResult& sim) {
  nlohmann::ordered_json j;
  j["schedule"] = std::string(schemas::to_string(plan.schedule));
  j["steps"] = in.spec.steps;
  j["ranks"] = plan.width * plan.depth;
  j["step_ms"] = sim.step_ms;
  j["first_step_ms"] = sim.first_step_ms;
  j["planned_step_ms"] = plan.predictions.step_ms;
  j["steady"] = sim.steady;
  j["previous_step_ms"] = sim.previous_step_ms;
  j["idle_fraction"] = sim.idle_fraction;
  j["bubble_fraction"] = sim.bubble_fraction;
  j["imbalance_fraction"] = sim.imbalance_fraction;
  j["step_end_ms"] = sim.step_end_ms;
  j["trace_op_events"] = sim.events.size();
  auto& stages = j["stages"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < sim.stages.size(); ++i) {
    const auto& s = sim.stages[i];
    stages.push_back({{"busy_fraction", s.busy_fraction},
                      {"compute_ms", s.compute_ms},
                      {"p2p_ms", s.p2p_ms},
                      {"allreduce_ms", s.allreduce_ms},
                      {"update_ms", s.update_ms},
                      {"idle_ms", s.idle_ms},
                      {"peak_bytes", s.peak_bytes},
                      {"limit_bytes", in.stages[i].limit_bytes},
                      {"planned_peak_bytes", plan.stages[i].memory.total_bytes},
                      {"peak_in_flight", s.peak_in_flight},
                      {"max_live_versions", s.max_live_versions}});
  }
  return j.dump(2) + "\n";
}

namespace {

// 2BW's stale update against the best synchronous schedule (flush, gpipe, zb-h1) among `bests`: the speed
// it buys and what it costs, from the replayed steps and the plans' memory.
void print_staleness_trade(const std::vector<planner::Evaluated>& bests) {
  const planner::Evaluated *stale = nullptr, *sync = nullptr;
  for (const auto& e : bests) {
    const bool two = e.candidate.schedule == schemas::Schedule::two_bw;
    const planner::Evaluated*& slot = two ? stale : sync;
    if (!slot || e.step_ms < slot->step_ms) slot = &e;
  }
  if (!stale || !sync) return;
  const auto& c = sync->candidate;
  int64_t version = 0;  // the second weight version: one version of the 2bw plan's largest stage
  for (const auto& st : stale->stages) version = std::max(version, st.memory.weights_bytes / 2);
  const double gain = sync->step_ms / stale->step_ms - 1.0;
  const std::string verdict = std::abs(gain) < 5e-4 ? std::string("the same: 2bw gains nothing here")
                              : fmt::format("{} by {:.1f}%", gain > 0 ? "faster" : "slower", 100.0 * std::abs(gain));
  fmt::print(stderr, "\n2bw against the best synchronous plan ({} b={} m={} d={} w={}, {:.2f} ms per step): 2bw steps "
                     "in {:.2f} ms, {}",
             schemas::to_string(c.schedule), c.microbatch, c.microbatches, c.depth, c.width, sync->step_ms,
             stale->step_ms, verdict);
  fmt::print(stderr, "; it costs a second weight version ({:.2f} GiB on its largest stage) and a one-step delay of "
                     "every gradient (the update at step t uses gradients of the weights of step t - 1; "
                     "tools/bench-staleness measures what that does to the loss)\n",
             gib(version));
}

}  // namespace

void print_explain(const planner::CostModel& model, const std::vector<planner::Evaluated>& bests) {
  fmt::print(stderr, "\nwhere the time goes (simulated steady step, ms per rank averaged over stages) and what "
                     "binds memory:\n");
  for (size_t k = 0; k < bests.size(); ++k) {
    const auto& e = bests[k];
    const auto& c = e.candidate;
    std::vector<bool> recompute;
    for (const auto& st : e.stages) recompute.push_back(st.recompute);
    const auto sim = planner::simulate_steady(
        planner::make_sim_input(model, c, e.split.bounds, recompute, planner::default_sim_steps(c.schedule)));
    const auto a = average(sim);
    size_t full = 0;
    for (size_t i = 0; i < e.stages.size(); ++i)
      if (fill(e.stages[i].memory) > fill(e.stages[full].memory)) full = i;
    const auto& mem = e.stages[full].memory;
    const double bubble = sim.bubble_fraction * sim.step_ms;
    fmt::print(stderr, "  {:<6} {:<5} b={} m={} d={} w={}: {:.2f} ms = compute {:.2f} + p2p {:.2f} + allreduce "
                       "{:.2f} + update {:.2f} + fill/drain bubble {:.2f} ({:.1f}%) + idle on less busy stages "
                       "{:.2f} ({:.1f}%)\n",
               k == 0 ? "chosen" : "best", schemas::to_string(c.schedule), c.microbatch, c.microbatches, c.depth,
               c.width, sim.step_ms, a.compute_ms, a.p2p_ms, a.allreduce_ms, a.update_ms, bubble,
               100.0 * sim.bubble_fraction, std::max(0.0, a.idle_ms - bubble), 100.0 * sim.imbalance_fraction);
    fmt::print(stderr, "         memory: stage {} is fullest at {:.2f} of {:.2f} GiB ({:.0f}%); largest term '{}' "
                       "({:.2f} GiB){}\n",
               full, gib(mem.total_bytes), gib(mem.limit_bytes),
               100.0 * static_cast<double>(mem.total_bytes) / static_cast<double>(mem.limit_bytes), mem.dominant,
               gib(std::max({mem.weights_bytes, mem.master_bytes, mem.grads_bytes, mem.optimizer_bytes,
                             mem.stash_bytes, mem.comm_bytes, mem.reserve_bytes})),
               e.stages[full].recompute ? ", recomputes to fit" : "");
  }
  print_staleness_trade(bests);
}

}  // namespace pd2bw::cli

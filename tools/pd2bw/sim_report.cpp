// Output of simulated runs.
#include "sim_report.hpp"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

#include "pd2bw/pipeline/memory.hpp"
#include "pd2bw/pipeline/schedule.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::cli {

namespace {

double gib(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30); }

// e as the search replayed it (its step, idle fractions and breakdown); an entry never replayed is replayed
// now, as the search replays (the measured step alone: one step where that step proves its period).
planner::Evaluated replayed(const planner::CostModel& model, planner::Evaluated e) {
  if (!e.simulated() || e.unreplayed) planner::replay_evaluated(model, e);
  return e;
}

double fill(const schemas::MemoryBreakdown& m) {
  return static_cast<double>(m.total_bytes) / static_cast<double>(m.limit_bytes);
}

std::string join(const std::vector<int64_t>& xs) {
  std::string out;
  for (int64_t x : xs) out += fmt::format("{}{}", out.empty() ? "" : ", ", x);
  return out;
}

// One rank position of a replayed plan, from its model chunks (the stage alone when v = 1): the layers of
// each chunk, whether it recomputes (all of its chunks or none), its device's memory, and the plan's
// predicted total for the rank, its chunks' shares added up (the reserve sits on one of them).
struct RankView {
  std::vector<int64_t> chunks;
  std::string layers;  // "a-b" per chunk, joined by ","
  bool recompute = false;
  int64_t limit_bytes = 0, planned_bytes = 0;
};

RankView rank_view(const schemas::Plan& plan, const planner::SimInput& in, size_t position) {
  RankView r;
  r.chunks = pipeline::chunks_at(in.spec.kind, in.spec.depth, in.spec.chunks, static_cast<int64_t>(position));
  for (int64_t c : r.chunks) {
    const auto& st = in.stages[static_cast<size_t>(c)];
    r.layers += fmt::format("{}{}-{}", r.layers.empty() ? "" : ",", st.layer_begin, st.layer_end - 1);
    r.recompute = r.recompute || st.recompute;
    r.limit_bytes = std::max(r.limit_bytes, st.limit_bytes);
    r.planned_bytes += plan.stages[static_cast<size_t>(c)].memory.total_bytes;
  }
  return r;
}

// The memory of one rank position of an evaluated candidate: its chunks' terms added up, with the name of
// the largest (the stage's own breakdown when v = 1), and whether it recomputes.
std::pair<schemas::MemoryBreakdown, bool> rank_memory(const planner::Evaluated& e, int64_t position) {
  const auto& c = e.candidate;
  const auto chunks = pipeline::chunks_at(c.schedule, c.depth, c.chunks, position);
  schemas::MemoryBreakdown m = e.stages[static_cast<size_t>(chunks.front())].memory;
  bool recompute = e.stages[static_cast<size_t>(chunks.front())].recompute;
  for (size_t k = 1; k < chunks.size(); ++k) {
    const auto& s = e.stages[static_cast<size_t>(chunks[k])];
    m.weights_bytes += s.memory.weights_bytes;
    m.master_bytes += s.memory.master_bytes;
    m.grads_bytes += s.memory.grads_bytes;
    m.optimizer_bytes += s.memory.optimizer_bytes;
    m.stash_bytes += s.memory.stash_bytes;
    m.comm_bytes += s.memory.comm_bytes;
    m.reserve_bytes += s.memory.reserve_bytes;
    m.total_bytes += s.memory.total_bytes;
    recompute = recompute || s.recompute;
  }
  if (chunks.size() > 1) m.dominant = pipeline::dominant_term(m);
  return {m, recompute};
}

// "interleaved v=2" for a chunked candidate, the schedule's name otherwise.
std::string schedule_name(const planner::Candidate& c) {
  return c.chunks > 1 ? fmt::format("{} v={}", schemas::to_string(c.schedule), c.chunks)
                      : std::string(schemas::to_string(c.schedule));
}

}  // namespace

std::string memory_warnings(const planner::SimInput& in, const planner::SimResult& sim) {
  std::string out;
  for (size_t i = 0; i < sim.stages.size(); ++i) {
    // A rank's chunks share its device: any of them names the limit.
    const auto chunks = pipeline::chunks_at(in.spec.kind, in.spec.depth, in.spec.chunks, static_cast<int64_t>(i));
    const int64_t limit = in.stages[static_cast<size_t>(chunks.front())].limit_bytes;
    const std::string who = in.spec.chunks > 1 ? fmt::format("rank {} of the pipeline (chunks {})", i, join(chunks))
                                               : fmt::format("stage {}", i);
    if (sim.stages[i].peak_bytes > limit)
      out += fmt::format("warning: {} peaks at {} in the replay, over the device's {} by {} bytes\n", who,
                         schemas::format_bytes(sim.stages[i].peak_bytes), schemas::format_bytes(limit),
                         sim.stages[i].peak_bytes - limit);
  }
  return out;
}

void print_sim_table(const schemas::Plan& plan, const planner::SimInput& in, const planner::SimResult& sim) {
  const auto& p = plan.predictions;
  fmt::print(stderr, "step time: {} {:.3f} ms (plan predicts {:.3f} ms, {:+.2f}%), first step {:.3f} ms\n",
             sim.steady ? "steady" : "not yet steady,", sim.step_ms, p.step_ms, 100.0 * (sim.step_ms / p.step_ms - 1.0),
             sim.first_step_ms);
  if (sim.steady)
    fmt::print(stderr, "steady after {} steps: the measured step took the time of the one before it (within {:g}%)\n",
               sim.step_end_ms.size(), 100.0 * planner::kSteadyTolerance);
  else
    fmt::print(stderr,
               "not steady after {} steps: the last two measured steps took {:.3f} and {:.3f} ms; "
               "replay more steps (--steps, or leave it out to replay until two steps agree)\n",
               sim.step_end_ms.size(), sim.previous_step_ms, sim.last_step_ms);
  fmt::print(stderr, "throughput: {:.1f} samples/s, {:.0f} tokens/s; idle {:.1f}% of rank time in the steady step "
                     "({:.3f}-{:.3f} ms): fill/drain bubble {:.1f}%, unequal stages {:.1f}%\n",
             static_cast<double>(plan.global_batch) / (sim.step_ms / 1e3),
             static_cast<double>(plan.global_batch * plan.model.seq_len) / (sim.step_ms / 1e3),
             100.0 * sim.idle_fraction, sim.window_begin_ms, sim.window_end_ms, 100.0 * sim.bubble_fraction,
             100.0 * sim.imbalance_fraction);
  const bool chunked = in.spec.chunks > 1;
  std::vector<RankView> ranks;
  size_t layers_width = 8;  // a chunked rank lists several ranges: the column widens to the longest
  for (size_t i = 0; i < sim.stages.size(); ++i) {
    ranks.push_back(rank_view(plan, in, i));
    if (chunked) layers_width = std::max(layers_width, ranks.back().layers.size());
  }
  if (chunked)
    fmt::print(stderr, "v={} chunks per rank: each row below is a rank of the pipeline, over all of its chunks (their "
                       "layers; peak and plan are the rank's, its chunks' shares added up; inflight: most microbatches "
                       "stashed at once, all chunks counted)\n",
               in.spec.chunks);
  fmt::print(stderr, "{:>5} {:>{}} {:>6} {:>6} {:>10} {:>9} {:>10} {:>9}  {:>19} {:>9} {:>8}\n",
             chunked ? "rank" : "stage", "layers", layers_width, "recmp", "busy", "compute", "p2p", "allreduce", "idle",
             "peak GiB (plan)", "versions", "inflight");
  for (size_t i = 0; i < sim.stages.size(); ++i) {
    const auto& s = sim.stages[i];
    const RankView& r = ranks[i];
    fmt::print(stderr, "{:>5} {:>{}} {:>6} {:>5.1f}% {:>7.2f} ms {:>6.2f} ms {:>7.2f} ms {:>6.2f} ms  {:>9.3f} ({:>7.3f}) {:>9} {:>8}\n",
               i, r.layers, layers_width, r.recompute ? "yes" : "no", 100.0 * s.busy_fraction, s.compute_ms, s.p2p_ms,
               s.allreduce_ms, s.idle_ms, gib(s.peak_bytes), gib(r.planned_bytes), s.max_live_versions,
               s.peak_in_flight);
  }
  fmt::print(stderr, "{}", memory_warnings(in, sim));
}

std::string sim_report_json(const schemas::Plan& plan, const planner::SimInput& in, const planner::SimResult& sim) {
  nlohmann::ordered_json j;
  j["schedule"] = std::string(schemas::to_string(plan.schedule));
  j["steps"] = in.spec.steps;
  if (plan.chunks_per_rank > 1) j["chunks_per_rank"] = plan.chunks_per_rank;
  j["ranks"] = plan.width * plan.depth;
  j["step_ms"] = sim.step_ms;
  j["first_step_ms"] = sim.first_step_ms;
  j["planned_step_ms"] = plan.predictions.step_ms;
  j["steady"] = sim.steady;
  j["previous_step_ms"] = sim.previous_step_ms;
  j["last_step_ms"] = sim.last_step_ms;
  j["idle_fraction"] = sim.idle_fraction;
  j["bubble_fraction"] = sim.bubble_fraction;
  j["imbalance_fraction"] = sim.imbalance_fraction;
  j["step_end_ms"] = sim.step_end_ms;
  j["trace_op_events"] = sim.events.size();
  auto& stages = j["stages"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < sim.stages.size(); ++i) {
    const auto& s = sim.stages[i];
    const RankView r = rank_view(plan, in, i);
    stages.push_back({{"busy_fraction", s.busy_fraction},
                      {"compute_ms", s.compute_ms},
                      {"p2p_ms", s.p2p_ms},
                      {"allreduce_ms", s.allreduce_ms},
                      {"update_ms", s.update_ms},
                      {"idle_ms", s.idle_ms},
                      {"peak_bytes", s.peak_bytes},
                      {"limit_bytes", r.limit_bytes},
                      {"planned_peak_bytes", r.planned_bytes},
                      {"peak_in_flight", s.peak_in_flight},
                      {"max_live_versions", s.max_live_versions}});
    if (in.spec.chunks > 1) stages.back()["chunks"] = r.chunks;  // the model chunks this rank holds
  }
  return j.dump(2) + "\n";
}

namespace {

// 2BW's stale update against the best synchronous schedule (any other) among `bests`: the speed
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
             schedule_name(c), c.microbatch, c.microbatches, c.depth, c.width, sync->step_ms,
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
    const planner::Evaluated e = replayed(model, bests[k]);
    const auto& c = e.candidate;
    const planner::StepBreakdown& a = e.breakdown;
    // The fullest rank: with chunks its chunks' shares added up (a stage when v = 1).
    int64_t full = 0;
    auto [mem, redo] = rank_memory(e, 0);
    for (int64_t p = 1; p < c.depth; ++p) {
      auto [m, r] = rank_memory(e, p);
      if (fill(m) > fill(mem)) std::tie(full, mem, redo) = std::tuple(p, m, r);
    }
    const double bubble = e.bubble_fraction * e.step_ms;
    fmt::print(stderr,
               "  {:<6} {:<5} b={} m={} d={} w={}: {:.2f} ms = compute {:.2f} + p2p {:.2f} + allreduce "
               "{:.2f} + update {:.2f} + fill/drain bubble {:.2f} ({:.1f}%) + idle on less busy stages "
               "{:.2f} ({:.1f}%)\n",
               k == 0 ? "chosen" : "best", schedule_name(c), c.microbatch, c.microbatches, c.depth, c.width, e.step_ms,
               a.compute_ms, a.p2p_ms, a.allreduce_ms, a.update_ms, bubble, 100.0 * e.bubble_fraction,
               std::max(0.0, a.idle_ms - bubble), 100.0 * e.imbalance_fraction);
    const std::string fullest =
        c.chunks > 1 ? fmt::format("rank {} of the pipeline (chunks {})", full,
                                   join(pipeline::chunks_at(c.schedule, c.depth, c.chunks, full)))
                     : fmt::format("stage {}", full);
    fmt::print(stderr, "         memory: {} is fullest at {:.2f} of {:.2f} GiB ({:.0f}%); largest term '{}' "
                       "({:.2f} GiB){}\n",
               fullest, gib(mem.total_bytes), gib(mem.limit_bytes),
               100.0 * static_cast<double>(mem.total_bytes) / static_cast<double>(mem.limit_bytes), mem.dominant,
               gib(std::max({mem.weights_bytes, mem.master_bytes, mem.grads_bytes, mem.optimizer_bytes,
                             mem.stash_bytes, mem.comm_bytes, mem.reserve_bytes})),
               redo ? ", recomputes to fit" : "");
  }
  print_staleness_trade(bests);
}

}  // namespace pd2bw::cli

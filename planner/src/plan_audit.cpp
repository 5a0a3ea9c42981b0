// `pd2bw validate`'s checks of a plan's numbers: the rules any plan follows, and the plan recomputed from
// its profile with the planner's own pricing and replay.
#include "pd2bw/planner/plan_audit.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "pd2bw/pipeline/memory.hpp"
#include "pd2bw/pipeline/shape.hpp"
#include "pd2bw/pipeline/stash.hpp"
#include "pd2bw/planner/search.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "search_internal.hpp"

namespace pd2bw::planner {

namespace {

// Times in a plan are written with full precision; recomputed ones add the same terms in the same order,
// so only the last bits may differ.
constexpr double kRelative = 1e-9;

bool close(double a, double b) { return std::abs(a - b) <= kRelative * std::max(std::abs(a), std::abs(b)); }

std::string stage_ptr(size_t i, std::string_view key) { return fmt::format("/stages/{}/{}", i, key); }

// Collects findings; `source` says what the expected value is ("the profile gives", ...).
struct Findings {
  std::vector<PlanFinding> out;
  void add(std::string pointer, std::string message) { out.push_back({std::move(pointer), std::move(message)}); }
  template <class T>
  void differ(const std::string& pointer, const T& got, const T& want, std::string_view source) {
    bool same = false;
    if constexpr (std::is_floating_point_v<T>)
      same = close(got, want);
    else
      same = got == want;
    if (!same) add(pointer, fmt::format("is {} but {} {}", got, source, want));
  }
};

void check_stage_memory(const schemas::Plan& plan, size_t i, Findings& f) {
  const auto& m = plan.stages[i].memory;
  const std::string mem = stage_ptr(i, "memory");
  f.differ(mem + "/total_bytes", m.total_bytes, pipeline::memory_total(m), "its terms add up to");
  f.differ(mem + "/limit_bytes", m.limit_bytes, plan.cluster.device.memory_bytes, "/cluster/device/memory_bytes is");
  // A chunked rank's reserve is written once, on its first chunk (chunk p of position p).
  const bool first_of_rank = static_cast<int64_t>(i) < plan.depth;
  f.differ(mem + "/reserve_bytes", m.reserve_bytes, first_of_rank ? plan.reserve_bytes : int64_t{0},
           first_of_rank ? "/reserve_bytes is" : "a rank's later chunk holds none of the reserve: it is");
  f.differ(mem + "/dominant", m.dominant, pipeline::dominant_term(m), "the largest term is");
  if (m.total_bytes > m.limit_bytes)
    f.add(mem + "/total_bytes", fmt::format("{} bytes do not fit the device's {} (over by {})", m.total_bytes,
                                            m.limit_bytes, m.total_bytes - m.limit_bytes));
}

// Microbatches stage (or chunk) i keeps at once: pipeline::in_flight, or for a chunked plan the most its
// chunk holds over the walk of its rank's step.
int64_t expected_in_flight(const schemas::Plan& plan, int64_t i) {
  if (plan.chunks_per_rank == 1) return pipeline::in_flight(plan.schedule, plan.depth, plan.microbatches_per_step, i);
  const int64_t position = pipeline::chunk_position(plan.schedule, plan.depth, i);
  const auto walk = pipeline::stash_walk(
      {plan.schedule, plan.depth, plan.microbatches_per_step, 1, 1, plan.chunks_per_rank}, position, false);
  const auto j = static_cast<size_t>(std::find(walk.chunks.begin(), walk.chunks.end(), i) - walk.chunks.begin());
  int64_t most = 0;
  for (const auto& moment : walk.moments) most = std::max(most, moment[j].activations);
  return most;
}

void check_stage_times(const schemas::Plan& plan, size_t i, Findings& f) {
  const auto& s = plan.stages[i];
  const auto stage = static_cast<int64_t>(i);
  f.differ(stage_ptr(i, "in_flight"), s.in_flight, expected_in_flight(plan, stage),
           fmt::format("{} with d = {} and m = {} keeps", schemas::to_string(plan.schedule), plan.depth,
                       plan.microbatches_per_step));
  const double m = static_cast<double>(plan.microbatches_per_step);
  const double floor = m * (s.compute_ms + s.p2p_ms) + s.allreduce_ms;
  if (!(s.step_ms >= floor * (1.0 - kRelative)))
    f.add(stage_ptr(i, "step_ms"), fmt::format("is {} but m x (compute_ms + p2p_ms) + allreduce_ms is already {}",
                                               s.step_ms, floor));
}

void check_predictions(const schemas::Plan& plan, Findings& f) {
  const auto& p = plan.predictions;
  size_t busiest = 0;
  size_t fullest = 0;
  for (size_t i = 0; i < plan.stages.size(); ++i) {
    if (plan.stages[i].step_ms > plan.stages[busiest].step_ms) busiest = i;
    const auto ratio = [&](size_t k) {
      return static_cast<double>(plan.stages[k].memory.total_bytes) /
             static_cast<double>(plan.stages[k].memory.limit_bytes);
    };
    if (ratio(i) > ratio(fullest)) fullest = i;
  }
  const double busy = plan.stages[busiest].step_ms;
  if (!(p.step_ms >= busy * (1.0 - kRelative)))
    f.add("/predictions/step_ms",
          fmt::format("is {} but stage {} alone is busy {} ms per step: no schedule is faster", p.step_ms, busiest,
                      busy));
  f.differ("/predictions/bottleneck_stage", p.bottleneck_stage, static_cast<int64_t>(busiest),
           "the stage with the largest step_ms is");
  const double samples = static_cast<double>(plan.global_batch) / (p.step_ms / 1e3);
  f.differ("/predictions/samples_per_s", p.samples_per_s, samples, "global_batch / step_ms gives");
  f.differ("/predictions/tokens_per_s", p.tokens_per_s, samples * static_cast<double>(plan.model.seq_len),
           "samples_per_s x seq_len gives");
  f.differ("/predictions/binding_memory", p.binding_memory, plan.stages[fullest].memory.dominant,
           fmt::format("stage {} is the closest to its limit and its dominant term is", fullest));
  for (size_t k = 0; k < plan.alternatives.size(); ++k)  // a lower bound may be below: its replay was left out
    if (plan.alternatives[k].step_bound != schemas::StepBound::lower &&
        plan.alternatives[k].step_ms < p.step_ms * (1.0 - kRelative))
      f.add(fmt::format("/alternatives/{}/step_ms", k),
            fmt::format("is {}, faster than the plan's {}: a planner would have chosen it",
                        plan.alternatives[k].step_ms, p.step_ms));
}

// The plan as the planner would write it for this profile, split and recompute flags.
schemas::Plan recomputed_plan(const schemas::Profile& profile, const schemas::Plan& plan) {
  const PlanModel pm = plan_model(profile, plan);
  Split split;
  split.bounds = pm.bounds;
  auto priced = [&](RecomputePolicy policy) {
    Constraints k = pm.model.constraints();
    k.recompute = policy;
    return evaluate_split(CostModel(profile, plan.cluster, k), pm.candidate, split);
  };
  const Evaluated plain = priced(RecomputePolicy::never);
  const Evaluated redo = priced(RecomputePolicy::always);
  Evaluated e = plain;
  for (size_t i = 0; i < e.stages.size(); ++i)
    if (pm.recompute[i]) e.stages[i] = redo.stages[i];
  detail::replay_into(pm.model, e);
  SearchResult result;
  result.ranked = {e};
  return build_plan(pm.model, result, plan.profile_sha256, plan.provenance);
}

}  // namespace

std::vector<PlanFinding> check_plan_numbers(const schemas::Plan& plan) {
  Findings f;
  // A gpt or bert model's layers are its embedding, its blocks and its head (what `train` builds from
  // /model); other kinds are planned from their profile's layers alone.
  const std::string& kind = plan.model.kind;
  if ((kind == "gpt" || kind == "bert") && plan.num_layers - 2 != plan.model.blocks)
    f.add("/model/blocks", fmt::format("is {} but a {} model of /num_layers {} layers (embedding, blocks, head) has {} "
                                       "blocks",
                                       plan.model.blocks, kind, plan.num_layers, plan.num_layers - 2));
  for (size_t i = 0; i < plan.stages.size(); ++i) {
    check_stage_memory(plan, i, f);
    check_stage_times(plan, i, f);
  }
  check_predictions(plan, f);
  return f.out;
}

std::vector<PlanFinding> check_plan_against(const schemas::Profile& profile, const schemas::Plan& plan) {
  const schemas::Plan want = recomputed_plan(profile, plan);
  Findings f;
  constexpr std::string_view kSays = "the profile gives";
  for (size_t i = 0; i < plan.stages.size(); ++i) {
    const auto& g = plan.stages[i];
    const auto& w = want.stages[i];
    f.differ(stage_ptr(i, "in_flight"), g.in_flight, w.in_flight, kSays);
    f.differ(stage_ptr(i, "compute_ms"), g.compute_ms, w.compute_ms, kSays);
    f.differ(stage_ptr(i, "p2p_ms"), g.p2p_ms, w.p2p_ms, kSays);
    f.differ(stage_ptr(i, "allreduce_ms"), g.allreduce_ms, w.allreduce_ms, kSays);
    f.differ(stage_ptr(i, "step_ms"), g.step_ms, w.step_ms, kSays);
    const std::string mem = stage_ptr(i, "memory");
    for (const auto& [key, got, expected] :
         {std::tuple{"weights_bytes", g.memory.weights_bytes, w.memory.weights_bytes},
          {"master_bytes", g.memory.master_bytes, w.memory.master_bytes},
          {"grads_bytes", g.memory.grads_bytes, w.memory.grads_bytes},
          {"optimizer_bytes", g.memory.optimizer_bytes, w.memory.optimizer_bytes},
          {"stash_bytes", g.memory.stash_bytes, w.memory.stash_bytes},
          {"comm_bytes", g.memory.comm_bytes, w.memory.comm_bytes},
          {"reserve_bytes", g.memory.reserve_bytes, w.memory.reserve_bytes},
          {"total_bytes", g.memory.total_bytes, w.memory.total_bytes},
          {"limit_bytes", g.memory.limit_bytes, w.memory.limit_bytes}})
      f.differ(fmt::format("{}/{}", mem, key), got, expected, kSays);
    f.differ(mem + "/dominant", g.memory.dominant, w.memory.dominant, kSays);
  }
  const auto& g = plan.predictions;
  const auto& w = want.predictions;
  f.differ("/predictions/step_ms", g.step_ms, w.step_ms, "the replay of the profile gives");
  f.differ("/predictions/samples_per_s", g.samples_per_s, w.samples_per_s, kSays);
  f.differ("/predictions/tokens_per_s", g.tokens_per_s, w.tokens_per_s, kSays);
  f.differ("/predictions/bottleneck_stage", g.bottleneck_stage, w.bottleneck_stage, kSays);
  f.differ("/predictions/bubble_fraction", g.bubble_fraction, w.bubble_fraction, kSays);
  f.differ("/predictions/imbalance_fraction", g.imbalance_fraction, w.imbalance_fraction, kSays);
  f.differ("/predictions/binding_memory", g.binding_memory, w.binding_memory, kSays);
  return f.out;
}

}  // namespace pd2bw::planner

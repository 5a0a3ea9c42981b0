// Human-readable output of `pd2bw plan`.
#include "plan_report.hpp"

#include <fmt/format.h>

#include <cmath>
#include <cstdio>

#include "cli.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::cli {

namespace {

std::string gib(int64_t bytes) { return schemas::format_bytes(bytes); }

std::string layer_range(const schemas::StagePlan& s) {
  return fmt::format("{}-{} ({})", s.layer_begin, s.layer_end - 1, s.layer_end - s.layer_begin);
}

}  // namespace

void print_plan_header(const PlanInputs& in, const planner::CostModel& model) {
  const auto& m = in.profile.model;
  fmt::print(stderr, "profile: {}\n  model {} ({}, {} layers, d_model {}, seq {}, {})\n",
             bounded(in.profile_label), bounded(m.name), bounded(m.kind), model.num_layers(), m.d_model, m.seq_len,
             schemas::to_string(m.dtype));
  fmt::print(stderr, "cluster: {}\n  {} device(s) '{}', {} each\n", in.cluster_label,
             in.cluster.total_devices(), bounded(in.cluster.device.name),
             schemas::format_bytes(in.cluster.device.memory_bytes));
  for (const auto& l : in.cluster.levels) {
    fmt::print(stderr, "  level {:<8} size {:>5}  p2p {:.1f} GB/s, {:.3f} ms latency, allreduce busbw {:.1f} GB/s\n",
               bounded(l.name), l.size, l.p2p_gbps, l.p2p_latency_ms, l.allreduce_busbw_gbps);
    // Measured curves replace the scalars above in the cost model; say so.
    if (!l.p2p_curve.empty())
      fmt::print(stderr, "    p2p time from a measured curve: {} point(s), {} .. {}\n", l.p2p_curve.size(),
                 schemas::format_bytes(l.p2p_curve.front().bytes), schemas::format_bytes(l.p2p_curve.back().bytes));
    if (!l.allreduce_curve.empty())
      fmt::print(stderr, "    allreduce time from a measured curve: {} point(s) over {} ranks, {} .. {}\n",
                 l.allreduce_curve.size(), l.allreduce_ranks, schemas::format_bytes(l.allreduce_curve.front().bytes),
                 schemas::format_bytes(l.allreduce_curve.back().bytes));
  }
  fmt::print(stderr, "global batch {} samples; reserve {} per device\n", in.constraints.global_batch,
             schemas::format_bytes(in.constraints.reserve_bytes));
  // The emulated CUDA device (emu/, a CPU running every GPU thread as a fiber) names itself so.
  if (in.profile.device.name.find("(emulated)") != std::string::npos)
    fmt::print(stderr, "note: the profile was measured on the emulated CUDA device '{}': its times are a CPU's, "
                       "not a GPU's; profile on the GPU itself (pd2bw profile --device cuda) to plan a cluster\n",
               in.profile.device.name);
  if (!in.constraints.schedule && !model.split_backward())
    fmt::print(stderr, "note: zb-h1 is not searched: the profile does not time every layer's backward in halves "
                       "(bwd_input_ms, bwd_weight_ms); 'pd2bw profile' records them\n");
  if (model.split_backward() && std::abs(model.split_overhead() - 1.0) > 0.05)
    fmt::print(stderr, "note: zb-h1 is priced with each layer's fused backward divided in its measured B:W ratio; "
                       "the halves timed apart add up to {:.0f}% of the fused backwards\n",
               100.0 * model.split_overhead());
}

void print_plan_table(const schemas::Plan& plan, const planner::CostModel& model) {
  (void)model;
  fmt::print(stderr, "\nchosen: {} | microbatch b={} | m={} microbatches/step | depth d={} | width w={} "
                     "| {} ranks, {}\n",
             schemas::to_string(plan.schedule), plan.microbatch_size, plan.microbatches_per_step,
             plan.depth, plan.width, plan.width * plan.depth, schemas::to_string(plan.placement));
  fmt::print(stderr, "{:>5}  {:<16} {:>5} {:>8} {:>12} {:>10} {:>12} {:>11}  {:>26}  {}\n", "stage",
             "layers", "recmp", "inflight", "compute/mb", "p2p/mb", "allreduce", "busy/step",
             "memory (peak/limit)", "dominant");
  for (const auto& s : plan.stages) {
    const double pct = 100.0 * static_cast<double>(s.memory.total_bytes) /
                       static_cast<double>(s.memory.limit_bytes);
    fmt::print(stderr, "{:>5}  {:<16} {:>5} {:>8} {:>9.3f} ms {:>7.3f} ms {:>9.2f} ms {:>8.1f} ms  "
                       "{:>9}/{:<9} {:>5.1f}%  {}{}\n",
               s.index, layer_range(s), s.recompute ? "yes" : "no", s.in_flight, s.compute_ms, s.p2p_ms,
               s.allreduce_ms, s.step_ms, gib(s.memory.total_bytes), gib(s.memory.limit_bytes), pct,
               s.memory.dominant, s.index == plan.predictions.bottleneck_stage ? "  <- bottleneck" : "");
  }
  const auto& p = plan.predictions;
  fmt::print(stderr, "predicted: step {:.2f} ms | {:.1f} samples/s | {:.0f} tokens/s | idle: fill/drain bubble "
                     "{:.1f}%, unequal stages {:.1f}% | memory binds on '{}'\n",
             p.step_ms, p.samples_per_s, p.tokens_per_s, 100.0 * p.bubble_fraction, 100.0 * p.imbalance_fraction,
             p.binding_memory);
}

void print_alternatives(const schemas::Plan& plan) {
  if (plan.alternatives.empty()) return;
  fmt::print(stderr, "alternatives that lost:\n");
  for (size_t i = 0; i < plan.alternatives.size(); ++i) {
    const auto& a = plan.alternatives[i];
    fmt::print(stderr, "  {:>2}. {:<5} b={:<3} m={:<4} d={:<4} w={:<4} {:<14} {:>10.2f} ms  {}\n", i + 1,
               schemas::to_string(a.schedule), a.microbatch_size, a.microbatches_per_step, a.depth,
               a.width, schemas::to_string(a.placement), a.step_ms, a.why);
  }
}

void throw_infeasible(const planner::CostModel& model, const planner::Evaluated& closest) {
  std::string msg = "no plan fits in device memory";
  if (closest.stages.empty()) {
    throw InfeasiblePlanError(msg, "raise --device-memory, lower --reserve, or allow recompute");
  }
  const auto& c = closest.candidate;
  msg += fmt::format("; closest: {} b={} m={} d={} w={} {} with",
                     schemas::to_string(c.schedule), c.microbatch, c.microbatches, c.depth, c.width,
                     schemas::to_string(c.placement));
  constexpr size_t kShown = 12;  // deep pipelines would print a line per stage
  size_t shown = 0, over_count = 0;
  for (size_t i = 0; i < closest.stages.size(); ++i) {
    const auto& s = closest.stages[i];
    const int64_t over = s.memory.total_bytes - s.memory.limit_bytes;
    if (over <= 0) continue;
    ++over_count;
    if (shown == kShown) continue;
    ++shown;
    msg += fmt::format("\n  stage {} layers {}-{}{}: needs {} of {} -> {} bytes over (largest term: {})", i,
                       closest.split.bounds[i], closest.split.bounds[i + 1] - 1,
                       s.recompute ? " (recompute)" : "", schemas::format_bytes(s.memory.total_bytes),
                       schemas::format_bytes(s.memory.limit_bytes), over, s.memory.dominant);
  }
  if (over_count > shown) msg += fmt::format("\n  ... and {} more stages over", over_count - shown);
  msg += fmt::format("\n  ({} of {} stages over)", over_count, closest.stages.size());
  (void)model;
  throw InfeasiblePlanError(msg, "use more or larger devices (--nodes, --device-memory), a smaller "
                                 "--reserve, --recompute auto, or a profile with smaller microbatches");
}

}  // namespace pd2bw::cli

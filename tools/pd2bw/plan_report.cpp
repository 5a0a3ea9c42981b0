// Human-readable output of `pd2bw plan`.
#include "plan_report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
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
    fmt::print(stderr, "note: zb-h1, zb-h2 and zb-v are not searched: the profile does not time every layer's "
                       "backward in halves "
                       "(bwd_input_ms, bwd_weight_ms); 'pd2bw profile' records them\n");
  if (model.split_backward() && std::abs(model.split_overhead() - 1.0) > 0.05)
    fmt::print(stderr, "note: the zero-bubble schedules are priced with each layer's fused backward divided in its "
                       "measured B:W ratio; "
                       "the halves timed apart add up to {:.0f}% of the fused backwards\n",
               100.0 * model.split_overhead());
}

namespace {

// A chunked plan's ranks: which chunks each holds, its busy time and its memory (its chunks' shares).
void print_rank_totals(const schemas::Plan& plan) {
  for (int64_t p = 0; p < plan.depth; ++p) {
    std::string chunks;
    double busy = 0.0;
    int64_t bytes = 0, limit = 0;
    for (const auto& s : plan.stages) {
      if (schemas::chunk_position(plan.schedule, plan.depth, s.index) != p) continue;
      chunks += fmt::format("{}{}", chunks.empty() ? "" : ", ", s.index);
      busy += s.step_ms;
      bytes += s.memory.total_bytes;
      limit = s.memory.limit_bytes;
    }
    fmt::print(stderr, "  rank {} of the pipeline holds chunks {}: busy {:.1f} ms/step, memory {}/{} ({:.1f}%)\n", p,
               chunks, busy, gib(bytes), gib(limit), 100.0 * static_cast<double>(bytes) / static_cast<double>(limit));
  }
}

}  // namespace

void print_plan_table(const schemas::Plan& plan, const planner::CostModel& model) {
  (void)model;
  fmt::print(stderr, "\nchosen: {} | microbatch b={} | m={} microbatches/step | depth d={} | width w={} "
                     "| {} ranks, {}{}\n",
             schemas::to_string(plan.schedule), plan.microbatch_size, plan.microbatches_per_step,
             plan.depth, plan.width, plan.width * plan.depth, schemas::to_string(plan.placement),
             plan.chunks_per_rank > 1 ? fmt::format(" | v={} chunks per rank: each row below is a chunk, whose "
                                                    "memory is its share of its rank's",
                                                    plan.chunks_per_rank)
                                      : std::string());
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
  if (plan.chunks_per_rank > 1) print_rank_totals(plan);
  const auto& p = plan.predictions;
  fmt::print(stderr, "predicted: step {:.2f} ms | {:.1f} samples/s | {:.0f} tokens/s | idle: fill/drain bubble "
                     "{:.1f}%, unequal stages {:.1f}% | memory binds on '{}'\n",
             p.step_ms, p.samples_per_s, p.tokens_per_s, 100.0 * p.bubble_fraction, 100.0 * p.imbalance_fraction,
             p.binding_memory);
}

namespace {

void print_rows(const schemas::Plan& plan) {
  if (plan.alternatives.empty()) return;
  fmt::print(stderr, "alternatives that lost:\n");
  for (size_t i = 0; i < plan.alternatives.size(); ++i) {
    const auto& a = plan.alternatives[i];
    const std::string name = a.chunks_per_rank > 1 ? fmt::format("{} v={}", schemas::to_string(a.schedule), a.chunks_per_rank)
                                                   : std::string(schemas::to_string(a.schedule));
    fmt::print(stderr, "  {:>2}. {:<5} b={:<3} m={:<4} d={:<4} w={:<4} {:<14} {:>10.2f} ms  {}\n", i + 1, name,
               a.microbatch_size, a.microbatches_per_step, a.depth,
               a.width, schemas::to_string(a.placement), a.step_ms, a.why);
  }
}

}  // namespace

void print_alternatives(const schemas::Plan& plan, const std::vector<schemas::Schedule>& searched) {
  std::vector<std::string> missing;
  for (schemas::Schedule s : searched)
    if (s != plan.schedule && std::none_of(plan.alternatives.begin(), plan.alternatives.end(),
                                           [&](const schemas::Alternative& a) { return a.schedule == s; }))
      missing.emplace_back(schemas::to_string(s));
  print_rows(plan);
  if (!missing.empty())
    fmt::print(stderr, "no row for {}: not searched exactly here, and no split of their most promising candidates "
                       "fits or replays quickly at this size; `--explain` (or `--schedule S`) searches each\n",
               fmt::join(missing, ", "));
}

namespace {

// A chunked candidate's ranks over their memory: each rank's chunks added up.
[[noreturn]] void throw_chunked_infeasible(const planner::Evaluated& closest, std::string msg) {
  const auto& c = closest.candidate;
  constexpr int64_t kShown = 12;
  int64_t over_count = 0;
  for (int64_t p = 0; p < c.depth; ++p) {
    int64_t total = 0, limit = 0;
    bool recompute = false;
    std::string chunks;
    for (int64_t k = 0; k < c.depth * c.chunks; ++k) {
      if (schemas::chunk_position(c.schedule, c.depth, k) != p) continue;
      const auto& s = closest.stages[static_cast<size_t>(k)];
      total += s.memory.total_bytes;
      limit = s.memory.limit_bytes;
      recompute = s.recompute;
      chunks += fmt::format("{}{}", chunks.empty() ? "" : ",", k);
    }
    if (total <= limit) continue;
    if (++over_count <= kShown)
      msg += fmt::format("\n  rank {} of the pipeline (chunks {}){}: needs {} of {} -> {} bytes over", p, chunks,
                         recompute ? " (recompute)" : "", schemas::format_bytes(total), schemas::format_bytes(limit),
                         total - limit);
  }
  if (over_count > kShown) msg += fmt::format("\n  ... and {} more ranks over", over_count - kShown);
  msg += fmt::format("\n  ({} of {} ranks over)", over_count, c.depth);
  throw InfeasiblePlanError(msg, "use more or larger devices (--nodes, --device-memory), a smaller "
                                 "--reserve, --recompute auto, or a profile with smaller microbatches");
}

// A candidate as the infeasibility reports name it: "zb-v v=2 b=4 m=64 d=128 w=32".
std::string candidate_label(const planner::Candidate& c) {
  return fmt::format("{}{} b={} m={} d={} w={}", schemas::to_string(c.schedule),
                     c.chunks > 1 ? fmt::format(" v={}", c.chunks) : std::string(), c.microbatch, c.microbatches,
                     c.depth, c.width);
}

}  // namespace

void throw_left_out_may_fit(const planner::LeftOut& left) {
  const planner::Candidate& c = *left.not_ruled_out;
  const int64_t limit = c.chunks > 1 ? planner::kMaxChunkedMicrobatches : planner::kMaxReplayedMicrobatches;
  throw InfeasiblePlanError(
      fmt::format("no searched plan fits in device memory, and that does not prove that none does: {} points "
                  "run more microbatch-stages per step than the planner replays (m x d over {}, or m x d x v "
                  "over {} for interleaved and zb-v), and memory does not rule out all of them; the first: "
                  "{} ({} microbatch-stages)",
                  left.count, planner::kMaxReplayedMicrobatches, planner::kMaxChunkedMicrobatches, candidate_label(c),
                  c.microbatches * c.depth * c.chunks),
      fmt::format("fewer microbatches per step (m = global batch / (b x w)) bring such a point under the limit: "
                  "plan a smaller --global-batch or a larger --microbatch, so that its m x d x v <= {}",
                  limit));
}

void throw_infeasible(const planner::CostModel& model, const planner::Evaluated& closest) {
  std::string msg = "no plan fits in device memory";
  if (closest.stages.empty()) {
    throw InfeasiblePlanError(msg, "raise --device-memory, lower --reserve, or allow recompute");
  }
  const auto& c = closest.candidate;
  msg += fmt::format("; closest: {} {} with", candidate_label(c), schemas::to_string(c.placement));
  if (c.chunks > 1) throw_chunked_infeasible(closest, msg);
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

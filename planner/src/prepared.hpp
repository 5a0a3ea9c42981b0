// A candidate with its per-stage links and in-flight counts resolved once, so that pricing a stage in
// the partitioner's inner loops is a handful of arithmetic operations. Private to the planner.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "pd2bw/checked.hpp"
#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner::detail {

// A run [first, first + count) of one of PreparedCandidate's pooled arrays.
struct Span {
  uint32_t first = 0, count = 0;
};

struct PreparedStage {
  int64_t ar_level = -1;  // level the stage's replicas span (-1: width 1)
  int64_t in_flight = 0;
  // The p2p tables (CostModel::output_p2p_ms) of the distinct levels the stage's input and output
  // boundaries cross over its replicas (empty at the pipeline's ends; runs of PreparedCandidate::tables,
  // a stage's `in` the stage before's `out`), and the distinct (input, output) pairs the replicas use (a
  // run of PreparedCandidate::patterns), as indices into them (-1 at an end). The slowest pair sets the
  // stage's busy time; the fastest level of each boundary its part in the fill and drain.
  Span in, out, patterns;
};

struct PreparedCandidate {
  Candidate candidate;
  StaticFactors statics;
  int64_t limit_bytes = 0, reserve_bytes = 0;
  RecomputePolicy policy = RecomputePolicy::auto_;
  // The profile's per-layer arrays at the candidate's microbatch size.
  const double *compute = nullptr, *fwd = nullptr, *redo = nullptr, *update = nullptr;
  const int64_t *stash = nullptr, *params = nullptr, *in_bytes = nullptr, *out_bytes = nullptr;
  // zb-h1 (split_backward()): the W part of the backward and what W keeps, per layer (prefix sums).
  const double* weight = nullptr;
  const int64_t* weight_stash = nullptr;
  std::vector<PreparedStage> stages;
  // What the stages' spans index, pooled (a deep candidate would otherwise allocate five arrays a stage).
  std::vector<const double*> tables;
  std::vector<int64_t> table_levels;  // the level of each table
  std::vector<CostModel::AllreduceAt> allreduce;  // per cluster level, with width > 1 (prepare())
  std::vector<std::pair<int, int>> patterns;
  bool split_backward() const { return schemas::splits_backward(candidate.schedule); }
};

PreparedCandidate prepare(const CostModel& model, const Candidate& c);
// The same without the links and allreduce levels (stage patterns, tables, ar_level left empty): enough
// for quick_price's bytes, and cheap for deep candidates.
PreparedCandidate prepare_memory(const CostModel& model, const Candidate& c);

// The numbers the partitioner needs, without the memory breakdown.
// No default member values: quick_price assigns every field, and a QuickCost left to zero-fill first
// (152 bytes, a `rep stos` in the partitioner's innermost loops) was an eighth of the greedy runs' samples.
// Value-initialize one (`QuickCost q{}`) to start from zeros.
struct QuickCost {
  bool feasible;
  bool recompute;
  double compute_ms, p2p_ms, allreduce_ms, update_ms, step_ms;
  double forward_ms, backward_ms, weight_ms, in_ms, out_ms;  // see StageCost
  int64_t plain_bytes;                                       // total memory without recompute
  int64_t redo_bytes;                                        // total memory with recompute
  int64_t in_bytes, out_bytes;                               // the stage's boundary tensors
  int64_t param_bytes;                                       // parameters of the stage's layers (compute dtype)
  int64_t stash_one;                                         // one microbatch's stash of the whole stage
  int64_t comm_bytes;                                        // send/receive buffers
  int64_t weight_stash;  // zb-h1: what one microbatch keeps from its B to its W, whole stage (0 otherwise)
};

// The policy's choice for a stage (or a chunked rank) that needs `plain` bytes as it is and `redo` bytes
// recomputing: never / always as pinned; auto recomputes only when the plain stage does not fit (and,
// when neither fits, the smaller one is reported).
struct RecomputeChoice {
  bool recompute = false, feasible = true;
};
inline RecomputeChoice choose_recompute(RecomputePolicy policy, int64_t plain, int64_t redo, int64_t limit) {
  switch (policy) {
    case RecomputePolicy::never: return {false, plain <= limit};
    case RecomputePolicy::always: return {true, redo <= limit};
    case RecomputePolicy::auto_: break;
  }
  if (plain <= limit) return {false, true};
  return {redo <= limit || redo <= plain, redo <= limit};
}

// The stash term of stage `stage` (pipeline::stash_term, or deferred_stash_term for a split backward).
[[gnu::always_inline]] inline int64_t stash_of(const PreparedCandidate& pc, int64_t stage, bool recompute,
                                               const QuickCost& q) {
  if (pc.split_backward()) {
    const auto [ahead, defer] = pipeline::split_shape(pc.candidate.schedule, pc.candidate.depth, stage);
    return pipeline::deferred_stash_term(ahead, defer, pc.candidate.microbatches, recompute, q.in_bytes, q.stash_one,
                                         q.weight_stash);
  }
  return pipeline::stash_term(pc.stages[static_cast<size_t>(stage)].in_flight, recompute, q.in_bytes, q.stash_one);
}

// The boundary transfers of layers [b, e) on stage `st`: the slowest replica's per-microbatch p2p time
// (both directions of both boundaries) and the fastest replica's one-way time over each boundary.
[[gnu::always_inline]] inline void price_links(const PreparedCandidate& pc, const PreparedStage& st, size_t b, size_t e,
                                               QuickCost& q) {
  double in[8], out[8];  // clusters have a handful of levels; more than 8 distinct ones never occur
  const size_t ni = std::min<size_t>(st.in.count, 8), no = std::min<size_t>(st.out.count, 8);
  const double* const* in_tables = pc.tables.data() + st.in.first;
  const double* const* out_tables = pc.tables.data() + st.out.first;
  for (size_t k = 0; k < ni; ++k) in[k] = in_tables[k][b - 1];
  for (size_t k = 0; k < no; ++k) out[k] = out_tables[k][e - 1];
  q.in_ms = ni ? *std::min_element(in, in + ni) : 0.0;
  q.out_ms = no ? *std::min_element(out, out + no) : 0.0;
  double worst = 0.0;
  const auto* pattern = pc.patterns.data() + st.patterns.first;
  for (size_t k = 0; k < st.patterns.count; ++k) {
    const auto [i, o] = pattern[k];
    worst = std::max(worst, 2.0 * ((i >= 0 ? in[i] : 0.0) + (o >= 0 ? out[o] : 0.0)));
  }
  q.p2p_ms = worst;
}

// The allreduce (ms per step) of stage `stage` holding layers [begin, end): its fp32 gradients over its
// replicas, at the level they span (0 with one replica), by the candidate's CostModel::AllreduceAt.
[[gnu::always_inline]] inline double stage_allreduce_ms(const PreparedCandidate& pc, int64_t stage, int64_t begin,
                                                        int64_t end) {
  const auto& st = pc.stages[static_cast<size_t>(stage)];
  const int64_t grad_bytes = pc.statics.grads(pc.params[static_cast<size_t>(end)] - pc.params[static_cast<size_t>(begin)]);
  return st.ar_level >= 0 ? pc.allreduce[static_cast<size_t>(st.ar_level)](grad_bytes) : 0.0;
}

// Defined here, always inlined, because the partitioner calls it in its innermost loop and uses few fields
// (inlined, what a caller does not read is not computed).
// Byte sums saturate: a stage whose memory does not fit in 64 bits does not fit in a device either.
[[gnu::always_inline]] inline QuickCost quick_price(const PreparedCandidate& pc, int64_t stage, int64_t begin,
                                                    int64_t end) {
  const Candidate& c = pc.candidate;
  const auto& st = pc.stages[static_cast<size_t>(stage)];
  const auto b = static_cast<size_t>(begin), e = static_cast<size_t>(end);
  QuickCost q;
  q.in_bytes = pc.in_bytes[b];
  q.out_bytes = pc.out_bytes[e - 1];
  q.param_bytes = pc.params[e] - pc.params[b];
  q.stash_one = pc.stash[e] - pc.stash[b];
  q.weight_stash = pc.split_backward() ? pc.weight_stash[e] - pc.weight_stash[b] : 0;
  price_links(pc, st, b, e, q);
  q.comm_bytes = pipeline::comm_buffer_bytes(stage, c.depth, q.in_bytes, q.out_bytes);
  // pipeline::stage_memory's total, without building the breakdown.
  const int64_t base = saturating_add(pc.statics.total(q.param_bytes), saturating_add(q.comm_bytes, pc.reserve_bytes));
  q.plain_bytes = saturating_add(base, stash_of(pc, stage, false, q));
  q.redo_bytes = saturating_add(base, stash_of(pc, stage, true, q));
  const RecomputeChoice choice = choose_recompute(pc.policy, q.plain_bytes, q.redo_bytes, pc.limit_bytes);
  q.feasible = choice.feasible;
  q.recompute = choice.recompute;
  q.forward_ms = pc.fwd[e] - pc.fwd[b];
  q.compute_ms = pc.compute[e] - pc.compute[b];
  if (q.recompute) q.compute_ms += pc.redo[e] - pc.redo[b];
  q.backward_ms = q.compute_ms - q.forward_ms;
  q.weight_ms = pc.split_backward() ? pc.weight[e] - pc.weight[b] : 0.0;
  q.allreduce_ms = stage_allreduce_ms(pc, stage, begin, end);
  q.update_ms = pc.update[e] - pc.update[b];
  q.step_ms = static_cast<double>(c.microbatches) * (q.compute_ms + q.p2p_ms) + (q.allreduce_ms + q.update_ms);
  return q;
}

// A StageCost with q's feasibility, recompute choice and times (what step_objective reads), without the
// memory breakdown price_stage adds (price_stage.cpp).
StageCost stage_times(const QuickCost& q);
// The one pricing function behind CostModel::stage_cost and the partitioner.
StageCost price_stage(const PreparedCandidate& pc, int64_t stage, int64_t begin, int64_t end);

}  // namespace pd2bw::planner::detail

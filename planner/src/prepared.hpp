// A candidate with its per-stage links and in-flight counts resolved once, so that pricing a stage in
// the partitioner's inner loops is a handful of arithmetic operations. Private to the planner.
#pragma once

#include <cstdint>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner::detail {

struct PreparedStage {
  int64_t in_level = -1;   // level of the link to the previous stage (-1: first stage)
  int64_t out_level = -1;  // level of the link to the next stage (-1: last stage)
  int64_t ar_level = -1;   // level the stage's replicas span (-1: width 1)
  int64_t in_flight = 0;
  const double* in_p2p = nullptr;   // CostModel::input_p2p_ms at in_level, or null
  const double* out_p2p = nullptr;  // CostModel::output_p2p_ms at out_level, or null
};

struct PreparedCandidate {
  Candidate candidate;
  int64_t factor = 0;  // pipeline_factor
  StaticFactors statics;
  int64_t limit_bytes = 0, reserve_bytes = 0;
  RecomputePolicy policy = RecomputePolicy::auto_;
  // The profile's per-layer arrays at the candidate's microbatch size.
  const double *compute = nullptr, *fwd = nullptr, *update = nullptr;
  const int64_t *stash = nullptr, *params = nullptr, *in_bytes = nullptr, *out_bytes = nullptr;
  std::vector<PreparedStage> stages;
};

PreparedCandidate prepare(const CostModel& model, const Candidate& c);

// The numbers the partitioner needs, without the memory breakdown.
struct QuickCost {
  bool feasible = true;
  bool recompute = false;
  double compute_ms = 0, p2p_ms = 0, allreduce_ms = 0, update_ms = 0, step_ms = 0;
  int64_t plain_bytes = 0;  // total memory without recompute
  int64_t redo_bytes = 0;   // total memory with recompute
  int64_t in_bytes = 0, out_bytes = 0;  // the stage's boundary tensors
  int64_t param_bytes = 0;  // parameters of the stage's layers (compute dtype)
  int64_t stash_one = 0;    // one microbatch's stash of the whole stage
  int64_t comm_bytes = 0;   // send/receive buffers
};
// Defined here, inline, because the partitioner calls it in its innermost loop and uses few fields.
inline QuickCost quick_price(const CostModel& model, const PreparedCandidate& pc, int64_t stage, int64_t begin,
                      int64_t end) {
  const Candidate& c = pc.candidate;
  const auto& st = pc.stages[static_cast<size_t>(stage)];
  const auto b = static_cast<size_t>(begin), e = static_cast<size_t>(end);
  QuickCost q;
  q.in_bytes = pc.in_bytes[b];
  q.out_bytes = pc.out_bytes[e - 1];
  q.param_bytes = pc.params[e] - pc.params[b];
  q.stash_one = pc.stash[e] - pc.stash[b];
  double p2p = 0.0;
  if (st.in_p2p) p2p += 2.0 * st.in_p2p[b];
  if (st.out_p2p) p2p += 2.0 * st.out_p2p[e - 1];
  q.comm_bytes = pipeline::comm_buffer_bytes(stage, c.depth, q.in_bytes, q.out_bytes);
  // pipeline::stage_memory's total, without building the breakdown.
  const int64_t base = pc.statics.total(q.param_bytes) + q.comm_bytes + pc.reserve_bytes;
  q.plain_bytes = base + pipeline::stash_term(st.in_flight, false, q.in_bytes, q.stash_one);
  q.redo_bytes = base + pipeline::stash_term(st.in_flight, true, q.in_bytes, q.stash_one);
  const int64_t limit = pc.limit_bytes;
  switch (pc.policy) {
    case RecomputePolicy::never: q.feasible = q.plain_bytes <= limit; break;
    case RecomputePolicy::always:
      q.recompute = true;
      q.feasible = q.redo_bytes <= limit;
      break;
    case RecomputePolicy::auto_:
      if (q.plain_bytes > limit) {
        q.feasible = q.redo_bytes <= limit;
        q.recompute = q.feasible || q.redo_bytes <= q.plain_bytes;
      }
      break;
  }
  q.p2p_ms = p2p;
  q.compute_ms = pc.compute[e] - pc.compute[b];
  if (q.recompute) q.compute_ms += pc.fwd[e] - pc.fwd[b];
  const int64_t grad_bytes = pc.statics.grads(q.param_bytes);
  q.allreduce_ms = st.ar_level >= 0 ? model.allreduce_ms(grad_bytes, c.width, st.ar_level) : 0.0;
  q.update_ms = pc.update[e] - pc.update[b];
  q.step_ms = static_cast<double>(pc.factor) * (q.compute_ms + q.p2p_ms) + q.allreduce_ms + q.update_ms;
  return q;
}

// The one pricing function behind CostModel::stage_cost and the partitioner.
StageCost price_stage(const CostModel& model, const PreparedCandidate& pc, int64_t stage, int64_t begin,
                      int64_t end);

}  // namespace pd2bw::planner::detail

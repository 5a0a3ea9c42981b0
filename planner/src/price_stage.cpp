// Prices one stage: compute, boundary transfers, allreduce, and every memory term, choosing recompute
// per the policy. The single source of these numbers for search, brute force and simulation.
#include "prepared.hpp"

namespace pd2bw::planner::detail {

PreparedCandidate prepare(const CostModel& model, const Candidate& c) {
  PreparedCandidate pc;
  pc.candidate = c;
  pc.factor = CostModel::pipeline_factor(c);
  pc.statics = model.static_factors(c.schedule);
  pc.limit_bytes = model.memory_limit_bytes();
  pc.reserve_bytes = model.constraints().reserve_bytes;
  pc.policy = model.constraints().recompute;
  pc.stages.resize(static_cast<size_t>(c.depth));
  for (int64_t i = 0; i < c.depth; ++i) {
    auto& st = pc.stages[static_cast<size_t>(i)];
    st.in_flight = CostModel::in_flight(c, i);
    if (i + 1 < c.depth) st.out_level = model.boundary_level(c, i);
    if (i > 0) st.in_level = pc.stages[static_cast<size_t>(i - 1)].out_level;
    if (c.width > 1) st.ar_level = model.allreduce_level(c, i);
    if (st.in_level >= 0) st.in_p2p = model.input_p2p_ms(c.microbatch_index, st.in_level).data();
    if (st.out_level >= 0) st.out_p2p = model.output_p2p_ms(c.microbatch_index, st.out_level).data();
  }
  pc.compute = model.compute_prefix(c.microbatch_index).data();
  pc.fwd = model.fwd_prefix(c.microbatch_index).data();
  pc.update = model.update_prefix().data();
  pc.stash = model.stash_prefix(c.microbatch_index).data();
  pc.params = model.param_prefix().data();
  pc.in_bytes = model.input_bytes(c.microbatch_index).data();
  pc.out_bytes = model.output_bytes(c.microbatch_index).data();
  return pc;
}

StageCost price_stage(const CostModel& model, const PreparedCandidate& pc, int64_t stage, int64_t begin,
                      int64_t end) {
  const QuickCost q = quick_price(model, pc, stage, begin, end);
  const auto& st = pc.stages[static_cast<size_t>(stage)];
  StageCost sc;
  sc.feasible = q.feasible;
  sc.recompute = q.recompute;
  sc.in_flight = st.in_flight;
  sc.compute_ms = q.compute_ms;
  sc.p2p_ms = q.p2p_ms;
  sc.allreduce_ms = q.allreduce_ms;
  sc.update_ms = q.update_ms;
  sc.step_ms = q.step_ms;
  sc.memory = pipeline::stage_memory(pc.statics,
                                     {q.param_bytes, q.stash_one, q.in_bytes, q.comm_bytes, st.in_flight,
                                      q.recompute, pc.reserve_bytes},
                                     pc.limit_bytes);
  sc.over_bytes = q.feasible ? 0 : sc.memory.total_bytes - sc.memory.limit_bytes;
  return sc;
}

}  // namespace pd2bw::planner::detail

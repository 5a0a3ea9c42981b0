// Prices one stage: compute, boundary transfers, allreduce, and every memory term, choosing recompute
// per the policy. The single source of these numbers for search, brute force and simulation.
#include <algorithm>
#include <array>
#include <utility>

#include "prepared.hpp"

namespace pd2bw::planner::detail {

namespace {

schemas::MemoryBreakdown static_terms(const CostModel& model, Schedule s, int64_t param_bytes) {
  const StaticFactors& f = model.static_factors(s);
  schemas::MemoryBreakdown m;
  m.weights_bytes = f.weights(param_bytes);
  m.master_bytes = f.master_copy(param_bytes);
  m.grads_bytes = f.fp32(param_bytes);
  m.optimizer_bytes = f.optimizer(param_bytes);
  return m;
}

schemas::MemoryBreakdown memory_for(const CostModel& model, Schedule s, const QuickCost& q,
                                    int64_t in_flight) {
  schemas::MemoryBreakdown m = static_terms(model, s, q.param_bytes);
  m.stash_bytes = q.recompute ? in_flight * q.in_bytes + q.stash_one : in_flight * q.stash_one;
  m.comm_bytes = q.comm_bytes;
  m.reserve_bytes = model.constraints().reserve_bytes;
  m.total_bytes = m.weights_bytes + m.master_bytes + m.grads_bytes + m.optimizer_bytes +
                  m.stash_bytes + m.comm_bytes + m.reserve_bytes;
  m.limit_bytes = model.memory_limit_bytes();
  const std::array<std::pair<const char*, int64_t>, 7> terms{{{"weights", m.weights_bytes},
                                                              {"master", m.master_bytes},
                                                              {"grads", m.grads_bytes},
                                                              {"optimizer", m.optimizer_bytes},
                                                              {"stash", m.stash_bytes},
                                                              {"comm", m.comm_bytes},
                                                              {"reserve", m.reserve_bytes}}};
  const auto* top = &terms[0];
  for (const auto& t : terms)
    if (t.second > top->second) top = &t;
  m.dominant = top->first;
  return m;
}

}  // namespace

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
  const Candidate& c = pc.candidate;
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
  sc.memory = memory_for(model, c.schedule, q, st.in_flight);
  sc.over_bytes = q.feasible ? 0 : sc.memory.total_bytes - sc.memory.limit_bytes;
  return sc;
}

}  // namespace pd2bw::planner::detail

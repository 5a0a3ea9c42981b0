// Prices one stage: compute, boundary transfers, allreduce, and every memory term, choosing recompute
// per the policy. The single source of these numbers for search, brute force and simulation.
#include "prepared.hpp"

#include <algorithm>

namespace pd2bw::planner::detail {

namespace {

// The distinct levels in `levels`, as p2p tables, and each entry's index among them.
std::vector<int> distinct_tables(const CostModel& model, int64_t bi, const std::vector<int64_t>& levels,
                                 std::vector<const double*>& tables, std::vector<int64_t>& seen) {
  std::vector<int> index;
  for (int64_t lv : levels) {
    auto it = std::find(seen.begin(), seen.end(), lv);
    if (it == seen.end()) {
      seen.push_back(lv);
      tables.push_back(model.output_p2p_ms(bi, lv).data());
      it = seen.end() - 1;
    }
    index.push_back(static_cast<int>(it - seen.begin()));
  }
  return index;
}

}  // namespace

PreparedCandidate prepare_memory(const CostModel& model, const Candidate& c) {
  PreparedCandidate pc;
  pc.candidate = c;
  pc.statics = model.static_factors(c.schedule);
  pc.limit_bytes = model.memory_limit_bytes();
  pc.reserve_bytes = model.constraints().reserve_bytes;
  pc.policy = model.constraints().recompute;
  pc.stages.resize(static_cast<size_t>(c.depth));
  for (int64_t i = 0; i < c.depth; ++i)  // chunked: priced per rank (chunk_price.cpp)
    pc.stages[static_cast<size_t>(i)].in_flight = c.chunks > 1 ? 0 : CostModel::in_flight(c, i);
  const auto bi = c.microbatch_index;
  pc.compute = model.compute_prefix(bi).data();
  pc.fwd = model.fwd_prefix(bi).data();
  pc.redo = model.redo_prefix(bi).data();
  pc.update = model.update_prefix().data();
  pc.stash = model.stash_prefix(bi).data();
  pc.params = model.param_prefix().data();
  pc.in_bytes = model.input_bytes(bi).data();
  pc.out_bytes = model.output_bytes(bi).data();
  if (pc.split_backward()) model.require_split_backward(schemas::to_string(c.schedule));
  pc.weight = model.weight_prefix(bi).data();
  pc.weight_stash = model.weight_stash_prefix(bi).data();
  return pc;
}

PreparedCandidate prepare(const CostModel& model, const Candidate& c) {
  PreparedCandidate pc = prepare_memory(model, c);
  std::vector<int> in_index;  // per replica, into the stage's in_tables
  for (int64_t i = 0; i < c.depth; ++i) {
    auto& st = pc.stages[static_cast<size_t>(i)];
    if (c.width > 1) st.ar_level = model.allreduce_level(c, i);
    std::vector<int> out_index;
    if (i + 1 < c.depth)
      out_index = distinct_tables(model, c.microbatch_index, model.boundary_levels(c, i), st.out_tables, st.out_levels);
    for (int64_t r = 0; r < c.width; ++r) {
      const std::pair<int, int> p{i > 0 ? in_index[static_cast<size_t>(r)] : -1,
                                  i + 1 < c.depth ? out_index[static_cast<size_t>(r)] : -1};
      if (std::find(st.patterns.begin(), st.patterns.end(), p) == st.patterns.end()) st.patterns.push_back(p);
    }
    if (i + 1 < c.depth) {  // the next stage's input tables are this stage's output tables
      auto& next = pc.stages[static_cast<size_t>(i + 1)];
      next.in_tables = st.out_tables;
      next.in_levels = st.out_levels;
      in_index = out_index;
    }
  }
  return pc;
}

StageCost price_stage(const CostModel& model, const PreparedCandidate& pc, int64_t stage, int64_t begin,
                      int64_t end) {
  const QuickCost q = quick_price(model, pc, stage, begin, end);
  const auto& st = pc.stages[static_cast<size_t>(stage)];
  const Candidate& c = pc.candidate;
  StageCost sc;
  sc.feasible = q.feasible;
  sc.recompute = q.recompute;
  sc.in_flight = st.in_flight;
  sc.compute_ms = q.compute_ms;
  sc.p2p_ms = q.p2p_ms;
  sc.allreduce_ms = q.allreduce_ms;
  sc.update_ms = q.update_ms;
  sc.step_ms = q.step_ms;
  sc.forward_ms = q.forward_ms;
  sc.backward_ms = q.backward_ms;
  sc.weight_ms = q.weight_ms;
  sc.in_ms = q.in_ms;
  sc.out_ms = q.out_ms;
  sc.memory = pipeline::stage_memory(pc.statics,
                                     {q.param_bytes, q.stash_one, q.in_bytes, q.comm_bytes, st.in_flight,
                                      q.recompute, pc.reserve_bytes, pc.split_backward(), q.weight_stash, stage,
                                      c.depth, c.microbatches, c.schedule},
                                     pc.limit_bytes);
  sc.over_bytes = q.feasible ? 0 : sc.memory.total_bytes - sc.memory.limit_bytes;
  return sc;
}

}  // namespace pd2bw::planner::detail

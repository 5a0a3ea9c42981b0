// Prices one stage: compute, boundary transfers, allreduce, and every memory term, choosing recompute
// per the policy. The single source of these numbers for search, brute force and simulation.
#include "prepared.hpp"

#include <algorithm>

namespace pd2bw::planner::detail {

namespace {

// Appends to pc's pools the distinct levels of stage i's output boundary over its replicas (as p2p
// tables) and sets `index` to each replica's among them; returns their span.
Span distinct_out_tables(const CostModel& model, PreparedCandidate& pc, int64_t i, std::vector<int>& index) {
  const Candidate& c = pc.candidate;
  const auto first = static_cast<uint32_t>(pc.tables.size());
  index.clear();
  for (int64_t r = 0; r < c.width; ++r) {
    const int64_t lv = model.level_between(CostModel::rank_of(c, i, r), CostModel::rank_of(c, i + 1, r));
    const auto begin = pc.table_levels.begin() + first;
    auto it = std::find(begin, pc.table_levels.end(), lv);
    if (it == pc.table_levels.end()) {
      pc.table_levels.push_back(lv);
      pc.tables.push_back(model.output_p2p_ms(c.microbatch_index, lv).data());
      it = pc.table_levels.end() - 1;
    }
    index.push_back(static_cast<int>(it - pc.table_levels.begin() - first));
  }
  return {first, static_cast<uint32_t>(pc.tables.size() - first)};
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
  if (c.width > 1)
    for (size_t lv = 0; lv < model.cluster().levels.size(); ++lv)
      pc.allreduce.push_back(model.allreduce_at(c.width, static_cast<int64_t>(lv)));
  std::vector<int> in_index, out_index;  // per replica, into the stage's input / output tables
  for (int64_t i = 0; i < c.depth; ++i) {
    auto& st = pc.stages[static_cast<size_t>(i)];
    if (c.width > 1) st.ar_level = model.allreduce_level(c, i);
    if (i + 1 < c.depth) st.out = distinct_out_tables(model, pc, i, out_index);
    st.patterns.first = static_cast<uint32_t>(pc.patterns.size());
    for (int64_t r = 0; r < c.width; ++r) {
      const std::pair<int, int> p{i > 0 ? in_index[static_cast<size_t>(r)] : -1,
                                  i + 1 < c.depth ? out_index[static_cast<size_t>(r)] : -1};
      if (std::find(pc.patterns.begin() + st.patterns.first, pc.patterns.end(), p) == pc.patterns.end())
        pc.patterns.push_back(p);
    }
    st.patterns.count = static_cast<uint32_t>(pc.patterns.size() - st.patterns.first);
    if (i + 1 < c.depth) {  // the next stage's input tables are this stage's output tables
      pc.stages[static_cast<size_t>(i + 1)].in = st.out;
      in_index.swap(out_index);
    }
  }
  return pc;
}

StageCost stage_times(const QuickCost& q) {
  StageCost sc;
  sc.feasible = q.feasible;
  sc.recompute = q.recompute;
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
  return sc;
}

StageCost price_stage(const PreparedCandidate& pc, int64_t stage, int64_t begin, int64_t end) {
  const QuickCost q = quick_price(pc, stage, begin, end);
  const auto& st = pc.stages[static_cast<size_t>(stage)];
  const Candidate& c = pc.candidate;
  StageCost sc = stage_times(q);
  sc.in_flight = st.in_flight;
  sc.memory = pipeline::stage_memory(pc.statics,
                                     {q.param_bytes, q.stash_one, q.in_bytes, q.comm_bytes, st.in_flight,
                                      q.recompute, pc.reserve_bytes, pc.split_backward(), q.weight_stash, stage,
                                      c.depth, c.microbatches, c.schedule},
                                     pc.limit_bytes);
  sc.over_bytes = q.feasible ? 0 : sc.memory.total_bytes - sc.memory.limit_bytes;
  return sc;
}

}  // namespace pd2bw::planner::detail

// Builds the simulator's per-stage durations and memory terms from the profile and cluster numbers.
#include <fmt/format.h>

#include "pd2bw/error.hpp"
#include "pd2bw/planner/simulator.hpp"

namespace pd2bw::planner {

namespace {

SimStage stage_input(const CostModel& model, const Candidate& c, int64_t i, int64_t begin, int64_t end,
                     bool recompute) {
  const auto b = static_cast<size_t>(begin), e = static_cast<size_t>(end);
  const int64_t bi = c.microbatch_index;
  const StaticFactors& f = model.static_factors(c.schedule);
  SimStage st;
  st.layer_begin = begin;
  st.layer_end = end;
  st.recompute = recompute;
  const double fwd = model.fwd_prefix(bi)[e] - model.fwd_prefix(bi)[b];
  st.forward_ms = fwd;
  st.backward_ms = (model.compute_prefix(bi)[e] - model.compute_prefix(bi)[b]) - fwd;  // as the cost model has it
  st.recompute_ms = recompute ? model.redo_prefix(bi)[e] - model.redo_prefix(bi)[b] : 0.0;
  const bool split = c.schedule == Schedule::zb_h1;
  if (split) st.weight_ms = model.weight_prefix(bi)[e] - model.weight_prefix(bi)[b];
  const int64_t params = model.param_prefix()[e] - model.param_prefix()[b];
  st.update_ms = model.update_prefix()[e] - model.update_prefix()[b];
  if (c.width > 1)
    st.allreduce_ms = model.allreduce_ms(f.grads(params), c.width, model.allreduce_level(c, i));
  const int64_t in_bytes = model.input_bytes(bi)[b];
  const int64_t out_bytes = model.output_bytes(bi)[e - 1];
  const pipeline::StageMemoryInput mem{params,
                                       model.stash_prefix(bi)[e] - model.stash_prefix(bi)[b],
                                       in_bytes,
                                       pipeline::comm_buffer_bytes(i, c.depth, in_bytes, out_bytes),
                                       CostModel::in_flight(c, i),
                                       recompute,
                                       model.constraints().reserve_bytes,
                                       split,
                                       model.weight_stash_prefix(bi)[e] - model.weight_stash_prefix(bi)[b],
                                       i,
                                       c.depth,
                                       c.microbatches};
  const pipeline::StageMemoryTerms t = pipeline::stage_memory_terms(f, mem);
  st.weights_bytes = t.version_bytes;
  st.fixed_bytes = t.fixed_bytes;
  st.stash_bytes = t.per_microbatch_bytes;
  st.recompute_stash_bytes = t.recompute_bytes;
  st.weight_grad_bytes = t.weight_grad_bytes;
  st.limit_bytes = model.memory_limit_bytes();
  return st;
}

}  // namespace

SimInput make_sim_input(const CostModel& model, const Candidate& c, const std::vector<int64_t>& bounds,
                        const std::vector<bool>& recompute, int64_t steps) {
  if (static_cast<int64_t>(bounds.size()) != c.depth + 1 || static_cast<int64_t>(recompute.size()) != c.depth)
    throw Error(fmt::format("make_sim_input: {} bounds and {} recompute flags for {} stages", bounds.size(),
                            recompute.size(), c.depth));
  SimInput in;
  in.spec = {c.schedule, c.depth, c.microbatches, steps, c.width};
  in.ranks = pipeline::rank_table(c.placement, c.depth, c.width);
  for (int64_t i = 0; i < c.depth; ++i)
    in.stages.push_back(stage_input(model, c, i, bounds[static_cast<size_t>(i)],
                                    bounds[static_cast<size_t>(i + 1)], recompute[static_cast<size_t>(i)]));
  const int64_t bi = c.microbatch_index;
  in.boundary_ms.assign(static_cast<size_t>(c.width), {});
  for (int64_t r = 0; r < c.width; ++r)
    for (int64_t i = 0; i + 1 < c.depth; ++i) {
      const int64_t level = model.level_between(CostModel::rank_of(c, i, r), CostModel::rank_of(c, i + 1, r));
      const int64_t bytes = model.output_bytes(bi)[static_cast<size_t>(bounds[static_cast<size_t>(i + 1)] - 1)];
      in.boundary_ms[static_cast<size_t>(r)].push_back(model.p2p_ms(bytes, level));
    }
  return in;
}

}  // namespace pd2bw::planner

// Builds the simulator's per-chunk durations and memory terms from the profile and cluster numbers.
#include <fmt/format.h>

#include "pd2bw/error.hpp"
#include "pd2bw/planner/simulator.hpp"

namespace pd2bw::planner {

namespace {

int64_t position_of(const Candidate& c, int64_t chunk) {
  return pipeline::chunk_position(c.schedule, c.depth, chunk);
}

// Whether the boundary between chunk `left` and `left + 1` joins two ranks (not zb-v's turn).
bool leaves_rank(const Candidate& c, int64_t left) { return position_of(c, left) != position_of(c, left + 1); }

// Chunk `chunk` (layers [begin, end)) of `c`. With v = 1 the chunk is the stage: its comm buffers are
// comm_buffer_bytes' and it holds the reserve.
SimStage chunk_input(const CostModel& model, const Candidate& c, int64_t chunk, int64_t begin, int64_t end,
                     bool recompute) {
  const auto b = static_cast<size_t>(begin), e = static_cast<size_t>(end);
  const int64_t bi = c.microbatch_index, chunks = c.depth * c.chunks, position = position_of(c, chunk);
  const StaticFactors& f = model.static_factors(c.schedule);
  SimStage st;
  st.layer_begin = begin;
  st.layer_end = end;
  st.recompute = recompute;
  const double fwd = model.fwd_prefix(bi)[e] - model.fwd_prefix(bi)[b];
  st.forward_ms = fwd;
  st.backward_ms = (model.compute_prefix(bi)[e] - model.compute_prefix(bi)[b]) - fwd;  // as the cost model has it
  st.recompute_ms = recompute ? model.redo_prefix(bi)[e] - model.redo_prefix(bi)[b] : 0.0;
  const bool split = pipeline::splits_backward(c.schedule);
  if (split) st.weight_ms = model.weight_prefix(bi)[e] - model.weight_prefix(bi)[b];
  const int64_t params = model.param_prefix()[e] - model.param_prefix()[b];
  st.update_ms = model.update_prefix()[e] - model.update_prefix()[b];
  if (c.width > 1)
    st.allreduce_ms = model.allreduce_ms(f.grads(params), c.width, model.allreduce_level(c, position));
  const int64_t in_bytes = model.input_bytes(bi)[b];
  const int64_t out_bytes = model.output_bytes(bi)[e - 1];
  // The terms below read neither the in-flight count nor the stage's place: the replay counts those.
  pipeline::StageMemoryInput mem;
  mem.param_bytes = params;
  mem.stash_bytes = model.stash_prefix(bi)[e] - model.stash_prefix(bi)[b];
  mem.input_bytes = in_bytes;
  mem.comm_bytes = saturating_add(chunk > 0 && leaves_rank(c, chunk - 1) ? saturating_mul(2, in_bytes) : 0,
                                  chunk + 1 < chunks && leaves_rank(c, chunk) ? saturating_mul(2, out_bytes) : 0);
  mem.recompute = recompute;
  // The reserve is the rank's, once: with its first chunk (the loop and the V both put chunk `position`
  // first on position `position`).
  mem.reserve_bytes = chunk == position ? model.constraints().reserve_bytes : 0;
  mem.split_backward = split;
  mem.weight_grad_bytes = model.weight_stash_prefix(bi)[e] - model.weight_stash_prefix(bi)[b];
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
  const int64_t chunks = c.depth * c.chunks;
  if (static_cast<int64_t>(bounds.size()) != chunks + 1 || static_cast<int64_t>(recompute.size()) != chunks)
    throw Error(fmt::format("make_sim_input: {} bounds and {} recompute flags for {} chunks ({} stages x {})",
                            bounds.size(), recompute.size(), chunks, c.depth, c.chunks));
  SimInput in;
  in.spec = {c.schedule, c.depth, c.microbatches, steps, c.width, c.chunks};
  in.ranks = pipeline::rank_table(c.placement, c.depth, c.width);
  for (int64_t k = 0; k < chunks; ++k)
    in.stages.push_back(chunk_input(model, c, k, bounds[static_cast<size_t>(k)], bounds[static_cast<size_t>(k + 1)],
                                    recompute[static_cast<size_t>(k)]));
  const int64_t bi = c.microbatch_index;
  in.boundary_ms.assign(static_cast<size_t>(c.width), {});
  for (int64_t r = 0; r < c.width; ++r)
    for (int64_t k = 0; k + 1 < chunks; ++k) {
      double ms = 0.0;  // a hand-over inside one rank
      if (leaves_rank(c, k)) {
        const int64_t level = model.level_between(CostModel::rank_of(c, position_of(c, k), r),
                                                  CostModel::rank_of(c, position_of(c, k + 1), r));
        const int64_t bytes = model.output_bytes(bi)[static_cast<size_t>(bounds[static_cast<size_t>(k + 1)] - 1)];
        ms = model.p2p_ms(bytes, level);
      }
      in.boundary_ms[static_cast<size_t>(r)].push_back(ms);
    }
  return in;
}

}  // namespace pd2bw::planner

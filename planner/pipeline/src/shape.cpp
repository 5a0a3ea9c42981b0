// The pipeline shape's rules: placement, in-flight counts, the schedule's factors and the one validation.
#include "pd2bw/pipeline/shape.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "pd2bw/error.hpp"
#include "pd2bw/pipeline/stash.hpp"

namespace pd2bw::pipeline {

std::vector<std::vector<int64_t>> rank_table(Placement p, int64_t depth, int64_t width) {
  if (depth < 1 || width < 1)
    throw UsageError(fmt::format("a rank table needs d, w >= 1 (got d={} w={})", depth, width));
  std::vector<std::vector<int64_t>> table(static_cast<size_t>(depth));
  for (int64_t i = 0; i < depth; ++i)
    for (int64_t r = 0; r < width; ++r) table[static_cast<size_t>(i)].push_back(placement_rank(p, depth, width, i, r));
  return table;
}

int64_t chunked_in_flight(Schedule s, int64_t depth, int64_t microbatches, int64_t stage, int64_t chunks) {
  const StashWalk walk = stash_walk({s, depth, microbatches, 1, 1, chunks}, stage, false);
  int64_t most = 0;
  for (const auto& moment : walk.moments) {
    int64_t held = 0;
    for (const auto& c : moment) held += c.activations;
    most = std::max(most, held);
  }
  return most;
}

int64_t deferred_weight_grads(Schedule s, int64_t microbatches, int64_t stage) {
  if (s == Schedule::zb_h1) return std::min(stage, microbatches - 1);
  if (s == Schedule::zb_h2) return std::min(2 * stage, microbatches - 1);
  return 0;
}

int64_t pipeline_factor(Schedule s, int64_t depth, int64_t microbatches) {
  return s == Schedule::two_bw ? microbatches : microbatches + depth - 1;
}

int64_t weight_versions(Schedule s) { return s == Schedule::two_bw ? 2 : 1; }

int64_t optimizer_moments(Optimizer o) { return o == Optimizer::adamw ? 2 : 1; }

namespace {

void check_bounds(const PipelineShape& p, int64_t num_layers) {
  const int64_t n = p.chunks_total();
  if (static_cast<int64_t>(p.bounds.size()) != n + 1 || p.bounds.front() != 0 || p.bounds.back() != num_layers)
    throw UsageError(fmt::format("stage bounds must run from 0 to the model's {} layers in {} stages", num_layers, n));
  for (int64_t i = 0; i < n; ++i)
    if (p.bounds[static_cast<size_t>(i)] >= p.bounds[static_cast<size_t>(i + 1)])
      throw UsageError(fmt::format("stage {} holds no layers", i));
}

void check_ranks(const PipelineShape& p) {
  if (static_cast<int64_t>(p.ranks.size()) != p.depth) throw UsageError("the rank table needs one row per stage");
  std::set<int64_t> seen;
  for (const auto& row : p.ranks) {
    if (static_cast<int64_t>(row.size()) != p.width) throw UsageError("the rank table needs one rank per replica");
    for (int64_t r : row)
      if (r < 0 || r >= p.ranks_total() || !seen.insert(r).second)
        throw UsageError(fmt::format("rank {} is out of range or repeated in the rank table", r));
  }
}

}  // namespace

std::vector<std::pair<int64_t, int64_t>> PipelineShape::places() const {
  const auto n = static_cast<size_t>(std::max<int64_t>(ranks_total(), 0));
  std::vector<std::pair<int64_t, int64_t>> out(n, {-1, -1});
  for (size_t p = 0; p < ranks.size(); ++p)
    for (size_t k = 0; k < ranks[p].size(); ++k)
      if (const int64_t r = ranks[p][k]; r >= 0 && static_cast<size_t>(r) < n)
        out[static_cast<size_t>(r)] = {static_cast<int64_t>(p), static_cast<int64_t>(k)};
  return out;
}

void PipelineShape::validate(int64_t num_layers) const {
  if (depth < 1 || width < 1 || microbatches < 1 || microbatch_size < 1)
    throw UsageError(fmt::format("pipeline needs d, w, m, b >= 1 (got d={} w={} m={} b={})", depth, width,
                                 microbatches, microbatch_size));
  if (!chunks_allowed(schedule, chunks))
    throw UsageError(fmt::format("{} cannot hold {} chunks per rank", to_string(schedule), chunks),
                     "interleaved takes 2 or more, zb-v exactly 2, the other schedules 1");
  if (microbatches < min_microbatches(schedule, depth))
    throw UsageError(fmt::format("{} needs m >= d (got m={} d={})", to_string(schedule), microbatches, depth),
                     "raise the microbatches per step or use fewer stages");
  if (microbatches % microbatch_multiple(schedule, depth) != 0)
    throw UsageError(fmt::format("{} needs m to be a multiple of d (got m={} d={})", to_string(schedule),
                                 microbatches, depth),
                     "Megatron's rule: the microbatches go round the ranks in groups of d");
  check_bounds(*this, num_layers);
  if (static_cast<int64_t>(recompute.size()) != chunks_total())
    throw UsageError("one recompute flag per stage is needed");
  check_ranks(*this);
}

PipelineShape shape_of(const schemas::Plan& plan) {
  PipelineShape s;
  s.schedule = plan.schedule;
  s.depth = plan.depth;
  s.width = plan.width;
  s.microbatches = plan.microbatches_per_step;
  s.microbatch_size = plan.microbatch_size;
  s.chunks = plan.chunks_per_rank;
  for (const auto& st : plan.stages) {
    s.bounds.push_back(st.layer_begin);
    s.recompute.push_back(st.recompute);
    if (static_cast<int64_t>(s.ranks.size()) < s.depth) s.ranks.push_back(st.ranks);  // chunks 0..d-1: positions 0..d-1
  }
  if (!plan.stages.empty()) s.bounds.push_back(plan.stages.back().layer_end);
  return s;
}

}  // namespace pd2bw::pipeline

// The shape of a pipeline and its rules, stated once: schedule, microbatch size and count, depth, width,
// stage bounds, recompute per stage and the rank table, with the placement rule (grid -> rank table),
// the microbatches a schedule needs, the microbatches a stage keeps in flight and the one validation.
// The planner (candidates, simulator input), the executor (PipelineConfig) and plan reading share it.
#pragma once

#include <algorithm>
#include <cstdint>
#include <utility>
#include <vector>

#include "pd2bw/schemas/plan.hpp"

namespace pd2bw::pipeline {

using schemas::Optimizer;
using schemas::Placement;
using schemas::Schedule;

// The placement rule (schemas::placement_rank) and the 2bw microbatch rule (schemas::min_microbatches)
// live beside their enums in the schemas, whose plan checker cannot see this library.
using schemas::chunk_position;
using schemas::chunks_allowed;
using schemas::microbatch_multiple;
using schemas::min_microbatches;
using schemas::placement_rank;
using schemas::splits_backward;

// The (depth, width) rank table of placement `p`: table[stage][replica] = placement_rank(...).
// Requires depth, width >= 1 (throws UsageError otherwise).
std::vector<std::vector<int64_t>> rank_table(Placement p, int64_t depth, int64_t width);

// Microbatches whose activations stage `stage` (0-based) holds at once: min(d - stage, m) for 2bw, flush
// and zb-h1 (1F1B; for zb-h1 those between forward and B), min(2 (d - stage) - 1, m) for zb-h2, m for
// gpipe (all forwards first). The chunked schedules (interleaved, zb-v) hold different counts per chunk
// over a step: their memory comes from the op walk (pipeline/stash.hpp); for them this is the most a
// rank holds over all its chunks together.
// Inline for the one-chunk schedules (the planner asks per stage in its inner loops).
int64_t chunked_in_flight(Schedule s, int64_t depth, int64_t microbatches, int64_t stage, int64_t chunks);
inline int64_t in_flight(Schedule s, int64_t depth, int64_t microbatches, int64_t stage, int64_t chunks = 1) {
  switch (s) {
    case Schedule::gpipe:
      return microbatches;
    case Schedule::zb_h2:
      return std::min(2 * (depth - stage) - 1, microbatches);
    case Schedule::interleaved:
    case Schedule::zb_v:
      return chunked_in_flight(s, depth, microbatches, stage, chunks);
    default:
      return std::min(depth - stage, microbatches);
  }
}

// Microbatches whose W (the weight-gradient half of the backward) stage `stage` has deferred while it
// holds in_flight(...) activations: min(stage, m - 1) for zb-h1 (whose W's trail their B's by `stage`,
// or wait for the step's last B when m <= stage; a moment later, after the next B, one more W waits and
// one activation fewer), min(2 stage, m - 1) for zb-h2, 0 for the schedules whose backward is one op
// (and for zb-v, whose W's follow their B's but in the drain: see pipeline/stash.hpp).
int64_t deferred_weight_grads(Schedule s, int64_t microbatches, int64_t stage);

// Microbatch slots one step takes on the bottleneck stage: m for 2bw (no flush), m + d - 1 for the
// synchronous schedules (the fill and drain pass once through every stage; the zero-bubble ones and
// interleaved fill part of it, which the replay measures).
int64_t pipeline_factor(Schedule s, int64_t depth, int64_t microbatches);

// Weight versions a stage holds: 2 for 2bw (the one in use and the newest), 1 for flush, gpipe and zb-h1.
int64_t weight_versions(Schedule s);

// Optimizer state per parameter, in state-dtype elements: 2 for AdamW (two moments), 1 for SGD (momentum).
int64_t optimizer_moments(Optimizer o);

// One pipeline: what the planner chose and the executor runs. Field names are the executor's.
struct PipelineShape {
  Schedule schedule = Schedule::two_bw;
  int64_t depth = 1;            // d, stages
  int64_t width = 1;            // w, replicas of each stage
  int64_t microbatches = 1;     // m, per replica per step
  int64_t microbatch_size = 1;  // b, samples (sequences)
  int64_t chunks = 1;           // v, model chunks per rank (interleaved: >= 2; zb-v: 2; otherwise 1)
  std::vector<int64_t> bounds;              // d v + 1 layer bounds: chunk c holds [bounds[c], bounds[c+1])
  std::vector<bool> recompute;              // per chunk
  std::vector<std::vector<int64_t>> ranks;  // (d, w): rank of (position, replica); chunk c runs on
                                            // position chunk_position(schedule, d, c)

  int64_t ranks_total() const { return depth * width; }
  int64_t chunks_total() const { return depth * chunks; }  // model chunks, d v (= stages when v = 1)
  int64_t position_of(int64_t chunk) const { return chunk_position(schedule, depth, chunk); }
  // The rank table inverted: places()[r] = {position, replica} of rank r, for r in 0 .. d w - 1
  // ({-1, -1} for a rank the table leaves out, which validate() refuses). O(d w).
  std::vector<std::pair<int64_t, int64_t>> places() const;
  // Microbatches in flight at `stage` under this shape's schedule (see pipeline::in_flight).
  int64_t in_flight(int64_t stage) const {
    return pipeline::in_flight(schedule, depth, microbatches, stage, chunks);
  }
  // Throws UsageError naming the first inconsistency, in this order: d, w, m, b < 1; chunks the schedule
  // does not allow; m below or not a multiple of what the schedule needs (2bw: m >= d; interleaved: m a
  // multiple of d); bounds not d v + 1 entries from 0 to `num_layers`; an empty chunk; not one recompute
  // flag per chunk; a rank table that is not (d, w) or repeats a rank or leaves 0..d*w-1.
  void validate(int64_t num_layers) const;
};

// The shape a plan describes (its schedule, b, m, d, w and stages' bounds, recompute flags and ranks).
// The plan must be consistent (schemas::parse_plan checks that); the result is not validated here.
PipelineShape shape_of(const schemas::Plan& plan);

}  // namespace pd2bw::pipeline

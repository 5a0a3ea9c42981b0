// The shape of a pipeline and its rules, stated once: schedule, microbatch size and count, depth, width,
// stage bounds, recompute per stage and the rank table, with the placement rule (grid -> rank table),
// the microbatches a schedule needs, the microbatches a stage keeps in flight and the one validation.
// The planner (candidates, simulator input), the executor (PipelineConfig) and plan reading share it.
#pragma once

#include <cstdint>
#include <vector>

#include "pd2bw/schemas/plan.hpp"

namespace pd2bw::pipeline {

using schemas::Optimizer;
using schemas::Placement;
using schemas::Schedule;

// The placement rule (schemas::placement_rank) and the 2bw microbatch rule (schemas::min_microbatches)
// live beside their enums in the schemas, whose plan checker cannot see this library.
using schemas::min_microbatches;
using schemas::placement_rank;

// The (depth, width) rank table of placement `p`: table[stage][replica] = placement_rank(...).
// Requires depth, width >= 1 (throws UsageError otherwise).
std::vector<std::vector<int64_t>> rank_table(Placement p, int64_t depth, int64_t width);

// Microbatches whose activations stage `stage` (0-based) holds at once: min(d - stage, m) for 2bw, flush
// and zb-h1 (1F1B; for zb-h1 those between forward and B), m for gpipe (all forwards first).
int64_t in_flight(Schedule s, int64_t depth, int64_t microbatches, int64_t stage);

// Microbatches whose W (the weight-gradient half of the backward) stage `stage` has deferred while it
// holds in_flight(...) activations: min(stage, m - 1) for zb-h1 (whose W's trail their B's by `stage`,
// or wait for the step's last B when m <= stage; a moment later, after the next B, one more W waits and
// one activation fewer), 0 for the schedules whose backward is one op.
int64_t deferred_weight_grads(Schedule s, int64_t microbatches, int64_t stage);

// Microbatch slots one step takes on the bottleneck stage: m for 2bw (no flush), m + d - 1 for flush,
// gpipe and zb-h1 (the fill and drain pass once through every stage).
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
  std::vector<int64_t> bounds;              // d + 1 layer bounds: stage i holds [bounds[i], bounds[i+1])
  std::vector<bool> recompute;              // per stage
  std::vector<std::vector<int64_t>> ranks;  // (d, w): rank of (stage, replica)

  int64_t ranks_total() const { return depth * width; }
  // Microbatches in flight at `stage` under this shape's schedule (see pipeline::in_flight).
  int64_t in_flight(int64_t stage) const { return pipeline::in_flight(schedule, depth, microbatches, stage); }
  // Throws UsageError naming the first inconsistency, in this order: d, w, m, b < 1; m below what the
  // schedule needs (2bw: m >= d); bounds not d + 1 entries from 0 to `num_layers`; an empty stage; not
  // one recompute flag per stage; a rank table that is not (d, w) or repeats a rank or leaves 0..d*w-1.
  void validate(int64_t num_layers) const;
};

// The shape a plan describes (its schedule, b, m, d, w and stages' bounds, recompute flags and ranks).
// The plan must be consistent (schemas::parse_plan checks that); the result is not validated here.
PipelineShape shape_of(const schemas::Plan& plan);

}  // namespace pd2bw::pipeline

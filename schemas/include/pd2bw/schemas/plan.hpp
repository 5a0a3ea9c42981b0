// The plan format ("pd2bw.plan"): what `pd2bw plan` chose and what it predicts. The contract between
// `pd2bw plan` and `pd2bw train` / `pd2bw simulate`.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::schemas {

// 2bw: PipeDream-2BW (1F1B, two weight versions, no flush). flush: PipeDream-Flush (1F1B, one version,
// drain per step). gpipe: all forwards then all backwards, one version. zb_h1: ZB-H1 (Qi et al., "Zero
// Bubble Pipeline Parallelism", ICLR 2024): Flush's 1F1B order and math with each backward split into
// its input-gradient half B and its weight-gradient half W, the W's deferred into the drain's bubble.
// interleaved: Megatron's interleaved 1F1B (Narayanan et al., SC 2021): each rank holds v >= 2 model
// chunks in a loop (rank r holds chunks r, r + d, ...), Flush's math. zb_h2: ZB-H2 (the same paper as
// ZB-H1): 2 (d - i) - 1 warm-up forwards on stage i and its W's deferred by 2 i microbatches, no bubble
// when F = B = W and m >= 2 d, at up to twice 1F1B's activations. zb_v: ZB-V (the same paper): two chunks
// per rank in a V (rank r holds chunks r and 2 d - 1 - r), split backwards, Flush's math.
enum class Schedule { two_bw, flush, gpipe, zb_h1, interleaved, zb_h2, zb_v };
std::string_view to_string(Schedule s);  // "2bw", "flush", "gpipe", "zb-h1", "interleaved", "zb-h2", "zb-v"
Schedule parse_schedule(std::string_view s, std::string_view pointer);  // throws SchemaError
// Fewest microbatches per step schedule `s` allows on `depth` stages: depth for 2bw (with fewer, more than
// two weight versions would be live) and for interleaved, 1 otherwise (zb-h1 with m < d defers fewer W's,
// as many as there are microbatches). The one statement of the rule; every check reads it.
inline int64_t min_microbatches(Schedule s, int64_t depth) {
  return s == Schedule::two_bw || s == Schedule::interleaved ? depth : 1;
}
// What m must be a multiple of: depth for interleaved (Megatron's rule: its microbatches go round the
// ranks in groups of d), 1 otherwise.
inline int64_t microbatch_multiple(Schedule s, int64_t depth) { return s == Schedule::interleaved ? depth : 1; }
// Whether schedule `s` splits the backward into B and W (needs the profile's halves).
inline bool splits_backward(Schedule s) {
  return s == Schedule::zb_h1 || s == Schedule::zb_h2 || s == Schedule::zb_v;
}
// Whether every step ends with a flush (all schedules but 2bw).
inline bool synchronous(Schedule s) { return s != Schedule::two_bw; }
// Model chunks per rank schedule `s` allows: interleaved any v >= 2, zb-v exactly 2, the others 1.
inline bool chunks_allowed(Schedule s, int64_t chunks) {
  if (s == Schedule::interleaved) return chunks >= 2;
  return chunks == (s == Schedule::zb_v ? 2 : 1);
}
// The pipeline position (rank within one replica, 0 .. depth - 1) that holds model chunk `chunk`
// (0 .. depth x v - 1): the V for zb-v (chunk c < d on c, else on 2 d - 1 - c), the loop otherwise
// (c mod d; with v = 1 that is the chunk itself).
inline int64_t chunk_position(Schedule s, int64_t depth, int64_t chunk) {
  if (s == Schedule::zb_v) return chunk < depth ? chunk : 2 * depth - 1 - chunk;
  return chunk % depth;
}

// How the width x depth grid of ranks is laid on the topology. replicas_inner: the replicas of a stage
// get consecutive ranks (rank = stage * width + replica); stages_inner: the stages of a replica get
// consecutive ranks (rank = replica * depth + stage).
enum class Placement { replicas_inner, stages_inner };
std::string_view to_string(Placement p);       // "replicas-inner", "stages-inner"
// The rank of (stage, replica) on a depth x width grid under placement `p` (the rule above, stated once).
inline int64_t placement_rank(Placement p, int64_t depth, int64_t width, int64_t stage, int64_t replica) {
  return p == Placement::replicas_inner ? stage * width + replica : replica * depth + stage;
}
Placement parse_placement(std::string_view s, std::string_view pointer);

// What an alternative's step_ms is when not a replayed step ("lower", "upper"; absent: none).
enum class StepBound { none, lower, upper };
std::string_view to_string(StepBound b);
// Throws SchemaError naming `pointer` unless `s` is "lower" or "upper".
StepBound parse_step_bound(std::string_view s, std::string_view pointer);

enum class Optimizer { adamw, sgd };            // sgd means SGD with momentum
std::string_view to_string(Optimizer o);       // "adamw", "sgd"
Optimizer parse_optimizer(std::string_view s, std::string_view pointer);

// Predicted peak memory of one device of a stage, by term (bytes). In a chunked plan (chunks_per_rank
// v > 1) each chunk's breakdown holds its share of its rank's memory: the reserve is counted once per
// rank, on the rank's first chunk (chunk p of position p; the later chunks carry reserve_bytes 0), and
// the rank's total, the sum of its chunks' total_bytes, must be within limit_bytes (parse_plan checks it).
struct MemoryBreakdown {
  int64_t weights_bytes = 0;    // weight versions in the compute dtype (2 for 2bw, 1 otherwise)
  int64_t master_bytes = 0;     // fp32 master weights (0 when the compute dtype is fp32)
  int64_t grads_bytes = 0;      // fp32 gradient accumulation buffer
  int64_t optimizer_bytes = 0;  // optimizer state (AdamW: 2 fp32 moments; SGD: 1 fp32 momentum)
  int64_t stash_bytes = 0;      // stashed activations of the in-flight microbatches
  int64_t comm_bytes = 0;       // send/receive buffers for boundary activations and gradients
  int64_t reserve_bytes = 0;    // runtime overhead reserve (flag)
  int64_t total_bytes = 0;      // sum of the above
  int64_t limit_bytes = 0;      // device memory
  std::string dominant;         // name of the largest term, e.g. "stash"
};

// One model chunk: a pipeline stage when chunks_per_rank is 1.
struct StagePlan {
  int64_t index = 0;        // the chunk's number, its place in Plan::stages
  int64_t layer_begin = 0;  // first layer (index into the profile's layers)
  int64_t layer_end = 0;    // one past the last layer
  bool recompute = false;   // activation recomputation: stash only the stage input, redo forward in backward
                            // (equal for the chunks of one position: a rank recomputes all or none)
  std::vector<int64_t> ranks;  // one per replica, replica order: the ranks of the chunk's position
  int64_t in_flight = 0;       // microbatches whose activations are stashed at once
  double compute_ms = 0;       // fwd + bwd (+ recompute fwd) per microbatch
  double p2p_ms = 0;           // boundary activation and gradient transfers per microbatch
  double allreduce_ms = 0;     // gradient allreduce over the replicas, once per step
  double step_ms = 0;          // this stage's busy time per step: m * (compute + p2p) + allreduce + the
                               // profiled optimizer step of its layers
  MemoryBreakdown memory;
};

struct RankEntry {
  int64_t rank = 0;
  int64_t stage = 0;         // the pipeline position (0 .. depth - 1) it runs, whose chunks it holds all of
  int64_t replica = 0;
  int64_t node = 0;          // index of the level-0 group (node) the rank lives in
  int64_t local_device = 0;  // device index inside that node
};

struct Predictions {
  double step_ms = 0;            // time of one optimizer step (global batch)
  double samples_per_s = 0;
  double tokens_per_s = 0;
  int64_t bottleneck_stage = 0;  // stage with the largest step_ms (the busiest): an index into Plan::stages,
                                 // so a model chunk (< depth x chunks_per_rank), not a position
  double bubble_fraction = 0;    // idle share of all ranks' time while even the busiest stage idles (the
                                 // schedule's fill and drain, waits it cannot hide)
  double imbalance_fraction = 0;  // idle share of all ranks' time on stages less busy than the busiest
  std::string binding_memory;    // dominant memory term of the stage closest to its limit
};

// A candidate that lost to the chosen plan, and why.
struct Alternative {
  Schedule schedule = Schedule::two_bw;
  int64_t microbatch_size = 0;
  int64_t microbatches_per_step = 0;
  int64_t depth = 0;
  int64_t width = 0;
  Placement placement = Placement::replicas_inner;
  double step_ms = 0;
  double samples_per_s = 0;
  std::string why;
  int64_t chunks_per_rank = 1;  // its v (as Plan::chunks_per_rank); last, so older initialisers still compile
  // What step_ms is when the alternative was not replayed: none (a replayed step), a lower bound on its
  // replay (its objective; it may be below the plan's step: the planner left it out of its replays and
  // counts it in the proven gap) or an upper bound on its schedule's best plan (a representative).
  StepBound step_bound = StepBound::none;
};

struct Plan {
  Provenance provenance;
  std::string profile_sha256;  // of the profile file's bytes
  ModelDesc model;             // copied from the profile
  int64_t num_layers = 0;      // layers in the profile
  Cluster cluster;             // the cluster planned for
  Schedule schedule = Schedule::two_bw;
  Optimizer optimizer = Optimizer::adamw;
  Placement placement = Placement::replicas_inner;
  int64_t microbatch_size = 0;        // b, samples
  int64_t microbatches_per_step = 0;  // m, per replica per step
  int64_t depth = 0;                  // d, stages (ranks of one replica's pipeline)
  int64_t width = 0;                  // w, replicas of each stage
  int64_t chunks_per_rank = 1;        // v, model chunks per rank (interleaved >= 2, zb-v 2, else 1)
  int64_t global_batch = 0;           // b * m * w samples per step
  int64_t reserve_bytes = 0;
  std::vector<StagePlan> stages;      // d v entries, one per model chunk in model order; chunk c runs on
                                      // position chunk_position(schedule, d, c), whose ranks it lists
  std::vector<RankEntry> ranks;       // w * d entries, by rank
  Predictions predictions;
  std::vector<Alternative> alternatives;  // best losers, best first
};

// Parses and checks a plan, including its internal consistency: chunks_per_rank allowed by the schedule
// (chunks_allowed; absent reads as 1) and at most num_layers; d v contiguous stages covering all layers;
// w * d ranks; global batch = b * m * w; m >= min_microbatches and a multiple of microbatch_multiple; each
// chunk's ranks those of its position (placement rule, rank table); with v > 1 the chunks of a position
// share one recompute flag and one limit_bytes, the reserve sits on the position's first chunk only, and
// the sum of their total_bytes is within the limit; bottleneck_stage < d v; each alternative's
// chunks_per_rank allowed by its schedule. (A stage's own total against its limit is `pd2bw validate`'s
// to report: planner/plan_audit.) Throws SchemaError with the JSON pointer of the first problem.
Plan parse_plan(std::string_view json_text);
// The plan's text: "chunks_per_rank" (the plan's, an alternative's) only when > 1, so plans of one chunk
// per rank are written as before; an alternative's "step_bound" only when it is a bound. schema_version
// 1.6.0 when an alternative's step is a bound, else 1.3.0 when the plan or an alternative uses
// interleaved, zb-h2, zb-v or v > 1, else 1.2.0 when one uses zb-h1, else 1.0.0.
std::string dump_plan(const Plan& plan);

}  // namespace pd2bw::schemas

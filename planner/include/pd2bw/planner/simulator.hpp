// The event-driven pipeline simulator: replays every rank's op list from the schedule generator with
// durations from the profile, honouring the dependencies between ranks (activations, gradients,
// allreduce), and reports step times, busy and bubble fractions, memory over time and live weight
// versions. Pure computation; the trace and picture writers turn a SimResult into text.
//
// Chunks (interleaved, zb-v: v = spec.chunks > 1 model chunks per rank): the input has one SimStage per
// model chunk in model order, chunk c on position schemas::chunk_position(kind, d, c); the replay has one
// lane per rank (position, replica) walking the position's op stream, each op timed and its memory
// charged by its own chunk (Op::chunk). The results (SimResult::stages) are per rank position: what a
// plan calls a stage when v = 1. With v = 1 a chunk is a stage and everything reads as before.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/schedule.hpp"

namespace pd2bw::planner {

// One model chunk's durations (ms) and memory terms (bytes), identical on all its replicas (a stage when
// v = 1). A rank's memory is the sum of its chunks' terms: what a rank holds once (the reserve) belongs to
// one of its chunks only, and comm buffers only to boundaries that leave the rank (make_sim_input).
struct SimStage {
  int64_t layer_begin = 0, layer_end = 0;
  bool recompute = false;
  double forward_ms = 0;    // per microbatch
  double backward_ms = 0;   // per microbatch
  double weight_ms = 0;     // per microbatch, split backward (zb-h1, zb-h2, zb-v): the W part of
                            // backward_ms (its B takes the rest)
  double recompute_ms = 0;  // per microbatch (the forward again), used only when recompute
  double allreduce_ms = 0;  // per step (one allreduce per chunk), 0 for one replica
  double update_ms = 0;     // per step (the rank's one update takes the sum over its chunks)
  int64_t weights_bytes = 0;        // one weight version
  int64_t fixed_bytes = 0;          // master + grads + optimizer + comm buffers + reserve
  int64_t stash_bytes = 0;          // kept per in-flight microbatch (its input when recomputing)
  int64_t recompute_stash_bytes = 0;  // one microbatch's full stash, held from Recompute to Backward's end
  int64_t weight_grad_bytes = 0;      // split backward: what one microbatch keeps from the end of its B to its W's
  int64_t limit_bytes = 0;          // device memory
};

struct SimInput {
  ScheduleSpec spec;             // kind, d, m, steps, w, v (chunks)
  std::vector<SimStage> stages;  // d v entries, one per model chunk in model order. The chunks of one
                                 // position must agree on `recompute` (a rank recomputes all or none).
  // boundary_ms[r][c]: moving one activation (or its gradient) between chunk c and c + 1 of replica r.
  // Between two chunks on the same rank (zb-v's turn, c = d - 1) the hand-over is local and costs
  // nothing whatever the entry says (make_sim_input writes 0 there).
  std::vector<std::vector<double>> boundary_ms;  // (w, d v - 1)
  std::vector<std::vector<int64_t>> ranks;       // (d, w): global rank of (position, replica)
};

// Builds the simulator's input for `c` split at `bounds` (d v + 1 entries, v = c.chunks) with recompute
// per chunk (d v flags), from the same profile and cluster numbers the cost model uses; each replica's
// boundary crosses the level between the ranks of its two chunks (0 when both are on one rank). A split
// backward's W (zb-h1, zb-h2, zb-v) is priced by CostModel::weight_prefix. Memory per chunk: its
// parameters' terms, its stash terms, comm buffers for its boundaries to other ranks, and the reserve
// with the rank's first chunk only. Throws Error for the wrong number of bounds or flags.
SimInput make_sim_input(const CostModel& model, const Candidate& c, const std::vector<int64_t>& bounds,
                        const std::vector<bool>& recompute, int64_t steps);

struct SimEvent {
  int64_t stage = 0, replica = 0;  // the rank's position and replica
  int64_t chunk = 0;               // the model chunk (Op::chunk; -1 for the update of all of them)
  OpKind kind = OpKind::forward;
  int64_t step = 0, microbatch = -1, version = 0;
  double start_ms = 0, end_ms = 0;
};

// Where one rank position's time goes in the measured step window (ms), and its memory: over all of its
// chunks (a stage when v = 1).
struct SimStageResult {
  double compute_ms = 0, p2p_ms = 0, allreduce_ms = 0, update_ms = 0, idle_ms = 0;
  double busy_fraction = 0;   // (window - idle) / window, replica average
  int64_t peak_bytes = 0;     // largest memory of any replica over the whole run
  int64_t peak_in_flight = 0;  // most microbatches stashed at once, summed over the rank's chunks
  int64_t max_live_versions = 0;
  // Memory of replica 0 over time: (time ms, bytes from then on), starting at 0 ms; only with keep_events.
  std::vector<std::pair<double, int64_t>> memory_curve;
};

struct SimResult {
  std::vector<double> step_end_ms;  // when the last rank finished each step's update
  double first_step_ms = 0;         // step_end_ms[0]
  double step_ms = 0;               // the measured step: see simulate()
  double previous_step_ms = 0;      // the same for the step before it
  double last_step_ms = 0;          // the measured step's own time: step_ms, but for 2bw, whose step_ms is
                                    // the larger of it and previous_step_ms (its ops reach two steps back)
  bool steady = false;              // step_ms is the steady step within kSteadyTolerance: see simulate()
  double window_begin_ms = 0, window_end_ms = 0;  // the measured step: between its update and the one before
  // Per stage, the breakdown below is the time of the measured step's own ops (in steady state each
  // step's ops take the same time on a rank); the rest of the step time is idle. The idle share of all
  // ranks' time splits in two: every stage idles while even the busiest one does (the schedule's fill and
  // drain, and waits it cannot hide), and the other stages idle for as long as they are less busy than
  // it (unequal stages).
  double idle_fraction = 0;         // idle share of all ranks' time in that window
  double bubble_fraction = 0;       // (window - busiest stage's busy time) / window
  double imbalance_fraction = 0;    // idle_fraction - bubble_fraction
  double total_ms = 0;              // end of the last op
  std::vector<SimStageResult> stages;  // d entries, one per rank position
  std::vector<SimEvent> events;     // every op of every rank (only with keep_events)
  int64_t simulated_ranks = 0;      // lanes actually replayed (replicas with identical links share one)
  int64_t simulated_ops = 0;        // ops replayed over all lanes (the work the replay took)
};

// The relative tolerance of the steady test (simulate()).
inline constexpr double kSteadyTolerance = 1e-6;
// simulate_steady replays at most this many steps, and doubles no replay past this many ops.
inline constexpr int64_t kMaxSteadySteps = 64;
inline constexpr int64_t kMaxSteadyOps = int64_t{1} << 26;

// Replays the schedule for input.spec.steps steps. The measured step is the last for flush and gpipe and,
// for 2bw, the one before it (the last 2bw step also drains the pipe). A step's time is the longest time,
// over the ops of every rank in it, from an op's end to the end of its counterpart one step later: the
// replay is a max-plus linear system from step to step, so no later step is longer (for 2bw, whose
// ranks' steps overlap, the step before the measured one counts too). `steady`: the measured step and
// the one before it agree within kSteadyTolerance. The window below is the measured step's: between the
// last update of the step before and its own.
// keep_events records every op of every rank; otherwise replicas whose links are identical are replayed
// once. Communication holds both ends (no overlap with compute): a send occupies the sender for the
// transfer time; a receive occupies the receiver for the same time from when the sender started (or
// from when the receiver gets there, if later); a hand-over between two chunks of one rank costs nothing.
// An op's duration is its chunk's (an update: the sum of the rank's chunks' update_ms); the activation
// of chunk c's forward comes from chunk c - 1, the gradient of its backward (or B) from chunk c + 1.
// Throws Error if the op lists deadlock or the input is malformed.
// With `measured_only` (and no events) each rank stops after its update of the measured step: the search
// needs only the step time, and nothing of the measured step depends on what comes later (step_end_ms
// after the measured step are then 0).
SimResult simulate(const SimInput& input, bool keep_events = false, bool measured_only = false);

// simulate() with input.spec.steps raised to default_sim_steps and then doubled until the replay is steady
// or kMaxSteadySteps (or kMaxSteadyOps) are reached; then `steady` is false and the last measured step,
// an upper bound on the steady one, stands. Predictions and `pd2bw simulate` use it.
// With `measured_only` and no events (the search's replays), a schedule other than 2bw first replays a
// single step, and where that step proves the steady period (no later step takes longer, and a chain of
// one rank's dependencies that every step repeats takes that long) returns that period as the steady step,
// with the single step's busy times and memory (every step has the same ops), step_end_ms of that one
// step, and its window ending there and as long as the period; otherwise the above, whose simulated_ops
// then include the single step's.
SimResult simulate_steady(SimInput input, bool keep_events = false, bool measured_only = false);

// About how many ops simulate_steady replays for `input` when it is steady at the first try: distinct
// replicas x positions x steps x ops per step (all chunks' ops). Cheap (no replay); for deciding what is
// worth replaying. (A measured-only replay that one step proves periodic takes 1 / steps of it.)
int64_t estimated_replay_ops(const SimInput& input);
// The same for `replicas` distinct replicas of `spec` (its steps raised to default_sim_steps), without an
// input: with one replica, a lower bound on estimated_replay_ops of any split of it.
int64_t replay_ops(const ScheduleSpec& spec, int64_t replicas);

// A plan resolved against its profile: a cost model with the plan's cluster, global batch, optimizer and
// reserve, and the candidate (with its chunks per rank v), chunk bounds (d v + 1) and recompute flags
// (d v) the plan describes (plan.stages lists the d v chunks).
struct PlanModel {
  CostModel model;
  Candidate candidate;
  std::vector<int64_t> bounds;
  std::vector<bool> recompute;
};
// Throws UsageError when the plan was not made from this profile (model, layer count or microbatch size
// differ), and for a plan whose schedule splits the backward (zb-h1, zb-h2, zb-v) when the profile lacks
// the halves. The plan itself must already be consistent (parse_plan checks that).
PlanModel plan_model(const Profile& profile, const schemas::Plan& plan);

// The fewest steps whose measured step and the one before it can be compared with their predecessors,
// past the first step's start-up: 5 for 2bw (its last step drains the pipe), 3 otherwise.
int64_t default_sim_steps(Schedule s);

}  // namespace pd2bw::planner

// The schedule generator (DESIGN.md section 4): the ordered list of operations one pipeline rank (a
// position 0 .. d - 1 in one replica's pipeline, holding v model chunks) performs for a schedule kind,
// depth, chunk count, microbatch count and number of steps. Pure function, no I/O. The
// planner's costing, the simulator and the executor all read these lists, so they agree by construction.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "pd2bw/pipeline/shape.hpp"

namespace pd2bw::pipeline {

enum class OpKind {
  recv_activation,  // receive microbatch `microbatch`'s input activation from stage - 1
  forward,          // forward of `microbatch` with weight version `version`
  send_activation,  // send the forward's output to stage + 1
  recv_gradient,    // receive the gradient of this stage's output from stage + 1
  recompute,        // redo the forward of `microbatch` (same version) to rebuild its stash
  backward,         // backward of `microbatch` with weight version `version`; accumulates gradients
  backward_input,   // B of a split backward (zb-h1, zb-h2, zb-v): the input-gradient half (what
                    // send_gradient sends)
  backward_weight,  // W of a split backward: the weight-gradient half of a backward whose B ran;
                    // accumulates gradients
  send_gradient,    // send the gradient of this stage's input to stage - 1
  allreduce,        // average the step's accumulated gradients over the stage's replicas
  update,           // optimizer step: writes weight version `version` (the new one)
};
std::string_view to_string(OpKind k);  // "recv_activation", "forward", ...

struct Op {
  OpKind kind = OpKind::forward;
  int64_t step = 0;         // optimizer step the op belongs to
  int64_t microbatch = -1;  // index inside the step, 0 .. m - 1; -1 for allreduce and update
  int64_t version = 0;      // weight version read (forward, recompute, backward and its halves) or
                            // written (update); 0 for communication
  int64_t chunk = 0;        // the model chunk (0 .. d x v - 1) the op computes or moves for: activations
                            // go to chunk + 1, gradients to chunk - 1, which may be on the same rank
                            // (zb-v's turn). -1 for update, which updates all of the rank's chunks.
};

struct ScheduleSpec {
  Schedule kind = Schedule::two_bw;
  int64_t depth = 1;         // d, stages
  int64_t microbatches = 1;  // m, per step (at least min_microbatches(kind, depth): 2bw needs m >= d)
  int64_t steps = 1;         // optimizer steps to lay out
  int64_t width = 1;         // replicas per stage; an allreduce precedes each update when > 1
  int64_t chunks = 1;        // v, model chunks per rank (schemas::chunks_allowed)
};

// The weight version step `step` reads: max(step - 1, 0) for 2bw (W(j+1) = W(j) - lr * g(W(j-1))),
// `step` for flush, gpipe and zb-h1. Version v is the weights after v updates.
int64_t version_for_step(Schedule kind, int64_t step);

// The ops of position `stage` (0-based) in execution order. 2bw and flush interleave one forward and one
// backward (1F1B) after a warm-up of min(d - stage - 1, m) forwards; 2bw runs the microbatches of all
// steps as one stream and updates after every m-th backward, flush drains and updates after each step;
// gpipe runs all of a step's forwards, then all its backwards (same order). zb-h1 is flush with each
// Backward split into BackwardInput (B, in its place) and BackwardWeight (W): stage i defers its W's by i
// microbatches (after B of microbatch k comes W of k - i), so every stage holds at most d - i
// microbatches between forward and B, as 1F1B does, and the deferred W's fill the drain; the step's
// remaining W's run after its last B, before the update. zb-h2 is zb-h1 with min(2 (d - i) - 1, m)
// warm-up forwards, then each B (and the W it releases) before the next forward, so stage i holds at most
// 2 (d - i) - 1 activations, and the W's deferred by 2 i (Qi et al. 2024, section 3: the extra forwards
// fill the bubble before the first B, the deferred W's the one after the last; no bubble when F = B = W
// and m >= 2 d - 1). interleaved (v chunks, chunk j x d + i on
// stage i) runs the k-th of its m v forwards on local chunk (k mod d v) / d for microbatch
// (k / d v) d + k mod d, its backwards in the same order with the chunks reversed, after
// 2 (d - i - 1) + (v - 1) d warm-up forwards (all m v when m = d), as Megatron-LM does. zb-v (chunks i and
// 2 d - 1 - i on stage i) follows the paper's V: 2 (d - i) - 1 forwards of its first chunk, i pairs of
// forwards, d - i of the second chunk's F B W, then a steady F B W on each chunk, and a drain that runs
// the B's first and the W's after. Every synchronous schedule ends a step with each chunk's allreduce
// (width > 1) and one update. `recompute` inserts a Recompute before each Backward (or BackwardInput).
// Throws UsageError for d < 1, m < 1, steps < 1, width < 1, stage out of range, chunks the schedule does
// not allow, or m below or not a multiple of what the schedule needs (2bw, interleaved: m >= d;
// interleaved: m a multiple of d).
std::vector<Op> stage_ops(const ScheduleSpec& spec, int64_t stage, bool recompute);

// The same ops one at a time, without holding the list (a replay of many steps would otherwise keep
// steps x m x 7 ops per stage): for (StageOpStream s(spec, i, r); !s.done(); s.next()) use(s.op()).
// Throws what stage_ops throws. Copyable; stage_ops is this stream collected.
class StageOpStream {
 public:
  StageOpStream(const ScheduleSpec& spec, int64_t stage, bool recompute);
  bool done() const { return head_ == count_; }
  const Op& op() const { return buf_[static_cast<size_t>(head_)]; }  // requires !done()
  // requires !done(); inline, as a replay moves on once per op and refills once per unit
  void next() {
    if (++head_ == count_) refill();
  }

 private:
  enum class Phase { forward, backward, update, end, done };
  // One compute op of a chunked schedule's step (interleaved, zb-v): its chunk, microbatch and kind (12
  // bytes: a replay holds a step's worth per rank, for thousands of ranks).
  struct Unit {
    int32_t chunk, microbatch;
    OpKind kind;
  };
  void start_step(int64_t step);
  void refill();
  void unit();
  void chunked_unit();
  void forward(int64_t g, int64_t chunk);
  void backward(int64_t g, OpKind kind, int64_t chunk);  // kind: backward, or a split backward's B
  void weight(int64_t g, int64_t chunk);                 // a split backward's W
  void finish_step(int64_t step);
  void end_step();
  void push(OpKind kind, int64_t step, int64_t k, int64_t v, int64_t chunk);
  bool split() const;
  std::pair<int64_t, int64_t> locate(int64_t g) const;  // (step, k) of stream microbatch g

  ScheduleSpec s_;
  int64_t stage_ = 0;
  bool recompute_ = false;
  int64_t step_ = 0, first_ = 0, end_ = 0, next_f_ = 0, next_b_ = 0, next_w_ = 0, warm_left_ = 0, defer_ = 0;
  Phase phase_ = Phase::forward;
  bool finished_ = false;
  std::vector<Unit> units_;  // chunked schedules: one step's compute ops, the same every step
  std::vector<int64_t> held_;  // chunks_at(stage): each step's allreduces, without a list per step
  size_t next_unit_ = 0;
  std::vector<Op> buf_;      // the current unit's ops, the first count_ of them
  int64_t head_ = 0, count_ = 0;
};

// The model chunks position `stage` holds, in model order (v of them): see schemas::chunk_position.
std::vector<int64_t> chunks_at(Schedule kind, int64_t depth, int64_t chunks, int64_t stage);

// The spec of `shape` laid out over `steps` optimizer steps.
ScheduleSpec schedule_spec(const PipelineShape& shape, int64_t steps);

}  // namespace pd2bw::pipeline

// The private state of one rank's stage: its layers, weight versions, gradients, optimizer moments and
// the microbatches in flight. Shared by the op interpreter (stage_worker.cpp) and the stage's math
// (stage_math.cpp).
#pragma once

#include <array>
#include <map>
#include <memory>
#include <span>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pd2bw/executor/pipeline.hpp"
#include "pd2bw/pipeline/schedule.hpp"

namespace pd2bw::executor {

// One microbatch in flight on this stage; every buffer comes from the stage's arena.
struct Microbatch {
  Buffer tokens, targets;  // (B, S) i32 on the first and the last stage
  Buffer types;            // (B, S) i32 on the first stage (bert)
  Buffer lengths;          // (B) i32 key lengths on every stage with blocks (bert)
  Buffer input;            // (B, S, C) received activation (stages > 0)
  std::optional<EmbeddingStash> embedding;
  std::vector<BlockStash> blocks;
  std::optional<HeadStash> head;
  Buffer output;    // (B, S, C) activation to send (stages < d - 1)
  Buffer grad_out;  // (B, S, C) received gradient of the output
  Buffer grad_in;   // (B, S, C) gradient of the input to send (stages > 0); with a split backward on
                    // the first stage, the embedding's output gradient kept from B for its W
  // A split backward (zb-h1) between its B and its W: what each layer's W reads besides its stash.
  std::vector<BlockWeightStash> blocks_w;
  std::optional<HeadWeightStash> head_w;
  bool awaiting_weight = false;  // B ran, W has not: the microbatch stays live after send_gradient
  void drop_stash();
};

template <typename T>
struct StageWorker<T>::Impl {
  PipelineConfig cfg;
  std::unique_ptr<Backend> backend;  // declared first: destroyed after every buffer below
  DType compute = DType::f32;        // the layers' dtype
  bool mixed = false;                // compute is narrower than T: a master copy of its own
  int64_t rank = 0, stage = 0, replica = 0;
  int64_t begin = 0, end = 0;  // layers
  bool first = false, last = false, recompute = false;
  std::optional<EmbeddingLayer> embedding;
  std::vector<BlockLayer> blocks;
  std::optional<HeadLayer> head;
  ParamLayout layout;
  std::vector<int64_t> offsets, sizes;  // per layer of the stage: where its parameters start, how many
  int64_t numel = 0;
  // Tied embeddings with the head away from the embedding: the head's stage keeps a copy of the token
  // table at this offset (its last tensor, "lm_head.weight"); -1 otherwise.
  int64_t tied_copy = -1;
  std::array<Buffer, 2> weights;  // compute dtype; 2BW: version v lives in weights[v % 2]; else weights[0]
  int64_t allocated = 0;
  Buffer master;                  // T, the newest version, when mixed
  Buffer grads, m1, m2;           // T
  Buffer widened;                 // T, the older version widened for weights() when mixed
  std::vector<int32_t> tokens_host, targets_host;  // (B, S) staging for the data source
  std::vector<int32_t> types_host, lengths_host;   // (B, S), (B) bert's segments
  int64_t steps_done = 0;
  std::map<std::pair<int64_t, int64_t>, Microbatch> live;  // (step, microbatch) -> state
  double compute_ms = 0;           // backend clock in forward, recompute, backward
  int64_t computed_microbatches = 0;
  std::vector<double> update_end;  // steady-clock ms of each update's end, by step

  // Read back once per step, at the update, so that a device backend is never waited for inside a step:
  // the last stage's losses, (m) f64 per step (with which microbatches to report), and the compute
  // times of the ops, as pairs of marks on the backend's clock.
  struct StepLosses {
    Buffer values;               // (m) f64
    std::vector<bool> reported;  // microbatch k's forward had a sink
  };
  std::map<int64_t, StepLosses> losses;
  std::vector<std::pair<TimerMark, TimerMark>> timed;
  View loss_slot(int64_t step, int64_t k, bool report);
  void report_losses(int64_t step, LossSink* sink);
  void time_since(const TimerMark& from) { timed.emplace_back(from, backend->mark()); }
  void resolve_times();

  // Host copies behind weights(), moment1() and moment2() when the backend is not host-visible.
  std::vector<T> host_current, host_previous, host_m1, host_m2;
  std::span<T> host_view(Buffer& b, std::vector<T>& mirror);
  // Moving a stage buffer over Comm: in place when the backend is host-visible or the transport takes
  // device memory (ordered on the backend's stream), else staged through host memory.
  std::vector<std::byte> staging;
  void send(Comm& comm, int64_t dst, int64_t tag, ConstView data);
  void recv(Comm& comm, int64_t src, int64_t tag, View data);
  void allreduce_grads(Comm& comm);

  Impl(const PipelineConfig& config, int64_t rank);
  bool two_bw() const { return cfg.schedule == schemas::Schedule::two_bw; }
  Buffer& buffer_of(int64_t version) { return weights[two_bw() ? static_cast<size_t>(version % 2) : 0]; }
  int64_t version_of_step(int64_t step) const { return pipeline::version_for_step(cfg.schedule, step); }
  int64_t activation_numel() const { return cfg.microbatch_size * cfg.seq * cfg.model.d_model; }
  std::vector<int64_t> stage_group() const;    // ranks of this stage, replica order
  std::vector<int64_t> replica_group() const;  // ranks of this replica, stage order
  // Those groups, made once per Comm (bind_groups, on the first run with that Comm).
  Group stage_comm_group, replica_comm_group;
  uint64_t groups_of = 0;  // Comm::serial() of the Comm that made them
  void bind_groups(Comm& comm);
  int64_t rank_of(int64_t at_stage, int64_t of_replica) const {
    return cfg.ranks[static_cast<size_t>(at_stage)][static_cast<size_t>(of_replica)];
  }
  std::span<T> host_span(Buffer& b) { return {b.data<T>(), static_cast<size_t>(b.numel())}; }
  // Parameters (or gradients) of the stage's layer at position pos.
  ConstView layer_params(ConstView p, size_t pos) const { return p.slice(offsets[pos], sizes[pos]); }
  View layer_grads(size_t pos) { return grads.view().slice(offsets[pos], sizes[pos]); }
  // The token table the head reads (of weights p) and where its gradient goes; empty when not tied.
  ConstView head_wte(ConstView p) const;
  View head_dwte();
  // Sums the tied table's gradient of the embedding's and the head's stage (same replica) on both.
  void exchange_tied_grad(Comm& comm, int64_t step);
  // Fills tokens (and targets on the last stage; bert: types on the first, key lengths on every stage
  // with blocks) of microbatch k of `step` from the data source.
  void load_batch(Microbatch& mb, const MicrobatchSource& data, int64_t step, int64_t k);

  // The math of one op (stage_math.cpp).
  // keep_input: leave mb.input intact (a recomputing stage runs the forward again from it).
  // report_loss: the last stage reports this forward's loss at the step's update (report_losses).
  void forward(Microbatch& mb, int64_t step, ConstView params, bool report_loss, int64_t k, bool keep_input);
  void backward(Microbatch& mb, ConstView params);
  // The backward's walk over the stage's layers from the last, for backward() and backward_input():
  // the head writes the gradient of its input into a fresh buffer, head_step(pos, out); each block j, from
  // the last, reads the gradient of its output and writes that of its input, block_step(j, pos, in, out),
  // two buffers taking turns (mb.grad_out's first). pos is the layer's index in the stage. Returns the
  // gradient of the last block's input (of the head's when there are no blocks; empty on a stage of only
  // the embedding).
  template <class HeadStep, class BlockStep>
  Buffer backward_layers(Microbatch& mb, HeadStep&& head_step, BlockStep&& block_step) {
    const int64_t act = activation_numel();
    Buffer cur = std::move(mb.grad_out), spare;
    const auto take_spare = [&]() { return spare.empty() ? backend->alloc(compute, act) : std::move(spare); };
    size_t pos = offsets.size();
    if (last) {
      --pos;
      cur = take_spare();
      head_step(pos, cur.view());
    }
    for (size_t j = blocks.size(); j-- > 0;) {
      --pos;
      Buffer out = take_spare();
      block_step(j, pos, cur.cview(), out.view());
      spare = std::move(cur);
      cur = std::move(out);
    }
    return cur;
  }
  // The backward in its two halves (stage_split.cpp): B leaves mb.grad_in and the weight stashes, W
  // accumulates the same parameter gradients backward() would have, and spends the stashes.
  void backward_input(Microbatch& mb, ConstView params);
  void backward_weight(Microbatch& mb, ConstView params);
  // The op interpreter's B or W (`kind`) of microbatch `key`, timed; W ends the microbatch's life.
  void split_backward_op(pipeline::OpKind kind, const std::pair<int64_t, int64_t>& key, ConstView params);
  // Applies (or, with skip_nonfinite, skips) the update of `step`; returns why it was skipped, or "".
  // Throws Error when the step is not finite and may not be skipped, or the new weights are not finite.
  std::string update(Comm& comm, int64_t step);
  // The step's health, the same on every rank: per stage its gradient's sum of squares (scaled as the
  // clip needs it), then the count of non-finite losses over all replicas (stage_health.cpp).
  std::vector<double> step_health(Comm& comm, int64_t step, double scale);
  // W(step + 1) = W(step), moments untouched, gradients cleared.
  void skip_update(int64_t step);
};

// Message tags, compact enough for MPI (Comm takes [0, kMaxUserTag]; the job's reports use 8192 and up):
// kind x a window of 1024 slots from the step and the microbatch. Correctness needs no uniqueness: the
// only messages that share a tag go between the same pair of ranks with the same kind, a transport
// delivers those in send order, and both ends walk the same schedule, which sends and receives each
// kind between a pair in the same (step, microbatch) order; so the k-th receive under a tag gets the
// k-th send. The slot only narrows what could be confused if that order were ever broken.
enum class TagKind : int64_t { activation = 0, gradient = 1, tied = 2 };
inline constexpr int64_t kTagWindow = 1024;
inline int64_t make_tag(TagKind kind, int64_t step, int64_t microbatch) {
  const int64_t slot = (step % 8) * 128 + (microbatch < 0 ? 0 : microbatch % 128);
  return static_cast<int64_t>(kind) * kTagWindow + slot;
}

}  // namespace pd2bw::executor

// One model chunk held by a rank (private to the runtime): its layers, weight versions, gradients,
// optimizer moments and the microbatches in flight, and the math of one op on it (chunk_math.cpp,
// stage_split.cpp). A rank holds the chunks pipeline::chunks_at gives its position: one, its stage, for
// the one-chunk schedules; v for interleaved and zb-v. The rank (stage_state.hpp) owns the backend whose
// arena holds the buffers of all its chunks, walks the op list and moves the messages.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "pd2bw/executor/pipeline.hpp"

namespace pd2bw::executor {

// One microbatch in flight on a chunk; every buffer comes from the rank's arena.
struct Microbatch {
  Buffer tokens, targets;  // (B, S) i32 on the first and the last chunk
  Buffer types;            // (B, S) i32 on the first chunk (bert)
  Buffer lengths;          // (B) i32 key lengths on every chunk with blocks (bert)
  Buffer input;            // (B, S, C) received (or handed over) activation (chunks > 0)
  std::optional<EmbeddingStash> embedding;
  std::vector<BlockStash> blocks;
  std::optional<HeadStash> head;
  Buffer output;    // (B, S, C) activation to send (chunks < d v - 1)
  Buffer grad_out;  // (B, S, C) received gradient of the output
  Buffer grad_in;   // (B, S, C) gradient of the input to send (chunks > 0); with a split backward on
                    // the first chunk, the embedding's output gradient kept from B for its W
  // A split backward between its B and its W: what each layer's W reads besides its stash.
  std::vector<BlockWeightStash> blocks_w;
  std::optional<HeadWeightStash> head_w;
  bool awaiting_weight = false;  // B ran, W has not: the microbatch stays live after send_gradient
  void drop_stash();
};

template <typename T>
struct ChunkState {
  // Builds model chunk `chunk` of cfg on `backend` and writes its initial weights (the whole model's,
  // whatever the split). cfg and backend must outlive the chunk (the rank owns both).
  ChunkState(const PipelineConfig& cfg, Backend& backend, DType compute, int64_t chunk);

  const PipelineConfig* cfg;
  Backend* backend;
  DType compute = DType::f32;  // the layers' dtype
  bool mixed = false;          // compute is narrower than T: a master copy of its own
  int64_t chunk = 0;           // the model chunk (= the stage when v = 1)
  int64_t begin = 0, end = 0;  // layers
  bool first = false, last = false;
  std::optional<EmbeddingLayer> embedding;
  std::vector<BlockLayer> blocks;
  std::optional<HeadLayer> head;
  ParamLayout layout;
  std::vector<int64_t> offsets, sizes;  // per layer of the chunk: where its parameters start, how many
  int64_t numel = 0;
  // Tied embeddings with the head in another chunk than the embedding: the head's chunk keeps a copy of
  // the token table at this offset (its last tensor, "lm_head.weight"); -1 otherwise.
  int64_t tied_copy = -1;
  std::array<Buffer, 2> weights;  // compute dtype; 2BW: version v lives in weights[v % 2]; else weights[0]
  int64_t allocated = 0;
  Buffer master;                                   // T, the newest version, when mixed
  Buffer grads, m1, m2;                            // T
  Buffer widened;                                  // T, the older version widened for weights() when mixed
  std::vector<int32_t> tokens_host, targets_host;  // (B, S) staging for the data source
  std::vector<int32_t> types_host, lengths_host;   // (B, S), (B) bert's segments
  // Host copies behind the worker's weights(), moment1() and moment2() when the backend is not host-visible.
  std::vector<T> host_current, host_previous, host_m1, host_m2;
  std::map<std::pair<int64_t, int64_t>, Microbatch> live;  // (step, microbatch) -> state

  bool two_bw() const { return cfg->schedule == schemas::Schedule::two_bw; }
  Buffer& buffer_of(int64_t version) { return weights[two_bw() ? static_cast<size_t>(version % 2) : 0]; }
  int64_t activation_numel() const { return cfg->microbatch_size * cfg->seq * cfg->model.d_model; }
  std::span<T> host_span(Buffer& b) { return {b.data<T>(), static_cast<size_t>(b.numel())}; }
  std::span<T> host_view(Buffer& b, std::vector<T>& mirror);
  // Parameters (or gradients) of the chunk's layer at position pos.
  ConstView layer_params(ConstView p, size_t pos) const { return p.slice(offsets[pos], sizes[pos]); }
  View layer_grads(size_t pos) { return grads.view().slice(offsets[pos], sizes[pos]); }
  // Where this chunk keeps the tied token table (the embedding's, or the head's copy); -1 for neither.
  int64_t table_offset() const;
  // The token table the head reads (of weights p) and where its gradient goes; empty when not tied.
  ConstView head_wte(ConstView p) const;
  View head_dwte();
  // The sum of squares of the gradients, the head's copy of a tied table left out (the embedding's chunk
  // counts the table once).
  double grad_sum_of_squares();

  // Fills tokens (and targets on the last chunk; bert: types on the first, key lengths on every chunk
  // with blocks) of microbatch k of `step` on `replica` from the data source.
  void load_batch(Microbatch& mb, const MicrobatchSource& data, int64_t step, int64_t k, int64_t replica);
  // keep_input: leave mb.input intact (a recomputing rank runs the forward again from it).
  // loss: the (1) f64 slot the head writes the microbatch's loss to (the last chunk only).
  void forward(Microbatch& mb, ConstView params, View loss, bool keep_input);
  void backward(Microbatch& mb, ConstView params);
  // The backward's walk over the chunk's layers from the last, for backward() and backward_input():
  // the head writes the gradient of its input into a fresh buffer, head_step(pos, out); each block j, from
  // the last, reads the gradient of its output and writes that of its input, block_step(j, pos, in, out),
  // two buffers taking turns (mb.grad_out's first). pos is the layer's index in the chunk. Returns the
  // gradient of the last block's input (of the head's when there are no blocks; empty on a chunk of only
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

  // 2BW without a master copy: the step whose gradient waits for its update in the buffer of version
  // step + 1 (-1: none). That buffer held version step - 1, which no op reads after the step's last
  // backward, and is the update's output; so the next step's backwards accumulate into `grads` while the
  // update waits, with no memory beyond the two versions. park_gradient(step) moves the gradient there
  // (at the step's end) and leaves `grads` zeroed; requires two_bw() && !mixed.
  int64_t parked = -1;
  void park_gradient(int64_t step);
  // Where the gradient of `step` is: parked, or in `grads`.
  Buffer& step_grads(int64_t step) { return parked == step ? buffer_of(step + 1) : grads; }
  // W(step + 1) from W(step) and the step's gradients times `scale` (the replicas' mean and the clip);
  // with a master copy the optimizer updates it in place and the new version's compute buffer receives
  // its cast, once. A parked gradient is overwritten by the new version (the optimizers read each
  // element's gradient before they write its weight); else clears `grads`. Throws Error when the new
  // weights or moments are not finite.
  void apply_update(int64_t step, double scale);
  // W(step + 1) = W(step), moments untouched, the step's gradients dropped.
  void skip_update(int64_t step);
  // The buffer of version step + 1, allocated on first use.
  Buffer& version_buffer(int64_t step);
};

}  // namespace pd2bw::executor

// The layers of a model as the profile and the plan see them: layer 0 "embedding", layers 1..blocks
// "block.i" (i = 0..blocks-1), and the last layer "head" (the loss included). One set of layer classes
// serves every family (model.hpp): each builds the family's variant from the ModelConfig.
//
// Each layer class owns one flat parameter buffer and one flat gradient buffer described by its
// layout(), but forward/backward take the parameters (and the gradient buffer) as explicit pointers,
// so the runtime can run a microbatch against either of the two weight versions 2BW keeps, held in
// buffers of its own with the same layout. Input gradients are overwritten; parameter gradients
// accumulate (+=) over the microbatches of a step. All tensors are contiguous and row-major.
//
// Linear weights are stored (Out, In), i.e. y = x W^T. HF GPT-2 checkpoints store c_attn, c_proj and
// c_fc as Conv1D weights of shape (In, Out); a checkpoint converter must transpose those.
//
// Tied embeddings (config.tie_embeddings): the head has no lm_head.weight; its forward and backward
// take `wte` (V, C), the embedding's token table of the same weight version, and its backward
// accumulates the LM-head gradient into a separate `dwte` (V, C) buffer. The runtime adds dwte into the
// embedding's gradient at offset HostEmbedding::kWteOffset (over the network when the two layers sit on
// different stages) before the update, so both copies of wte receive the same summed update.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "pd2bw/checked.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/layout.hpp"
#include "pd2bw/executor/model.hpp"

namespace pd2bw::executor {

// The flat parameter and gradient buffers a layer owns (gradients start at zero). A layer built with
// Buffers::none owns none (params() and grads() are empty): the caller keeps the weights elsewhere, as
// the pipeline runtime does with its weight versions, and passes them to forward / backward.
enum class Buffers { owned, none };
template <typename T>
class LayerBuffers {
 public:
  const ModelConfig& config() const { return config_; }
  const ParamLayout& layout() const { return layout_; }
  int64_t size() const { return static_cast<int64_t>(params_.size()); }
  std::span<T> params() { return params_; }
  std::span<const T> params() const { return params_; }
  std::span<T> grads() { return grads_; }
  std::span<const T> grads() const { return grads_; }
  void zero_grads();

 protected:
  LayerBuffers(const ModelConfig& config, int64_t layer, uint64_t seed, Buffers buffers);
  ModelConfig config_;
  ParamLayout layout_;
  std::vector<T> params_;
  std::vector<T> grads_;
};

// ---- the layers, written once against a Backend ----------------------------------------------------
// Each layer runs on the backend it was built with, in a compute dtype (f32, f64 or bf16): params,
// activations and stashes are compute-dtype Views of that backend's memory; parameter gradients (grads,
// dwte) are in accumulate_dtype(compute). Stash and scratch buffers come from the backend's arena. The
// layer objects hold no weights (see LayerBuffers / the pipeline runtime for those) and no state
// between calls, so one object serves every microbatch and both 2BW weight versions.

// What the embedding's backward reads: the token ids (i32); bert also the token types and its layer
// norm's input and statistics.
struct EmbeddingStash {
  int64_t batch = 0;
  int64_t seq = 0;
  Buffer tokens;            // (B, S)
  Buffer types;             // (B, S) i32 (bert)
  Buffer sum;               // (N, C) word + position + type embedding, the layer norm's input (bert)
  Buffer ln_mean, ln_rstd;  // (N), (N) (bert)
  Buffer ln_gamma;          // (C) the layer norm's gamma of the forward's weights (bert)
  int64_t bytes() const;
};

// Everything a block's backward reads; N = B*S rows. bytes() is what one stashed microbatch costs.
// Pre-LN: x1 = x + proj(attn(qkv(ln1(x)))), y = x1 + mlp(ln2(x1)).
// Post-LN: x1 = ln1(x + proj(attn(qkv(x)))), y = ln2(x1 + mlp(x1)); ln1 and ln2 then hold the sums
// the norms read, and the norms' outputs are x1 (stashed) and y (not needed).
struct BlockStash {
  int64_t batch = 0;
  int64_t seq = 0;
  Buffer lengths;                  // (B) i32 key lengths of a padded batch (bert), empty: every key
  Buffer x;                        // (N, C) block input
  Buffer ln1, ln1_mean, ln1_rstd;  // (N, C), (N), (N): pre-LN ln_1's output; post-LN its input
  Buffer qkv;                      // (N, 3C)
  Buffer attn_stash;               // the backend's attention_stash: (B, H, S, S) probabilities on the
                                   // cpu, (B, H, S) fp32 log-sum-exp on cuda
  Buffer attn;                     // (N, C) attention output before c_proj
  Buffer x1;                       // (N, C) residual stream after attention
  Buffer ln2, ln2_mean, ln2_rstd;  // (N, C), (N), (N): pre-LN ln_2's output; post-LN its input
  Buffer fc, fc_act;               // (N, 4C) before and after GELU
  int64_t bytes() const;
};

// What the head's backward reads.
struct HeadStash {
  int64_t batch = 0;
  int64_t seq = 0;
  Buffer targets;                // (N) i32, kIgnoreTarget where no loss is counted
  Buffer x;                      // (N, C) head input
  Buffer ln, ln_mean, ln_rstd;   // (N, C), (N), (N) the final layer norm (gpt, pre-LN bert)
  Buffer dense, act;             // (N, C), (N, C) bert's transform before and after GELU
  Buffer tln, tln_mean, tln_rstd;  // (N, C), (N), (N) bert's transform layer norm
  Buffer logits;                 // (N, V)
  Buffer lse;                    // (N) log-sum-exp per row
  int64_t bytes() const;
};

// What a block keeps from its backward's input half (B) to its weight half (W): the gradients of the
// outputs of its weight products and layer norms, which W multiplies by the inputs the forward stashed.
// N = B*S rows; bytes() is what one microbatch waiting for its W costs beyond the stash W still reads.
struct BlockWeightStash {
  Buffer dy;    // (N, C) gradient of the block output (mlp.c_proj's output)
  Buffer dfc;   // (N, 4C) gradient of mlp.c_fc's output (before GELU)
  Buffer dln2;  // (N, C) gradient of ln_2's output
  Buffer dx1;   // (N, C) gradient of the residual stream after attention (attn.c_proj's output)
  Buffer dqkv;  // (N, 3C) gradient of attn.c_attn's output
  Buffer dln1;  // (N, C) gradient of ln_1's output
  int64_t bytes() const;
};

// What the head keeps from B to W besides its stash, whose logits hold their gradient after B (in place).
struct HeadWeightStash {
  Buffer dln;    // (N, C) gradient of ln_f's output (gpt, pre-LN bert)
  Buffer ddense; // (N, C) gradient of bert's transform dense output (before GELU)
  Buffer dtln;   // (N, C) gradient of bert's transform layer norm output
  int64_t bytes() const { return dln.bytes() + ddense.bytes() + dtln.bytes(); }
};

// Layer 0. gpt: token + position embedding; parameters wte.weight (V, C), wpe.weight (Tmax, C).
// bert: LayerNorm(word + position + token-type embedding); parameters word (V, C), position (Tmax, C),
// token type (2, C), LayerNorm gamma and beta (C).
class EmbeddingLayer {
 public:
  static constexpr int64_t kWteOffset = 0;  // the token table starts the buffer (tied heads add into it)
  // Throws UsageError for an invalid config or a compute dtype the backend does not support.
  EmbeddingLayer(const ModelConfig& config, Backend& backend, DType compute);
  // params: this layer's layout; tokens: (B, S) i32 ids in [0, V), 0 < S <= seq_len; types: (B, S) i32
  // in [0, 2) for bert (required), ignored for gpt; out: (B, S, C).
  // Throws UsageError for a bad batch/seq or a missing types, Error for a token or type out of range.
  void forward(ConstView params, ConstView tokens, int64_t batch, int64_t seq, EmbeddingStash& stash, View out,
               ConstView types = {}) const;
  // grad_out: (B, S, C); grads: this layer's layout, accumulated. The embedding has no input gradient,
  // so in a split backward this whole call is its weight half (W) and its B is empty.
  void backward(const EmbeddingStash& stash, ConstView grad_out, View grads) const;

 private:
  ModelConfig config_;
  Backend* backend_;
  DType compute_;
};

// Layers 1..blocks: a transformer block, pre-LN (gpt; bert with ln = pre)
//   x1 = x + c_proj(attn(c_attn(ln_1(x))));  y = x1 + mlp.c_proj(gelu(mlp.c_fc(ln_2(x1)))),
// or post-LN (bert)
//   x1 = ln_1(x + c_proj(attn(c_attn(x))));  y = ln_2(x1 + mlp.c_proj(gelu(mlp.c_fc(x1)))),
// MLP hidden width 4C. gpt: causal attention, tanh GELU; bert: bidirectional attention under the key
// padding mask of the microbatch's lengths, erf GELU. Parameters: ln_1 (C)x2, c_attn (3C, C)+(3C),
// c_proj (C, C)+(C), ln_2 (C)x2, c_fc (4C, C)+(4C), mlp.c_proj (C, 4C)+(C), under the family's names
// (model.hpp).
class BlockLayer {
 public:
  // block in [0, blocks): the model layer index is block + 1. Throws UsageError.
  BlockLayer(const ModelConfig& config, int64_t block, Backend& backend, DType compute);
  // params: this layer's layout; input, output: (B, S, C), distinct; lengths: (B) i32 key lengths in
  // [1, S] (bert's padding mask; empty: every key), ignored for gpt. Throws UsageError for a bad batch/seq.
  void forward(ConstView params, ConstView input, int64_t batch, int64_t seq, BlockStash& stash, View output,
               ConstView lengths = {}) const;
  // Rebuilds the stash from the block input alone; bit-identical to what forward() stashed.
  void recompute(ConstView params, ConstView input, int64_t batch, int64_t seq, BlockStash& stash,
                 ConstView lengths = {}) const;
  // grad_output, grad_input: (B, S, C), distinct; grads: this layer's layout, accumulated.
  void backward(ConstView params, const BlockStash& stash, ConstView grad_output, View grad_input, View grads) const;
  // The backward in two halves (zero-bubble schedules run W later): backward_input (B) writes grad_input
  // exactly as backward() does, touches no parameter gradient, fills `w` and frees the stash buffers
  // only B reads (qkv, attention stash, fc); backward_weight (W) then accumulates into grads exactly
  // what backward() would have, and spends the stash and `w`. Same shapes as backward().
  void backward_input(ConstView params, BlockStash& stash, ConstView grad_output, View grad_input,
                      BlockWeightStash& w) const;
  void backward_weight(ConstView params, BlockStash& stash, BlockWeightStash& w, View grads) const;

 private:
  ModelConfig config_;
  ParamLayout layout_;
  Backend* backend_;
  DType compute_;
};

// The last layer. gpt: ln_f, LM head (no bias) and mean softmax cross-entropy over the B*S positions;
// parameters ln_f.weight (C), ln_f.bias (C), and lm_head.weight (V, C) unless tied. bert: (pre-LN only)
// the final layer norm, the transform dense (C, C) + erf GELU + layer norm, the decoder (the tied word
// table, always) with its bias (V), and the mean cross-entropy over the targets that are not kIgnoreTarget.
class HeadLayer {
 public:
  HeadLayer(const ModelConfig& config, Backend& backend, DType compute);
  // params: this layer's layout; wte: (V, C) when tied (the embedding's table of the same weight
  // version), ignored otherwise; input: (B, S, C); targets: (B, S) i32 in [0, V) or kIgnoreTarget;
  // loss: (1) f64, written with the mean loss over the counted positions. Throws UsageError (tied and wte empty, bad
  // batch/seq) or Error (target out of range).
  void forward(ConstView params, ConstView wte, ConstView input, ConstView targets, int64_t batch, int64_t seq,
               HeadStash& stash, View loss) const;
  // Starts from d(loss_scale * loss); grad_input: (B, S, C) overwritten; grads: this layer's layout,
  // accumulated; dwte: (V, C) accumulated LM-head gradient when tied (required then), else ignored.
  // Spends the stash: its logits are overwritten by their gradient (the largest tensor of the head,
  // so no second (N, V) buffer is needed); only a new forward makes it usable again.
  void backward(ConstView params, ConstView wte, HeadStash& stash, double loss_scale, View grad_input, View grads,
                View dwte) const;
  // The backward in two halves, as BlockLayer's: backward_input (B) writes grad_input exactly as
  // backward() does and fills `w`; backward_weight (W) accumulates grads and dwte (tied) exactly as
  // backward() would have, and spends the stash and `w`. Arguments as backward()'s.
  void backward_input(ConstView params, ConstView wte, HeadStash& stash, double loss_scale, View grad_input,
                      HeadWeightStash& w) const;
  void backward_weight(ConstView params, HeadStash& stash, HeadWeightStash& w, View grads, View dwte) const;

 private:
  ConstView lm_head(ConstView params, ConstView wte) const;
  ModelConfig config_;
  Backend* backend_;
  DType compute_;
};

// ---- typed conveniences over the process-wide cpu backend (default_backend()) -------------------------
// Each owns its LayerBuffers (unless Buffers::none) and takes host pointers of T = float or double,
// the compute dtype; used by the sequential reference model, the profiler and tests.

template <typename T>
class HostEmbedding : public LayerBuffers<T> {
 public:
  static constexpr int64_t kWteOffset = EmbeddingLayer::kWteOffset;
  using Stash = EmbeddingStash;
  HostEmbedding(const ModelConfig& config, uint64_t seed, Buffers buffers = Buffers::owned);
  // types: (B, S) token types (bert, required) or nullptr (gpt).
  void forward(const T* params, const int32_t* tokens, int64_t batch, int64_t seq, Stash& stash, T* out,
               const int32_t* types = nullptr) const;
  void backward(const Stash& stash, const T* grad_out, T* grads) const;

 private:
  EmbeddingLayer layer_;
};

template <typename T>
class HostBlock : public LayerBuffers<T> {
 public:
  using Stash = BlockStash;
  HostBlock(const ModelConfig& config, int64_t block, uint64_t seed, Buffers buffers = Buffers::owned);
  // lengths: (B) key lengths (bert's padding mask) or nullptr.
  void forward(const T* params, const T* input, int64_t batch, int64_t seq, Stash& stash, T* output,
               const int32_t* lengths = nullptr) const;
  void recompute(const T* params, const T* input, int64_t batch, int64_t seq, Stash& stash,
                 const int32_t* lengths = nullptr) const;
  void backward(const T* params, const Stash& stash, const T* grad_output, T* grad_input, T* grads) const;

 private:
  BlockLayer layer_;
};

template <typename T>
class HostHead : public LayerBuffers<T> {
 public:
  using Stash = HeadStash;
  HostHead(const ModelConfig& config, uint64_t seed, Buffers buffers = Buffers::owned);
  // Returns the mean loss. wte: (V, C) when tied, else ignored (may be null).
  double forward(const T* params, const T* wte, const T* input, const int32_t* targets, int64_t batch, int64_t seq,
                 Stash& stash) const;
  // Same as forward (the head keeps nothing but what forward computes); returns the loss.
  double recompute(const T* params, const T* wte, const T* input, const int32_t* targets, int64_t batch,
                   int64_t seq, Stash& stash) const;
  // Spends the stash (see HeadLayer::backward).
  void backward(const T* params, const T* wte, Stash& stash, double loss_scale, T* grad_input, T* grads,
                T* dwte) const;

 private:
  HeadLayer layer_;
};

extern template class LayerBuffers<float>;
extern template class LayerBuffers<double>;
extern template class HostEmbedding<float>;
extern template class HostEmbedding<double>;
extern template class HostBlock<float>;
extern template class HostBlock<double>;
extern template class HostHead<float>;
extern template class HostHead<double>;

}  // namespace pd2bw::executor

// GPT transformer block (pre-LN, causal attention, GELU MLP): forward, recompute and backward, fused or
// split into its input-gradient (B) and weight-gradient (W) halves.
#include "gpt_internal.hpp"

namespace pd2bw::executor {
namespace {

// Tensor indices in a block's layout, in the order gpt_layer_layout pushes them.
enum Tensor : size_t {
  kLn1W,
  kLn1B,
  kAttnW,
  kAttnB,
  kProjW,
  kProjB,
  kLn2W,
  kLn2B,
  kFcW,
  kFcB,
  kMlpProjW,
  kMlpProjB,
  kCount
};

// The model layer index of block i (layer 0 is the embedding); validates i first, because a block index
// one past the end would otherwise silently name the head's layer.
int64_t block_layer(const GptConfig& config, int64_t block) {
  if (block < 0 || block >= config.blocks) {
    throw UsageError(fmt::format("block index {} is outside [0, {})", block, config.blocks));
  }
  return block + 1;
}

}  // namespace

int64_t BlockStash::bytes() const {
  int64_t total = 0;
  for (const Buffer* b : {&x, &ln1, &ln1_mean, &ln1_rstd, &qkv, &attn_stash, &attn, &x1, &ln2, &ln2_mean, &ln2_rstd, &fc, &fc_act})
    total += b->bytes();
  return total;
}

BlockLayer::BlockLayer(const GptConfig& config, int64_t block, Backend& backend, DType compute)
    : config_(config), layout_(gpt_layer_layout(config, block_layer(config, block))), backend_(&backend),
      compute_(compute) {
  detail::check_backend(backend, compute, "block");
}

void BlockLayer::forward(ConstView params, ConstView input, int64_t batch, int64_t seq, BlockStash& s,
                         View output) const {
  const GptConfig& cfg = config_;
  detail::check_microbatch(cfg, batch, seq, "block");
  const int64_t c = cfg.d_model, n = batch * seq;
  const DType acc = accumulate_dtype(compute_);
  const auto p = [&](Tensor t) { return params.slice(layout_[t].offset, layout_[t].numel()); };
  Backend& be = *backend_;
  s.batch = batch;
  s.seq = seq;
  s.x = be.alloc(compute_, n * c);
  be.copy(input.slice(0, n * c), s.x.view());
  for (Buffer* b : {&s.ln1, &s.attn, &s.x1, &s.ln2}) *b = be.alloc(compute_, n * c);
  for (Buffer* b : {&s.ln1_mean, &s.ln1_rstd, &s.ln2_mean, &s.ln2_rstd}) *b = be.alloc(acc, n);
  s.qkv = be.alloc(compute_, n * 3 * c);
  const AttentionStash as = be.attention_stash(compute_, batch, seq, cfg.heads);
  s.attn_stash = be.alloc(as.dtype, as.numel);
  s.fc = be.alloc(compute_, n * 4 * c);
  s.fc_act = be.alloc(compute_, n * 4 * c);

  be.layernorm_forward(input, p(kLn1W), p(kLn1B), s.ln1.view(), s.ln1_mean.view(), s.ln1_rstd.view(), n, c);
  be.linear_forward(s.ln1.view(), p(kAttnW), p(kAttnB), s.qkv.view(), n, c, 3 * c);
  be.attention_forward(s.qkv.view(), s.attn.view(), s.attn_stash.view(), batch, seq, c, cfg.heads);
  // The projections land in `output`, used as scratch before it receives the block's result.
  be.linear_forward(s.attn.view(), p(kProjW), p(kProjB), output, n, c, c);
  be.add(input, output, s.x1.view(), n * c);
  be.layernorm_forward(s.x1.view(), p(kLn2W), p(kLn2B), s.ln2.view(), s.ln2_mean.view(), s.ln2_rstd.view(), n, c);
  be.linear_forward(s.ln2.view(), p(kFcW), p(kFcB), s.fc.view(), n, c, 4 * c);
  be.gelu_forward(s.fc.view(), s.fc_act.view(), n * 4 * c);
  be.linear_forward(s.fc_act.view(), p(kMlpProjW), p(kMlpProjB), output, n, 4 * c, c);
  be.add(s.x1.view(), output, output, n * c);
}

void BlockLayer::recompute(ConstView params, ConstView input, int64_t batch, int64_t seq, BlockStash& stash) const {
  detail::check_microbatch(config_, batch, seq, "block");
  Buffer discard = backend_->alloc(compute_, batch * seq * config_.d_model);
  forward(params, input, batch, seq, stash, discard.view());
}

void BlockLayer::backward(ConstView params, const BlockStash& s, ConstView grad_output, View grad_input,
                          View grads) const {
  const GptConfig& cfg = config_;
  const int64_t c = cfg.d_model, n = s.batch * s.seq;
  const auto p = [&](Tensor t) { return params.slice(layout_[t].offset, layout_[t].numel()); };
  const auto g = [&](Tensor t) { return grads.slice(layout_[t].offset, layout_[t].numel()); };
  Backend& be = *backend_;
  // wide holds (N, 4C) for the MLP, then (N, 3C) for attention followed by dx1 (N, C): the gradient of
  // x1, where the residual path carries dy straight through.
  Buffer wide = be.alloc(compute_, n * 4 * c);
  Buffer narrow = be.alloc(compute_, n * c);  // (N, C) scratch
  const View w4 = wide.view(), w3 = wide.view().slice(0, n * 3 * c), dx1 = wide.view().slice(n * 3 * c, n * c);

  // MLP: y = x1 + c_proj(gelu(c_fc(ln_2(x1)))).
  be.linear_backward(grad_output, s.fc_act.view(), p(kMlpProjW), w4, g(kMlpProjW), g(kMlpProjB), n, 4 * c, c);
  be.gelu_backward(w4, s.fc.view(), w4, n * 4 * c);
  be.linear_backward(w4, s.ln2.view(), p(kFcW), narrow.view(), g(kFcW), g(kFcB), n, c, 4 * c);
  be.layernorm_backward(narrow.view(), s.x1.view(), p(kLn2W), s.ln2_mean.view(), s.ln2_rstd.view(), grad_input,
                        g(kLn2W), g(kLn2B), n, c);
  be.add(grad_output, grad_input, dx1, n * c);

  // Attention: x1 = x + c_proj(attn(c_attn(ln_1(x)))).
  be.linear_backward(dx1, s.attn.view(), p(kProjW), narrow.view(), g(kProjW), g(kProjB), n, c, c);
  be.attention_backward(narrow.view(), s.qkv.view(), s.attn.view(), s.attn_stash.view(), w3, s.batch, s.seq, c,
                        cfg.heads);
  be.linear_backward(w3, s.ln1.view(), p(kAttnW), narrow.view(), g(kAttnW), g(kAttnB), n, c, 3 * c);
  be.layernorm_backward(narrow.view(), s.x.view(), p(kLn1W), s.ln1_mean.view(), s.ln1_rstd.view(), grad_input,
                        g(kLn1W), g(kLn1B), n, c);
  be.accumulate(grad_input, dx1, n * c);
}

int64_t BlockWeightStash::bytes() const {
  int64_t total = 0;
  for (const Buffer* b : {&dy, &dfc, &dln2, &dx1, &dqkv, &dln1}) total += b->bytes();
  return total;
}

// backward() with every parameter gradient left out: the same calls on the same operands, so grad_input
// gets the same bits; the output gradients of the weight products go to `w` for backward_weight.
void BlockLayer::backward_input(ConstView params, BlockStash& s, ConstView grad_output, View grad_input,
                                BlockWeightStash& w) const {
  const GptConfig& cfg = config_;
  const int64_t c = cfg.d_model, n = s.batch * s.seq;
  const auto p = [&](Tensor t) { return params.slice(layout_[t].offset, layout_[t].numel()); };
  Backend& be = *backend_;
  w.dy = be.alloc(compute_, n * c);
  be.copy(grad_output.slice(0, n * c), w.dy.view());
  w.dfc = be.alloc(compute_, n * 4 * c);
  w.dqkv = be.alloc(compute_, n * 3 * c);
  for (Buffer* b : {&w.dln2, &w.dx1, &w.dln1}) *b = be.alloc(compute_, n * c);
  Buffer dattn = be.alloc(compute_, n * c);  // (N, C) gradient of the attention output

  be.linear_backward(grad_output, s.fc_act.view(), p(kMlpProjW), w.dfc.view(), {}, {}, n, 4 * c, c);
  be.gelu_backward(w.dfc.view(), s.fc.view(), w.dfc.view(), n * 4 * c);
  be.linear_backward(w.dfc.view(), s.ln2.view(), p(kFcW), w.dln2.view(), {}, {}, n, c, 4 * c);
  be.layernorm_backward(w.dln2.view(), s.x1.view(), p(kLn2W), s.ln2_mean.view(), s.ln2_rstd.view(), grad_input, {}, {},
                        n, c);
  be.add(grad_output, grad_input, w.dx1.view(), n * c);
  be.linear_backward(w.dx1.view(), s.attn.view(), p(kProjW), dattn.view(), {}, {}, n, c, c);
  be.attention_backward(dattn.view(), s.qkv.view(), s.attn.view(), s.attn_stash.view(), w.dqkv.view(), s.batch, s.seq,
                        c, cfg.heads);
  be.linear_backward(w.dqkv.view(), s.ln1.view(), p(kAttnW), w.dln1.view(), {}, {}, n, c, 3 * c);
  be.layernorm_backward(w.dln1.view(), s.x.view(), p(kLn1W), s.ln1_mean.view(), s.ln1_rstd.view(), grad_input, {}, {},
                        n, c);
  be.accumulate(grad_input, w.dx1.view(), n * c);
  for (Buffer* b : {&s.qkv, &s.attn_stash, &s.fc}) b->reset();  // only B reads them
}

// backward()'s parameter gradients, each from the same operands as there (one accumulation per tensor,
// so their order does not matter).
void BlockLayer::backward_weight(ConstView params, BlockStash& s, BlockWeightStash& w, View grads) const {
  const int64_t c = config_.d_model, n = s.batch * s.seq;
  const auto p = [&](Tensor t) { return params.slice(layout_[t].offset, layout_[t].numel()); };
  const auto g = [&](Tensor t) { return grads.slice(layout_[t].offset, layout_[t].numel()); };
  Backend& be = *backend_;
  be.linear_backward(w.dy.view(), s.fc_act.view(), {}, {}, g(kMlpProjW), g(kMlpProjB), n, 4 * c, c);
  be.linear_backward(w.dfc.view(), s.ln2.view(), {}, {}, g(kFcW), g(kFcB), n, c, 4 * c);
  be.layernorm_backward(w.dln2.view(), s.x1.view(), p(kLn2W), s.ln2_mean.view(), s.ln2_rstd.view(), {}, g(kLn2W),
                        g(kLn2B), n, c);
  be.linear_backward(w.dx1.view(), s.attn.view(), {}, {}, g(kProjW), g(kProjB), n, c, c);
  be.linear_backward(w.dqkv.view(), s.ln1.view(), {}, {}, g(kAttnW), g(kAttnB), n, c, 3 * c);
  be.layernorm_backward(w.dln1.view(), s.x.view(), p(kLn1W), s.ln1_mean.view(), s.ln1_rstd.view(), {}, g(kLn1W),
                        g(kLn1B), n, c);
  w = BlockWeightStash{};
  s = BlockStash{};
}

template <typename T>
GptBlock<T>::GptBlock(const GptConfig& config, int64_t block, uint64_t seed, Buffers buffers)
    : LayerBuffers<T>(config, block_layer(config, block), seed, buffers),
      layer_(config, block, default_backend(), dtype_of<T>()) {}

template <typename T>
void GptBlock<T>::forward(const T* params, const T* input, int64_t batch, int64_t seq, Stash& stash, T* output) const {
  detail::check_microbatch(this->config_, batch, seq, "block");
  const int64_t act = batch * seq * this->config_.d_model;
  layer_.forward(detail::host(params, layout_numel(this->layout_)), detail::host(input, act), batch, seq, stash,
                 detail::host(output, act));
}

template <typename T>
void GptBlock<T>::recompute(const T* params, const T* input, int64_t batch, int64_t seq, Stash& stash) const {
  detail::check_microbatch(this->config_, batch, seq, "block");
  layer_.recompute(detail::host(params, layout_numel(this->layout_)),
                   detail::host(input, batch * seq * this->config_.d_model), batch, seq, stash);
}

template <typename T>
void GptBlock<T>::backward(const T* params, const Stash& stash, const T* grad_output, T* grad_input, T* grads) const {
  const int64_t act = stash.batch * stash.seq * this->config_.d_model, numel = layout_numel(this->layout_);
  layer_.backward(detail::host(params, numel), stash, detail::host(grad_output, act), detail::host(grad_input, act),
                  detail::host(grads, numel));
}

static_assert(kCount == 12, "a block has 12 parameter tensors");

template class GptBlock<float>;
template class GptBlock<double>;

}  // namespace pd2bw::executor

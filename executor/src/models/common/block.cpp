// The transformer block shared by the families: its stash, the sublayers both LN placements use, and
// BlockLayer, which runs the placement (block_pre.cpp, block_post.cpp) with the family's attention mask
// and GELU: forward, recompute and backward, fused or split into its input-gradient (B) and
// weight-gradient (W) halves.
#include "models/common/block_parts.hpp"

namespace pd2bw::executor {
namespace {

// The model layer index of block i (layer 0 is the embedding); validates i first, because a block index
// one past the end would otherwise silently name the head's layer.
int64_t block_layer(const ModelConfig& config, int64_t block) {
  if (block < 0 || block >= config.blocks) {
    throw UsageError(fmt::format("block index {} is outside [0, {})", block, config.blocks));
  }
  return block + 1;
}

}  // namespace

int64_t BlockStash::bytes() const {
  int64_t total = 0;
  for (const Buffer* b : {&lengths, &x, &ln1, &ln1_mean, &ln1_rstd, &qkv, &attn_stash, &attn, &x1, &ln2, &ln2_mean, &ln2_rstd, &fc, &fc_act})
    total += b->bytes();
  return total;
}

namespace detail {

void alloc_block_stash(const BlockContext& k, ConstView input, BlockStash& s) {
  const int64_t n = k.n, c = k.c;
  const DType acc = accumulate_dtype(k.compute);
  Backend& be = k.be;
  s.x = be.alloc(k.compute, n * c);
  be.copy(input.slice(0, n * c), s.x.view());
  for (Buffer* b : {&s.ln1, &s.attn, &s.x1, &s.ln2}) *b = be.alloc(k.compute, n * c);
  for (Buffer* b : {&s.ln1_mean, &s.ln1_rstd, &s.ln2_mean, &s.ln2_rstd}) *b = be.alloc(acc, n);
  s.qkv = be.alloc(k.compute, n * 3 * c);
  const AttentionStash as = be.attention_stash(k.compute, k.batch, k.seq, k.heads);
  s.attn_stash = be.alloc(as.dtype, as.numel);
  s.fc = be.alloc(k.compute, n * 4 * c);
  s.fc_act = be.alloc(k.compute, n * 4 * c);
}

void alloc_weight_stash(const BlockContext& k, ConstView grad_output, BlockWeightStash& w) {
  const int64_t n = k.n, c = k.c;
  w.dy = k.be.alloc(k.compute, n * c);
  k.be.copy(grad_output.slice(0, n * c), w.dy.view());
  w.dfc = k.be.alloc(k.compute, n * 4 * c);
  w.dqkv = k.be.alloc(k.compute, n * 3 * c);
  for (Buffer* b : {&w.dln2, &w.dx1, &w.dln1}) *b = k.be.alloc(k.compute, n * c);
}

void attention_part_forward(const BlockContext& k, ConstView in, BlockStash& s, View out) {
  const BlockRoles& r = k.roles;
  k.be.linear_forward(in, k.p(r.qkv_w), k.p(r.qkv_b), s.qkv.view(), k.n, k.c, 3 * k.c);
  k.be.attention_forward(s.qkv.view(), s.attn.view(), s.attn_stash.view(), k.batch, k.seq, k.c, k.heads, k.mask);
  k.be.linear_forward(s.attn.view(), k.p(r.proj_w), k.p(r.proj_b), out, k.n, k.c, k.c);
}

void mlp_part_forward(const BlockContext& k, ConstView in, BlockStash& s, View out) {
  const BlockRoles& r = k.roles;
  const int64_t n = k.n, c = k.c;
  k.be.linear_forward(in, k.p(r.fc_w), k.p(r.fc_b), s.fc.view(), n, c, 4 * c);
  k.be.gelu_forward(s.fc.view(), s.fc_act.view(), n * 4 * c, k.gelu);
  k.be.linear_forward(s.fc_act.view(), k.p(r.out_w), k.p(r.out_b), out, n, 4 * c, c);
}

}  // namespace detail

BlockLayer::BlockLayer(const ModelConfig& config, int64_t block, Backend& backend, DType compute)
    : config_(config), layout_(layer_layout(config, block_layer(config, block))), backend_(&backend),
      compute_(compute) {
  detail::check_backend(backend, compute, "block");
}

namespace {
// The context of one call on a stashed microbatch; grads empty: no parameter gradient.
detail::BlockContext context(const ModelConfig& config, const ParamLayout& layout, Backend& be, DType compute,
                             ConstView params, const BlockStash& s, View grads) {
  const bool bert = config.is_bert();
  return {be, compute, config.d_model, s.batch * s.seq, s.batch, s.seq, config.heads,
          bert ? AttentionMask::bidirectional(s.lengths.cview()) : AttentionMask::causal_mask(),
          bert ? GeluKind::erf : GeluKind::tanh, layout,
          bert ? detail::bert::block_roles() : detail::gpt::block_roles(), params, grads};
}
}  // namespace

void BlockLayer::forward(ConstView params, ConstView input, int64_t batch, int64_t seq, BlockStash& s, View output,
                         ConstView lengths) const {
  detail::check_microbatch(config_, batch, seq, "block");
  s.batch = batch;
  s.seq = seq;
  s.lengths.reset();
  if (config_.is_bert() && !lengths.empty()) {
    if (lengths.dtype != DType::i32 || lengths.numel < batch)
      throw UsageError(fmt::format("block: the key lengths must be {} i32 values", batch));
    s.lengths = backend_->alloc(DType::i32, batch);
    backend_->copy(lengths.slice(0, batch), s.lengths.view());
  }
  const detail::BlockContext k = context(config_, layout_, *backend_, compute_, params, s, {});
  detail::alloc_block_stash(k, input, s);
  if (config_.ln == LnPlacement::post)
    detail::post_forward(k, input, s, output);
  else
    detail::pre_forward(k, input, s, output);
}

void BlockLayer::recompute(ConstView params, ConstView input, int64_t batch, int64_t seq, BlockStash& stash,
                           ConstView lengths) const {
  detail::check_microbatch(config_, batch, seq, "block");
  Buffer discard = backend_->alloc(compute_, batch * seq * config_.d_model);
  forward(params, input, batch, seq, stash, discard.view(), lengths);
}

void BlockLayer::backward(ConstView params, const BlockStash& s, ConstView grad_output, View grad_input,
                          View grads) const {
  const detail::BlockContext k = context(config_, layout_, *backend_, compute_, params, s, grads);
  if (config_.ln == LnPlacement::post)
    detail::post_backward(k, s, grad_output, grad_input);
  else
    detail::pre_backward(k, s, grad_output, grad_input);
}

int64_t BlockWeightStash::bytes() const {
  int64_t total = 0;
  for (const Buffer* b : {&dy, &dfc, &dln2, &dx1, &dqkv, &dln1}) total += b->bytes();
  return total;
}

// B frees the stash buffers only it reads (qkv, the attention stash, fc); the lengths stay for W's owner.
void BlockLayer::backward_input(ConstView params, BlockStash& s, ConstView grad_output, View grad_input,
                                BlockWeightStash& w) const {
  const detail::BlockContext k = context(config_, layout_, *backend_, compute_, params, s, {});
  if (config_.ln == LnPlacement::post)
    detail::post_backward_input(k, s, grad_output, grad_input, w);
  else
    detail::pre_backward_input(k, s, grad_output, grad_input, w);
  for (Buffer* b : {&s.qkv, &s.attn_stash, &s.fc}) b->reset();
}

void BlockLayer::backward_weight(ConstView params, BlockStash& s, BlockWeightStash& w, View grads) const {
  const detail::BlockContext k = context(config_, layout_, *backend_, compute_, params, s, grads);
  if (config_.ln == LnPlacement::post)
    detail::post_backward_weight(k, s, w);
  else
    detail::pre_backward_weight(k, s, w);
  w = BlockWeightStash{};
  s = BlockStash{};
}

template <typename T>
HostBlock<T>::HostBlock(const ModelConfig& config, int64_t block, uint64_t seed, Buffers buffers)
    : LayerBuffers<T>(config, block_layer(config, block), seed, buffers),
      layer_(config, block, default_backend(), dtype_of<T>()) {}

template <typename T>
void HostBlock<T>::forward(const T* params, const T* input, int64_t batch, int64_t seq, Stash& stash, T* output,
                           const int32_t* lengths) const {
  detail::check_microbatch(this->config_, batch, seq, "block");
  const int64_t act = batch * seq * this->config_.d_model;
  layer_.forward(detail::host(params, layout_numel(this->layout_)), detail::host(input, act), batch, seq, stash,
                 detail::host(output, act), detail::host(lengths, batch));
}

template <typename T>
void HostBlock<T>::recompute(const T* params, const T* input, int64_t batch, int64_t seq, Stash& stash,
                             const int32_t* lengths) const {
  detail::check_microbatch(this->config_, batch, seq, "block");
  layer_.recompute(detail::host(params, layout_numel(this->layout_)),
                   detail::host(input, batch * seq * this->config_.d_model), batch, seq, stash,
                   detail::host(lengths, batch));
}

template <typename T>
void HostBlock<T>::backward(const T* params, const Stash& stash, const T* grad_output, T* grad_input, T* grads) const {
  const int64_t act = stash.batch * stash.seq * this->config_.d_model, numel = layout_numel(this->layout_);
  layer_.backward(detail::host(params, numel), stash, detail::host(grad_output, act), detail::host(grad_input, act),
                  detail::host(grads, numel));
}

template class HostBlock<float>;
template class HostBlock<double>;

}  // namespace pd2bw::executor

// GPT transformer block (pre-LN, causal attention, GELU MLP): forward, recompute and backward.
#include "gpt_internal.hpp"
#include "pd2bw/executor/ops.hpp"

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

template <typename T>
int64_t GptBlock<T>::Stash::bytes() const {
  int64_t total = 0;
  for (const std::vector<T>* v :
       {&x, &ln1, &ln1_mean, &ln1_rstd, &qkv, &probs, &attn, &x1, &ln2, &ln2_mean, &ln2_rstd, &fc, &fc_act}) {
    total += detail::vector_bytes(*v);
  }
  return total;
}

template <typename T>
GptBlock<T>::GptBlock(const GptConfig& config, int64_t block, uint64_t seed, Buffers buffers)
    : LayerBuffers<T>(config, block_layer(config, block), seed, buffers) {}

template <typename T>
void GptBlock<T>::forward(const T* params, const T* input, int64_t batch, int64_t seq, Stash& s,
                          T* output) const {
  const GptConfig& cfg = this->config_;
  detail::check_microbatch(cfg, batch, seq, "block");
  const int64_t c = cfg.d_model;
  const int64_t n = batch * seq;
  const auto p = [&](Tensor t) { return params + this->layout_[t].offset; };
  s.batch = batch;
  s.seq = seq;
  s.x.assign(input, input + n * c);
  for (std::vector<T>* v : {&s.ln1, &s.attn, &s.x1, &s.ln2}) detail::resize(*v, n * c);
  for (std::vector<T>* v : {&s.ln1_mean, &s.ln1_rstd, &s.ln2_mean, &s.ln2_rstd}) detail::resize(*v, n);
  detail::resize(s.qkv, n * 3 * c);
  detail::resize(s.probs, batch * cfg.heads * seq * seq);
  detail::resize(s.fc, n * 4 * c);
  detail::resize(s.fc_act, n * 4 * c);

  cpu::layernorm_forward(input, p(kLn1W), p(kLn1B), s.ln1.data(), s.ln1_mean.data(), s.ln1_rstd.data(), n, c);
  cpu::linear_forward(s.ln1.data(), p(kAttnW), p(kAttnB), s.qkv.data(), n, c, 3 * c);
  cpu::attention_forward(s.qkv.data(), s.attn.data(), s.probs.data(), batch, seq, c, cfg.heads);
  // The projections land in `output`, used as scratch before it receives the block's result.
  cpu::linear_forward(s.attn.data(), p(kProjW), p(kProjB), output, n, c, c);
  cpu::add(input, output, s.x1.data(), n * c);
  cpu::layernorm_forward(s.x1.data(), p(kLn2W), p(kLn2B), s.ln2.data(), s.ln2_mean.data(), s.ln2_rstd.data(),
                         n, c);
  cpu::linear_forward(s.ln2.data(), p(kFcW), p(kFcB), s.fc.data(), n, c, 4 * c);
  cpu::gelu_forward(s.fc.data(), s.fc_act.data(), n * 4 * c);
  cpu::linear_forward(s.fc_act.data(), p(kMlpProjW), p(kMlpProjB), output, n, 4 * c, c);
  cpu::add(s.x1.data(), output, output, n * c);
}

template <typename T>
void GptBlock<T>::recompute(const T* params, const T* input, int64_t batch, int64_t seq, Stash& stash) const {
  detail::check_microbatch(this->config_, batch, seq, "block");
  std::vector<T> discard(static_cast<size_t>(batch * seq * this->config_.d_model));
  forward(params, input, batch, seq, stash, discard.data());
}

template <typename T>
void GptBlock<T>::backward(const T* params, const Stash& s, const T* grad_output, T* grad_input,
                           T* grads) const {
  const GptConfig& cfg = this->config_;
  const int64_t c = cfg.d_model;
  const int64_t n = s.batch * s.seq;
  const auto p = [&](Tensor t) { return params + this->layout_[t].offset; };
  const auto g = [&](Tensor t) { return grads + this->layout_[t].offset; };
  std::vector<T> dx1(grad_output, grad_output + n * c);  // the residual path carries dy straight through
  std::vector<T> wide(static_cast<size_t>(n * 4 * c));   // (N, 4C), then (N, 3C)
  std::vector<T> narrow(static_cast<size_t>(n * c));     // (N, C) scratch

  // MLP: y = x1 + c_proj(gelu(c_fc(ln_2(x1)))).
  cpu::linear_backward(grad_output, s.fc_act.data(), p(kMlpProjW), wide.data(), g(kMlpProjW), g(kMlpProjB), n,
                       4 * c, c);
  cpu::gelu_backward(wide.data(), s.fc.data(), wide.data(), n * 4 * c);
  cpu::linear_backward(wide.data(), s.ln2.data(), p(kFcW), narrow.data(), g(kFcW), g(kFcB), n, c, 4 * c);
  cpu::layernorm_backward(narrow.data(), s.x1.data(), p(kLn2W), s.ln2_mean.data(), s.ln2_rstd.data(),
                          grad_input, g(kLn2W), g(kLn2B), n, c);
  cpu::accumulate(dx1.data(), grad_input, n * c);

  // Attention: x1 = x + c_proj(attn(c_attn(ln_1(x)))).
  cpu::linear_backward(dx1.data(), s.attn.data(), p(kProjW), narrow.data(), g(kProjW), g(kProjB), n, c, c);
  cpu::attention_backward(narrow.data(), s.qkv.data(), s.probs.data(), wide.data(), s.batch, s.seq, c,
                          cfg.heads);
  cpu::linear_backward(wide.data(), s.ln1.data(), p(kAttnW), narrow.data(), g(kAttnW), g(kAttnB), n, c,
                       3 * c);
  cpu::layernorm_backward(narrow.data(), s.x.data(), p(kLn1W), s.ln1_mean.data(), s.ln1_rstd.data(),
                          grad_input, g(kLn1W), g(kLn1B), n, c);
  cpu::accumulate(grad_input, dx1.data(), n * c);
}

static_assert(kCount == 12, "a block has 12 parameter tensors");

template class GptBlock<float>;
template class GptBlock<double>;

}  // namespace pd2bw::executor

// GPT last layer: final layer norm, LM head (own or tied to wte) and mean softmax cross-entropy.
#include "gpt_internal.hpp"
#include "pd2bw/executor/ops.hpp"

namespace pd2bw::executor {
namespace {
// Offsets in the head's layout: ln_f.weight, ln_f.bias, then lm_head.weight when untied.
constexpr int64_t kGamma = 0;
}  // namespace

template <typename T>
int64_t GptHead<T>::Stash::bytes() const {
  return detail::vector_bytes(targets) + detail::vector_bytes(x) + detail::vector_bytes(ln) +
         detail::vector_bytes(ln_mean) + detail::vector_bytes(ln_rstd) + detail::vector_bytes(logits) +
         detail::vector_bytes(lse);
}

template <typename T>
GptHead<T>::GptHead(const GptConfig& config, uint64_t seed, Buffers buffers)
    : LayerBuffers<T>(config, config.blocks + 1, seed, buffers) {}

template <typename T>
const T* GptHead<T>::lm_head(const T* params, const T* wte) const {
  if (!this->config_.tie_embeddings) return params + 2 * this->config_.d_model;
  if (wte == nullptr) {
    throw UsageError("head: tied embeddings need the embedding's wte table, but none was passed");
  }
  return wte;
}

template <typename T>
double GptHead<T>::forward(const T* params, const T* wte, const T* input, const int32_t* targets,
                           int64_t batch, int64_t seq, Stash& stash) const {
  const GptConfig& cfg = this->config_;
  detail::check_microbatch(cfg, batch, seq, "head");
  const T* weight = lm_head(params, wte);
  const int64_t n = batch * seq;
  const int64_t c = cfg.d_model;
  stash.batch = batch;
  stash.seq = seq;
  stash.targets.assign(targets, targets + n);
  stash.x.assign(input, input + n * c);
  detail::resize(stash.ln, n * c);
  detail::resize(stash.ln_mean, n);
  detail::resize(stash.ln_rstd, n);
  detail::resize(stash.logits, n * cfg.vocab);
  detail::resize(stash.lse, n);
  cpu::layernorm_forward(input, params + kGamma, params + c, stash.ln.data(), stash.ln_mean.data(),
                         stash.ln_rstd.data(), n, c);
  cpu::linear_forward<T>(stash.ln.data(), weight, nullptr, stash.logits.data(), n, c, cfg.vocab);
  return cpu::cross_entropy_forward(stash.logits.data(), targets, stash.lse.data(), n, cfg.vocab);
}

template <typename T>
double GptHead<T>::recompute(const T* params, const T* wte, const T* input, const int32_t* targets,
                             int64_t batch, int64_t seq, Stash& stash) const {
  return forward(params, wte, input, targets, batch, seq, stash);
}

template <typename T>
void GptHead<T>::backward(const T* params, const T* wte, const Stash& stash, double loss_scale, T* grad_input,
                          T* grads, T* dwte) const {
  const GptConfig& cfg = this->config_;
  const T* weight = lm_head(params, wte);
  T* dweight = cfg.tie_embeddings ? dwte : grads + 2 * cfg.d_model;
  if (dweight == nullptr) {
    throw UsageError(
        "head: tied embeddings need a dwte buffer for the LM-head gradient, but none was passed");
  }
  const int64_t n = stash.batch * stash.seq;
  const int64_t c = cfg.d_model;
  std::vector<T> dlogits(stash.logits.size());
  std::vector<T> dln(static_cast<size_t>(n * c));
  cpu::cross_entropy_backward(stash.logits.data(), stash.targets.data(), stash.lse.data(), dlogits.data(), n,
                              cfg.vocab, loss_scale);
  cpu::linear_backward<T>(dlogits.data(), stash.ln.data(), weight, dln.data(), dweight, nullptr, n, c,
                          cfg.vocab);
  cpu::layernorm_backward(dln.data(), stash.x.data(), params + kGamma, stash.ln_mean.data(),
                          stash.ln_rstd.data(), grad_input, grads + kGamma, grads + c, n, c);
}

template class GptHead<float>;
template class GptHead<double>;

}  // namespace pd2bw::executor

// GPT layer 0: token + position embedding over the owned or a caller-held weight version.
#include "gpt_internal.hpp"
#include "pd2bw/executor/ops.hpp"

namespace pd2bw::executor {

template <typename T>
int64_t GptEmbedding<T>::Stash::bytes() const {
  return detail::vector_bytes(tokens);
}

template <typename T>
GptEmbedding<T>::GptEmbedding(const GptConfig& config, uint64_t seed, Buffers buffers)
    : LayerBuffers<T>(config, 0, seed, buffers) {}

template <typename T>
void GptEmbedding<T>::forward(const T* params, const int32_t* tokens, int64_t batch, int64_t seq,
                              Stash& stash, T* out) const {
  const GptConfig& cfg = this->config_;
  detail::check_microbatch(cfg, batch, seq, "embedding");
  const T* wte = params + kWteOffset;
  const T* wpe = params + cfg.vocab * cfg.d_model;
  cpu::embedding_forward(tokens, wte, wpe, out, batch, seq, cfg.d_model, cfg.vocab);
  stash.batch = batch;
  stash.seq = seq;
  stash.tokens.assign(tokens, tokens + batch * seq);
}

template <typename T>
void GptEmbedding<T>::backward(const Stash& stash, const T* grad_out, T* grads) const {
  const GptConfig& cfg = this->config_;
  T* dwte = grads + kWteOffset;
  T* dwpe = grads + cfg.vocab * cfg.d_model;
  cpu::embedding_backward(stash.tokens.data(), grad_out, dwte, dwpe, stash.batch, stash.seq, cfg.d_model);
}

template class GptEmbedding<float>;
template class GptEmbedding<double>;

}  // namespace pd2bw::executor

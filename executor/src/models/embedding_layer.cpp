// Layer 0 of every family: EmbeddingLayer runs the family's embedding (models/<family>/embedding.cpp);
// HostEmbedding is its typed convenience over the cpu backend.
#include "models/family.hpp"

namespace pd2bw::executor {

int64_t EmbeddingStash::bytes() const {
  return tokens.bytes() + types.bytes() + sum.bytes() + ln_mean.bytes() + ln_rstd.bytes() + ln_gamma.bytes();
}

EmbeddingLayer::EmbeddingLayer(const ModelConfig& config, Backend& backend, DType compute)
    : config_(config), backend_(&backend), compute_(compute) {
  config_.validate();
  detail::check_backend(backend, compute, "embedding");
}

void EmbeddingLayer::forward(ConstView params, ConstView tokens, int64_t batch, int64_t seq, EmbeddingStash& stash,
                             View out, ConstView types) const {
  detail::check_microbatch(config_, batch, seq, "embedding");
  stash = EmbeddingStash{};
  stash.batch = batch;
  stash.seq = seq;
  const detail::LayerCall k{config_, *backend_, compute_};
  if (!config_.is_bert()) return detail::gpt::embedding_forward(k, params, tokens, stash, out);
  if (types.empty() || types.dtype != DType::i32 || types.numel < batch * seq)
    throw UsageError(fmt::format("embedding: a bert microbatch needs its {} x {} token types (i32)", batch, seq));
  detail::bert::embedding_forward(k, params, tokens, types, stash, out);
}

void EmbeddingLayer::backward(const EmbeddingStash& stash, ConstView grad_out, View grads) const {
  const detail::LayerCall k{config_, *backend_, compute_};
  if (config_.is_bert())
    detail::bert::embedding_backward(k, stash, grad_out, grads);
  else
    detail::gpt::embedding_backward(k, stash, grad_out, grads);
}

template <typename T>
HostEmbedding<T>::HostEmbedding(const ModelConfig& config, uint64_t seed, Buffers buffers)
    : LayerBuffers<T>(config, 0, seed, buffers), layer_(config, default_backend(), dtype_of<T>()) {}

template <typename T>
void HostEmbedding<T>::forward(const T* params, const int32_t* tokens, int64_t batch, int64_t seq, Stash& stash,
                               T* out, const int32_t* types) const {
  const ModelConfig& c = this->config_;
  detail::check_microbatch(c, batch, seq, "embedding");
  layer_.forward(detail::host(params, layout_numel(this->layout_)), detail::host(tokens, batch * seq), batch, seq,
                 stash, detail::host(out, batch * seq * c.d_model), detail::host(types, batch * seq));
}

template <typename T>
void HostEmbedding<T>::backward(const Stash& stash, const T* grad_out, T* grads) const {
  layer_.backward(stash, detail::host(grad_out, stash.batch * stash.seq * this->config_.d_model),
                  detail::host(grads, layout_numel(this->layout_)));
}

template class HostEmbedding<float>;
template class HostEmbedding<double>;

}  // namespace pd2bw::executor

// GPT layer 0: token + position embedding over a caller-held weight version.
#include "gpt_internal.hpp"

namespace pd2bw::executor {

EmbeddingLayer::EmbeddingLayer(const GptConfig& config, Backend& backend, DType compute)
    : config_(config), backend_(&backend), compute_(compute) {
  config_.validate();
  detail::check_backend(backend, compute, "embedding");
}

void EmbeddingLayer::forward(ConstView params, ConstView tokens, int64_t batch, int64_t seq, EmbeddingStash& stash,
                             View out) const {
  const GptConfig& cfg = config_;
  detail::check_microbatch(cfg, batch, seq, "embedding");
  const int64_t table = cfg.vocab * cfg.d_model;
  backend_->embedding_forward(tokens, params.slice(kWteOffset, table), params.slice(table, cfg.seq_len * cfg.d_model),
                              out, batch, seq, cfg.d_model, cfg.vocab);
  stash.batch = batch;
  stash.seq = seq;
  stash.tokens = backend_->alloc(DType::i32, batch * seq);
  backend_->copy(tokens.slice(0, batch * seq), stash.tokens.view());
}

void EmbeddingLayer::backward(const EmbeddingStash& stash, ConstView grad_out, View grads) const {
  const GptConfig& cfg = config_;
  const int64_t table = cfg.vocab * cfg.d_model;
  backend_->embedding_backward(stash.tokens.view(), grad_out, grads.slice(kWteOffset, table),
                               grads.slice(table, cfg.seq_len * cfg.d_model), stash.batch, stash.seq, cfg.d_model);
}

template <typename T>
GptEmbedding<T>::GptEmbedding(const GptConfig& config, uint64_t seed, Buffers buffers)
    : LayerBuffers<T>(config, 0, seed, buffers), layer_(config, default_backend(), dtype_of<T>()) {}

template <typename T>
void GptEmbedding<T>::forward(const T* params, const int32_t* tokens, int64_t batch, int64_t seq, Stash& stash,
                              T* out) const {
  const GptConfig& c = this->config_;
  detail::check_microbatch(c, batch, seq, "embedding");
  layer_.forward(detail::host(params, layout_numel(this->layout_)), detail::host(tokens, batch * seq), batch, seq,
                 stash, detail::host(out, batch * seq * c.d_model));
}

template <typename T>
void GptEmbedding<T>::backward(const Stash& stash, const T* grad_out, T* grads) const {
  layer_.backward(stash, detail::host(grad_out, stash.batch * stash.seq * this->config_.d_model),
                  detail::host(grads, layout_numel(this->layout_)));
}

template class GptEmbedding<float>;
template class GptEmbedding<double>;

}  // namespace pd2bw::executor

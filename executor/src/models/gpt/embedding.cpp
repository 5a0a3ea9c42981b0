// GPT layer 0: token + position embedding.
#include "models/family.hpp"

namespace pd2bw::executor::detail::gpt {

void embedding_forward(const LayerCall& k, ConstView params, ConstView tokens, EmbeddingStash& s, View out) {
  const ModelConfig& cfg = k.config;
  const int64_t table = cfg.vocab * cfg.d_model, n = s.batch * s.seq;
  k.be.embedding_forward(tokens, params.slice(EmbeddingLayer::kWteOffset, table),
                         params.slice(table, cfg.seq_len * cfg.d_model), out, s.batch, s.seq, cfg.d_model, cfg.vocab);
  s.tokens = k.be.alloc(DType::i32, n);
  k.be.copy(tokens.slice(0, n), s.tokens.view());
}

void embedding_backward(const LayerCall& k, const EmbeddingStash& s, ConstView grad_out, View grads) {
  const ModelConfig& cfg = k.config;
  const int64_t table = cfg.vocab * cfg.d_model;
  k.be.embedding_backward(s.tokens.view(), grad_out, grads.slice(EmbeddingLayer::kWteOffset, table),
                          grads.slice(table, cfg.seq_len * cfg.d_model), s.batch, s.seq, cfg.d_model);
}

}  // namespace pd2bw::executor::detail::gpt

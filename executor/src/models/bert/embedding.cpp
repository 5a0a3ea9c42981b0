// BERT layer 0: LayerNorm(word + position + token-type embedding).
#include "models/family.hpp"

namespace pd2bw::executor::detail::bert {

void embedding_forward(const LayerCall& k, ConstView params, ConstView tokens, ConstView types, EmbeddingStash& s,
                       View out) {
  const ModelConfig& cfg = k.config;
  const int64_t c = cfg.d_model, n = s.batch * s.seq;
  const EmbeddingOffsets at = embedding_offsets(cfg);
  Backend& be = k.be;
  const DType acc = accumulate_dtype(k.compute);
  s.tokens = be.alloc(DType::i32, n);
  be.copy(tokens.slice(0, n), s.tokens.view());
  s.types = be.alloc(DType::i32, n);
  be.copy(types.slice(0, n), s.types.view());
  s.sum = be.alloc(k.compute, n * c);
  s.ln_mean = be.alloc(acc, n);
  s.ln_rstd = be.alloc(acc, n);
  s.ln_gamma = be.alloc(k.compute, c);
  be.copy(params.slice(at.ln_w, c), s.ln_gamma.view());
  be.embedding_forward(tokens, params.slice(EmbeddingLayer::kWteOffset, cfg.vocab * c),
                       params.slice(at.position, cfg.seq_len * c), s.sum.view(), s.batch, s.seq, c, cfg.vocab);
  be.type_embedding_forward(types, params.slice(at.type, kBertTypeVocab * c), s.sum.view(), n, c, kBertTypeVocab);
  be.layernorm_forward(s.sum.view(), params.slice(at.ln_w, c), params.slice(at.ln_b, c), out, s.ln_mean.view(),
                       s.ln_rstd.view(), n, c);
}

void embedding_backward(const LayerCall& k, const EmbeddingStash& s, ConstView grad_out, View grads) {
  const ModelConfig& cfg = k.config;
  const int64_t c = cfg.d_model, n = s.batch * s.seq;
  const EmbeddingOffsets at = embedding_offsets(cfg);
  Backend& be = k.be;
  Buffer dsum = be.alloc(k.compute, n * c);
  be.layernorm_backward(grad_out, s.sum.view(), s.ln_gamma.view(), s.ln_mean.view(), s.ln_rstd.view(), dsum.view(),
                        grads.slice(at.ln_w, c), grads.slice(at.ln_b, c), n, c);
  be.embedding_backward(s.tokens.view(), dsum.view(), grads.slice(EmbeddingLayer::kWteOffset, cfg.vocab * c),
                        grads.slice(at.position, cfg.seq_len * c), s.batch, s.seq, c);
  be.type_embedding_backward(s.types.view(), dsum.view(), grads.slice(at.type, kBertTypeVocab * c), n, c,
                             kBertTypeVocab);
}

}  // namespace pd2bw::executor::detail::bert

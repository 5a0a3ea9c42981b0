// BERT's parameter layouts (Hugging Face BertForMaskedLM names) and BERT's initialisation scale.
#include <fmt/format.h>

#include <string>

#include "models/family.hpp"

namespace pd2bw::executor::detail::bert {

ParamLayout embedding_layout(const ModelConfig& config) {
  const int64_t c = config.d_model;
  ParamLayout out;
  push_tensor(out, "bert.embeddings.word_embeddings.weight", {config.vocab, c});
  push_tensor(out, "bert.embeddings.position_embeddings.weight", {config.seq_len, c});
  push_tensor(out, "bert.embeddings.token_type_embeddings.weight", {kBertTypeVocab, c});
  push_tensor(out, "bert.embeddings.LayerNorm.weight", {c});
  push_tensor(out, "bert.embeddings.LayerNorm.bias", {c});
  return out;
}

EmbeddingOffsets embedding_offsets(const ModelConfig& config) {
  const ParamLayout l = embedding_layout(config);
  return {l[1].offset, l[2].offset, l[3].offset, l[4].offset};
}

// Query, key and value back to back (weights, then biases), so they form the shared block's fused
// (3C, C) projection and its (3C) bias.
ParamLayout block_layout(const ModelConfig& config, int64_t block) {
  const int64_t c = config.d_model;
  const std::string p = fmt::format("bert.encoder.layer.{}.", block);
  ParamLayout out;
  for (const char* t : {"query", "key", "value"}) push_tensor(out, fmt::format("{}attention.self.{}.weight", p, t), {c, c});
  for (const char* t : {"query", "key", "value"}) push_tensor(out, fmt::format("{}attention.self.{}.bias", p, t), {c});
  push_tensor(out, p + "attention.output.dense.weight", {c, c});
  push_tensor(out, p + "attention.output.dense.bias", {c});
  push_tensor(out, p + "attention.output.LayerNorm.weight", {c});
  push_tensor(out, p + "attention.output.LayerNorm.bias", {c});
  push_tensor(out, p + "intermediate.dense.weight", {4 * c, c});
  push_tensor(out, p + "intermediate.dense.bias", {4 * c});
  push_tensor(out, p + "output.dense.weight", {c, 4 * c});
  push_tensor(out, p + "output.dense.bias", {c});
  push_tensor(out, p + "output.LayerNorm.weight", {c});
  push_tensor(out, p + "output.LayerNorm.bias", {c});
  return out;
}

// attention.output.LayerNorm plays ln_1 and output.LayerNorm ln_2 in both placements.
BlockRoles block_roles() {
  BlockRoles r{};
  r.qkv_w = 0;  // query.weight, then key and value
  r.qkv_b = 3;  // query.bias, then key and value
  r.proj_w = 6;
  r.proj_b = 7;
  r.ln1_w = 8;
  r.ln1_b = 9;
  r.fc_w = 10;
  r.fc_b = 11;
  r.out_w = 12;
  r.out_b = 13;
  r.ln2_w = 14;
  r.ln2_b = 15;
  return r;
}

// The masked-LM head: (pre-LN only) the encoder's final layer norm, the transform (dense + GELU + layer
// norm) and the decoder's bias; the decoder's weight is the word table (tied).
ParamLayout head_layout(const ModelConfig& config) {
  const int64_t c = config.d_model;
  ParamLayout out;
  if (config.ln == LnPlacement::pre) {
    push_tensor(out, "bert.encoder.final_layernorm.weight", {c});
    push_tensor(out, "bert.encoder.final_layernorm.bias", {c});
  }
  push_tensor(out, "cls.predictions.transform.dense.weight", {c, c});
  push_tensor(out, "cls.predictions.transform.dense.bias", {c});
  push_tensor(out, "cls.predictions.transform.LayerNorm.weight", {c});
  push_tensor(out, "cls.predictions.transform.LayerNorm.bias", {c});
  push_tensor(out, "cls.predictions.bias", {config.vocab});
  return out;
}

// BERT draws every matrix and table from N(0, 0.02^2) (initializer_range).
double init_std(const ModelConfig& /*config*/, std::string_view /*tensor_name*/) { return 0.02; }

}  // namespace pd2bw::executor::detail::bert

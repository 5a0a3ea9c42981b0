// GPT's parameter layouts (Hugging Face GPT2LMHeadModel names) and GPT-2's initialisation scale.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>

#include "models/family.hpp"

namespace pd2bw::executor::detail::gpt {

ParamLayout embedding_layout(const ModelConfig& config) {
  ParamLayout out;
  push_tensor(out, "wte.weight", {config.vocab, config.d_model});
  push_tensor(out, "wpe.weight", {config.seq_len, config.d_model});
  return out;
}

ParamLayout block_layout(const ModelConfig& config, int64_t block) {
  const int64_t c = config.d_model;
  const std::string p = fmt::format("h.{}.", block);
  ParamLayout out;
  push_tensor(out, p + "ln_1.weight", {c});
  push_tensor(out, p + "ln_1.bias", {c});
  push_tensor(out, p + "attn.c_attn.weight", {3 * c, c});
  push_tensor(out, p + "attn.c_attn.bias", {3 * c});
  push_tensor(out, p + "attn.c_proj.weight", {c, c});
  push_tensor(out, p + "attn.c_proj.bias", {c});
  push_tensor(out, p + "ln_2.weight", {c});
  push_tensor(out, p + "ln_2.bias", {c});
  push_tensor(out, p + "mlp.c_fc.weight", {4 * c, c});
  push_tensor(out, p + "mlp.c_fc.bias", {4 * c});
  push_tensor(out, p + "mlp.c_proj.weight", {c, 4 * c});
  push_tensor(out, p + "mlp.c_proj.bias", {c});
  return out;
}

ParamLayout head_layout(const ModelConfig& config) {
  ParamLayout out;
  push_tensor(out, "ln_f.weight", {config.d_model});
  push_tensor(out, "ln_f.bias", {config.d_model});
  if (!config.tie_embeddings) push_tensor(out, "lm_head.weight", {config.vocab, config.d_model});
  return out;
}

BlockRoles block_roles() { return {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}; }

// GPT-2 scales the residual projections by 1 / sqrt(2 blocks).
double init_std(const ModelConfig& config, std::string_view tensor_name) {
  const double std_dev = 0.02;
  if (!tensor_name.ends_with("c_proj.weight")) return std_dev;
  return std_dev / std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(config.blocks, 1)));
}

}  // namespace pd2bw::executor::detail::gpt

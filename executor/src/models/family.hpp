// What each model family contributes (executor/src/models/<family>/): its layers' parameter layouts and
// initialisation scale, and where the shared block (models/common/block.cpp) finds its tensors. A third
// family adds a folder with these functions and a case in model_config.cpp. Not a public header.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "models/layer_internal.hpp"
#include "pd2bw/executor/layers.hpp"
#include "pd2bw/executor/model.hpp"

namespace pd2bw::executor::detail {

// Indices into a block's layout of the tensors the shared block reads, by role. qkv_w is a (3C, C)
// matrix and qkv_b a (3C) vector: a family that names q, k and v apart lays them out back to back.
struct BlockRoles {
  size_t ln1_w, ln1_b;    // pre-LN: normalises the block input; post-LN: the attention residual sum
  size_t qkv_w, qkv_b;    // the fused query/key/value projection
  size_t proj_w, proj_b;  // attention output projection (C, C)
  size_t ln2_w, ln2_b;    // pre-LN: normalises the MLP input; post-LN: the MLP residual sum
  size_t fc_w, fc_b;      // MLP up-projection (4C, C)
  size_t out_w, out_b;    // MLP down-projection (C, 4C)
};

// The layouts of one family's three layer kinds; `block` is the block's index in [0, blocks).
namespace gpt {
ParamLayout embedding_layout(const ModelConfig& config);
ParamLayout block_layout(const ModelConfig& config, int64_t block);
ParamLayout head_layout(const ModelConfig& config);
BlockRoles block_roles();
// The standard deviation of a matrix's normal initialisation.
double init_std(const ModelConfig& config, std::string_view tensor_name);
}  // namespace gpt

namespace bert {
ParamLayout embedding_layout(const ModelConfig& config);
ParamLayout block_layout(const ModelConfig& config, int64_t block);
ParamLayout head_layout(const ModelConfig& config);
BlockRoles block_roles();
double init_std(const ModelConfig& config, std::string_view tensor_name);
// Offsets of the embedding's tensors after the word table (which leads, at 0): the position table
// (Tmax, C), the token-type table (2, C), and the layer norm's gamma and beta (C).
struct EmbeddingOffsets {
  int64_t position, type, ln_w, ln_b;
};
EmbeddingOffsets embedding_offsets(const ModelConfig& config);
}  // namespace bert

// One call of a layer on a backend in a compute dtype, for the families' embedding and head functions.
struct LayerCall {
  const ModelConfig& config;
  Backend& be;
  DType compute;
};

namespace gpt {
// EmbeddingLayer and HeadLayer for gpt (models/gpt/); arguments as theirs.
void embedding_forward(const LayerCall& k, ConstView params, ConstView tokens, EmbeddingStash& s, View out);
void embedding_backward(const LayerCall& k, const EmbeddingStash& s, ConstView grad_out, View grads);
void head_forward(const LayerCall& k, ConstView params, ConstView lm_head, ConstView input, HeadStash& s, View loss);
void head_backward(const LayerCall& k, ConstView params, ConstView lm_head, HeadStash& s, double loss_scale,
                   View grad_input, View grads, View dlm_head);
void head_backward_input(const LayerCall& k, ConstView params, ConstView lm_head, HeadStash& s, double loss_scale,
                         View grad_input, HeadWeightStash& w);
void head_backward_weight(const LayerCall& k, ConstView params, HeadStash& s, HeadWeightStash& w, View grads,
                          View dlm_head);
}  // namespace gpt

namespace bert {
// EmbeddingLayer and HeadLayer for bert (models/bert/); the decoder's weight is the word table `wte`.
void embedding_forward(const LayerCall& k, ConstView params, ConstView tokens, ConstView types, EmbeddingStash& s,
                       View out);
void embedding_backward(const LayerCall& k, const EmbeddingStash& s, ConstView grad_out, View grads);
void head_forward(const LayerCall& k, ConstView params, ConstView wte, ConstView input, HeadStash& s, View loss);
void head_backward(const LayerCall& k, ConstView params, ConstView wte, HeadStash& s, double loss_scale,
                   View grad_input, View grads, View dwte);
void head_backward_input(const LayerCall& k, ConstView params, ConstView wte, HeadStash& s, double loss_scale,
                         View grad_input, HeadWeightStash& w);
void head_backward_weight(const LayerCall& k, ConstView params, HeadStash& s, HeadWeightStash& w, View grads,
                          View dwte);
}  // namespace bert


}  // namespace pd2bw::executor::detail

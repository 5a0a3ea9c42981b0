// The shared transformer block's pieces: one context per call (the backend, the shapes, the family's
// attention mask and GELU, the parameters by role) and the two arrangements of the same ops, pre-LN
// (block_pre.cpp) and post-LN (block_post.cpp). Each arrangement has a forward, a fused backward and
// the backward's input (B) and weight (W) halves, which make the same backend calls on the same operands
// as the fused one. Not a public header.
#pragma once

#include "models/family.hpp"
#include "models/layer_internal.hpp"

namespace pd2bw::executor::detail {

struct BlockContext {
  Backend& be;
  DType compute;
  int64_t c = 0, n = 0, batch = 0, seq = 0, heads = 0;
  AttentionMask mask;
  GeluKind gelu = GeluKind::tanh;
  const ParamLayout& layout;
  BlockRoles roles;
  ConstView params;
  View grads;  // empty where a call computes no parameter gradient

  // Elements of a role's tensor: the fused projection spans q, k and v (3C x C, 3C) even where the family
  // names them apart (then its first tensor is q's, and k's and v's follow).
  int64_t numel(size_t role) const {
    if (role == roles.qkv_w) return 3 * c * c;
    return role == roles.qkv_b ? 3 * c : layout[role].numel();
  }
  ConstView p(size_t role) const { return params.slice(layout[role].offset, numel(role)); }
  // The gradient of a role's tensor, or empty when the call computes none.
  View g(size_t role) const { return grads.empty() ? View{} : grads.slice(layout[role].offset, numel(role)); }
};

// Allocates the stash buffers both arrangements fill (x, ln1/ln2 and their statistics, qkv, the attention
// stash, attn, x1, fc, fc_act) and copies the input into stash.x.
void alloc_block_stash(const BlockContext& k, ConstView input, BlockStash& s);

// Allocates what B keeps for W (BlockWeightStash) and copies the block's output gradient into w.dy.
void alloc_weight_stash(const BlockContext& k, ConstView grad_output, BlockWeightStash& w);

// Attention: qkv = c_attn(in), attn = attention(qkv) under the mask, out = c_proj(attn) (N, C).
void attention_part_forward(const BlockContext& k, ConstView in, BlockStash& s, View out);
// MLP: fc = c_fc(in), fc_act = gelu(fc), out = mlp.c_proj(fc_act) (N, C).
void mlp_part_forward(const BlockContext& k, ConstView in, BlockStash& s, View out);

void pre_forward(const BlockContext& k, ConstView input, BlockStash& s, View output);
void pre_backward(const BlockContext& k, const BlockStash& s, ConstView grad_output, View grad_input);
void pre_backward_input(const BlockContext& k, BlockStash& s, ConstView grad_output, View grad_input,
                        BlockWeightStash& w);
void pre_backward_weight(const BlockContext& k, const BlockStash& s, const BlockWeightStash& w);

void post_forward(const BlockContext& k, ConstView input, BlockStash& s, View output);
void post_backward(const BlockContext& k, const BlockStash& s, ConstView grad_output, View grad_input);
void post_backward_input(const BlockContext& k, BlockStash& s, ConstView grad_output, View grad_input,
                         BlockWeightStash& w);
void post_backward_weight(const BlockContext& k, const BlockStash& s, const BlockWeightStash& w);

}  // namespace pd2bw::executor::detail

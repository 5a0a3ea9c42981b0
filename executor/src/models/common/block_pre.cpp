// The pre-LN block (GPT's; BERT's with ln = pre):
//   x1 = x + c_proj(attn(c_attn(ln_1(x))));  y = x1 + mlp.c_proj(gelu(mlp.c_fc(ln_2(x1)))).
#include "models/common/block_parts.hpp"

namespace pd2bw::executor::detail {

void pre_forward(const BlockContext& k, ConstView input, BlockStash& s, View output) {
  const BlockRoles& r = k.roles;
  const int64_t n = k.n, c = k.c;
  Backend& be = k.be;
  be.layernorm_forward(input, k.p(r.ln1_w), k.p(r.ln1_b), s.ln1.view(), s.ln1_mean.view(), s.ln1_rstd.view(), n, c);
  // The projections land in `output`, used as scratch before it receives the block's result.
  attention_part_forward(k, s.ln1.view(), s, output);
  be.add(input, output, s.x1.view(), n * c);
  be.layernorm_forward(s.x1.view(), k.p(r.ln2_w), k.p(r.ln2_b), s.ln2.view(), s.ln2_mean.view(), s.ln2_rstd.view(), n, c);
  mlp_part_forward(k, s.ln2.view(), s, output);
  be.add(s.x1.view(), output, output, n * c);
}

void pre_backward(const BlockContext& k, const BlockStash& s, ConstView grad_output, View grad_input) {
  const BlockRoles& r = k.roles;
  const int64_t n = k.n, c = k.c;
  Backend& be = k.be;
  // wide holds (N, 4C) for the MLP, then (N, 3C) for attention followed by dx1 (N, C): the gradient of
  // x1, where the residual path carries dy straight through.
  Buffer wide = be.alloc(k.compute, n * 4 * c);
  Buffer narrow = be.alloc(k.compute, n * c);  // (N, C) scratch
  const View w4 = wide.view(), w3 = wide.view().slice(0, n * 3 * c), dx1 = wide.view().slice(n * 3 * c, n * c);

  // MLP: y = x1 + c_proj(gelu(c_fc(ln_2(x1)))).
  be.linear_backward(grad_output, s.fc_act.view(), k.p(r.out_w), w4, k.g(r.out_w), k.g(r.out_b), n, 4 * c, c);
  be.gelu_backward(w4, s.fc.view(), w4, n * 4 * c, k.gelu);
  be.linear_backward(w4, s.ln2.view(), k.p(r.fc_w), narrow.view(), k.g(r.fc_w), k.g(r.fc_b), n, c, 4 * c);
  be.layernorm_backward(narrow.view(), s.x1.view(), k.p(r.ln2_w), s.ln2_mean.view(), s.ln2_rstd.view(), grad_input,
                        k.g(r.ln2_w), k.g(r.ln2_b), n, c);
  be.add(grad_output, grad_input, dx1, n * c);

  // Attention: x1 = x + c_proj(attn(c_attn(ln_1(x)))).
  be.linear_backward(dx1, s.attn.view(), k.p(r.proj_w), narrow.view(), k.g(r.proj_w), k.g(r.proj_b), n, c, c);
  be.attention_backward(narrow.view(), s.qkv.view(), s.attn.view(), s.attn_stash.view(), w3, k.batch, k.seq, c, k.heads,
                        k.mask);
  be.linear_backward(w3, s.ln1.view(), k.p(r.qkv_w), narrow.view(), k.g(r.qkv_w), k.g(r.qkv_b), n, c, 3 * c);
  be.layernorm_backward(narrow.view(), s.x.view(), k.p(r.ln1_w), s.ln1_mean.view(), s.ln1_rstd.view(), grad_input,
                        k.g(r.ln1_w), k.g(r.ln1_b), n, c);
  be.accumulate(grad_input, dx1, n * c);
}

// pre_backward() with every parameter gradient left out: the same calls on the same operands, so
// grad_input gets the same bits; the output gradients of the weight products go to `w` for W.
void pre_backward_input(const BlockContext& k, BlockStash& s, ConstView grad_output, View grad_input,
                        BlockWeightStash& w) {
  const BlockRoles& r = k.roles;
  const int64_t n = k.n, c = k.c;
  Backend& be = k.be;
  alloc_weight_stash(k, grad_output, w);
  Buffer dattn = be.alloc(k.compute, n * c);  // (N, C) gradient of the attention output

  be.linear_backward(grad_output, s.fc_act.view(), k.p(r.out_w), w.dfc.view(), {}, {}, n, 4 * c, c);
  be.gelu_backward(w.dfc.view(), s.fc.view(), w.dfc.view(), n * 4 * c, k.gelu);
  be.linear_backward(w.dfc.view(), s.ln2.view(), k.p(r.fc_w), w.dln2.view(), {}, {}, n, c, 4 * c);
  be.layernorm_backward(w.dln2.view(), s.x1.view(), k.p(r.ln2_w), s.ln2_mean.view(), s.ln2_rstd.view(), grad_input, {},
                        {}, n, c);
  be.add(grad_output, grad_input, w.dx1.view(), n * c);
  be.linear_backward(w.dx1.view(), s.attn.view(), k.p(r.proj_w), dattn.view(), {}, {}, n, c, c);
  be.attention_backward(dattn.view(), s.qkv.view(), s.attn.view(), s.attn_stash.view(), w.dqkv.view(), k.batch, k.seq,
                        c, k.heads, k.mask);
  be.linear_backward(w.dqkv.view(), s.ln1.view(), k.p(r.qkv_w), w.dln1.view(), {}, {}, n, c, 3 * c);
  be.layernorm_backward(w.dln1.view(), s.x.view(), k.p(r.ln1_w), s.ln1_mean.view(), s.ln1_rstd.view(), grad_input, {},
                        {}, n, c);
  be.accumulate(grad_input, w.dx1.view(), n * c);
}

// pre_backward()'s parameter gradients, each from the same operands as there (one accumulation per
// tensor, so their order does not matter).
void pre_backward_weight(const BlockContext& k, const BlockStash& s, const BlockWeightStash& w) {
  const BlockRoles& r = k.roles;
  const int64_t n = k.n, c = k.c;
  Backend& be = k.be;
  be.linear_backward(w.dy.view(), s.fc_act.view(), {}, {}, k.g(r.out_w), k.g(r.out_b), n, 4 * c, c);
  be.linear_backward(w.dfc.view(), s.ln2.view(), {}, {}, k.g(r.fc_w), k.g(r.fc_b), n, c, 4 * c);
  be.layernorm_backward(w.dln2.view(), s.x1.view(), k.p(r.ln2_w), s.ln2_mean.view(), s.ln2_rstd.view(), {},
                        k.g(r.ln2_w), k.g(r.ln2_b), n, c);
  be.linear_backward(w.dx1.view(), s.attn.view(), {}, {}, k.g(r.proj_w), k.g(r.proj_b), n, c, c);
  be.linear_backward(w.dqkv.view(), s.ln1.view(), {}, {}, k.g(r.qkv_w), k.g(r.qkv_b), n, c, 3 * c);
  be.layernorm_backward(w.dln1.view(), s.x.view(), k.p(r.ln1_w), s.ln1_mean.view(), s.ln1_rstd.view(), {},
                        k.g(r.ln1_w), k.g(r.ln1_b), n, c);
}

}  // namespace pd2bw::executor::detail

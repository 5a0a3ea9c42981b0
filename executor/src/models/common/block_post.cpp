// The post-LN block (BERT's):
//   x1 = ln_1(x + c_proj(attn(c_attn(x))));  y = ln_2(x1 + mlp.c_proj(gelu(mlp.c_fc(x1)))).
// The stash's ln1 and ln2 hold the sums the norms read (their outputs are x1 and y).
#include "models/common/block_parts.hpp"

namespace pd2bw::executor::detail {

void post_forward(const BlockContext& k, ConstView input, BlockStash& s, View output) {
  const BlockRoles& r = k.roles;
  const int64_t n = k.n, c = k.c;
  Backend& be = k.be;
  // `output` is scratch for the sublayers' results before it receives the block's.
  attention_part_forward(k, s.x.view(), s, output);
  be.add(input, output, s.ln1.view(), n * c);
  be.layernorm_forward(s.ln1.view(), k.p(r.ln1_w), k.p(r.ln1_b), s.x1.view(), s.ln1_mean.view(), s.ln1_rstd.view(), n, c);
  mlp_part_forward(k, s.x1.view(), s, output);
  be.add(s.x1.view(), output, s.ln2.view(), n * c);
  be.layernorm_forward(s.ln2.view(), k.p(r.ln2_w), k.p(r.ln2_b), output, s.ln2_mean.view(), s.ln2_rstd.view(), n, c);
}

// dsum2 = ln_2'(dy); dx1 = dsum2 + c_fc'(gelu'(c_proj'(dsum2))); dsum1 = ln_1'(dx1);
// dx = dsum1 + c_attn'(attn'(c_proj'(dsum1))).
void post_backward(const BlockContext& k, const BlockStash& s, ConstView grad_output, View grad_input) {
  const BlockRoles& r = k.roles;
  const int64_t n = k.n, c = k.c;
  Backend& be = k.be;
  Buffer wide = be.alloc(k.compute, n * 4 * c);  // (N, 4C) for the MLP, then (N, 3C) for attention
  Buffer a = be.alloc(k.compute, n * c), b = be.alloc(k.compute, n * c);
  const View w4 = wide.view(), w3 = wide.view().slice(0, n * 3 * c);

  be.layernorm_backward(grad_output, s.ln2.view(), k.p(r.ln2_w), s.ln2_mean.view(), s.ln2_rstd.view(), a.view(),
                        k.g(r.ln2_w), k.g(r.ln2_b), n, c);
  be.linear_backward(a.view(), s.fc_act.view(), k.p(r.out_w), w4, k.g(r.out_w), k.g(r.out_b), n, 4 * c, c);
  be.gelu_backward(w4, s.fc.view(), w4, n * 4 * c, k.gelu);
  be.linear_backward(w4, s.x1.view(), k.p(r.fc_w), b.view(), k.g(r.fc_w), k.g(r.fc_b), n, c, 4 * c);
  be.add(a.view(), b.view(), b.view(), n * c);  // dx1
  be.layernorm_backward(b.view(), s.ln1.view(), k.p(r.ln1_w), s.ln1_mean.view(), s.ln1_rstd.view(), a.view(),
                        k.g(r.ln1_w), k.g(r.ln1_b), n, c);  // a = dsum1
  be.linear_backward(a.view(), s.attn.view(), k.p(r.proj_w), b.view(), k.g(r.proj_w), k.g(r.proj_b), n, c, c);
  be.attention_backward(b.view(), s.qkv.view(), s.attn.view(), s.attn_stash.view(), w3, k.batch, k.seq, c, k.heads,
                        k.mask);
  be.linear_backward(w3, s.x.view(), k.p(r.qkv_w), grad_input, k.g(r.qkv_w), k.g(r.qkv_b), n, c, 3 * c);
  be.accumulate(grad_input, a.view(), n * c);
}

// post_backward() without parameter gradients; `w` keeps what W multiplies: dy (ln_2's), dln2 = dsum2
// (mlp.c_proj's output gradient), dfc, dx1 (ln_1's), dln1 = dsum1 (c_proj's output gradient), dqkv.
void post_backward_input(const BlockContext& k, BlockStash& s, ConstView grad_output, View grad_input,
                         BlockWeightStash& w) {
  const BlockRoles& r = k.roles;
  const int64_t n = k.n, c = k.c;
  Backend& be = k.be;
  alloc_weight_stash(k, grad_output, w);
  Buffer part = be.alloc(k.compute, n * c), dattn = be.alloc(k.compute, n * c);

  be.layernorm_backward(grad_output, s.ln2.view(), k.p(r.ln2_w), s.ln2_mean.view(), s.ln2_rstd.view(), w.dln2.view(),
                        {}, {}, n, c);
  be.linear_backward(w.dln2.view(), s.fc_act.view(), k.p(r.out_w), w.dfc.view(), {}, {}, n, 4 * c, c);
  be.gelu_backward(w.dfc.view(), s.fc.view(), w.dfc.view(), n * 4 * c, k.gelu);
  be.linear_backward(w.dfc.view(), s.x1.view(), k.p(r.fc_w), part.view(), {}, {}, n, c, 4 * c);
  be.add(w.dln2.view(), part.view(), w.dx1.view(), n * c);
  be.layernorm_backward(w.dx1.view(), s.ln1.view(), k.p(r.ln1_w), s.ln1_mean.view(), s.ln1_rstd.view(), w.dln1.view(),
                        {}, {}, n, c);
  be.linear_backward(w.dln1.view(), s.attn.view(), k.p(r.proj_w), dattn.view(), {}, {}, n, c, c);
  be.attention_backward(dattn.view(), s.qkv.view(), s.attn.view(), s.attn_stash.view(), w.dqkv.view(), k.batch, k.seq,
                        c, k.heads, k.mask);
  be.linear_backward(w.dqkv.view(), s.x.view(), k.p(r.qkv_w), grad_input, {}, {}, n, c, 3 * c);
  be.accumulate(grad_input, w.dln1.view(), n * c);
}

void post_backward_weight(const BlockContext& k, const BlockStash& s, const BlockWeightStash& w) {
  const BlockRoles& r = k.roles;
  const int64_t n = k.n, c = k.c;
  Backend& be = k.be;
  be.layernorm_backward(w.dy.view(), s.ln2.view(), k.p(r.ln2_w), s.ln2_mean.view(), s.ln2_rstd.view(), {},
                        k.g(r.ln2_w), k.g(r.ln2_b), n, c);
  be.linear_backward(w.dln2.view(), s.fc_act.view(), {}, {}, k.g(r.out_w), k.g(r.out_b), n, 4 * c, c);
  be.linear_backward(w.dfc.view(), s.x1.view(), {}, {}, k.g(r.fc_w), k.g(r.fc_b), n, c, 4 * c);
  be.layernorm_backward(w.dx1.view(), s.ln1.view(), k.p(r.ln1_w), s.ln1_mean.view(), s.ln1_rstd.view(), {},
                        k.g(r.ln1_w), k.g(r.ln1_b), n, c);
  be.linear_backward(w.dln1.view(), s.attn.view(), {}, {}, k.g(r.proj_w), k.g(r.proj_b), n, c, c);
  be.linear_backward(w.dqkv.view(), s.x.view(), {}, {}, k.g(r.qkv_w), k.g(r.qkv_b), n, c, 3 * c);
}

}  // namespace pd2bw::executor::detail

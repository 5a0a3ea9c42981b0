// BERT's masked-LM head: (pre-LN only) the encoder's final layer norm, the transform (dense + erf GELU +
// layer norm), the decoder (the word table, tied) with its bias, and the mean cross-entropy over the
// masked positions; its backward fused or split into B and W.
#include "models/family.hpp"

namespace pd2bw::executor::detail::bert {
namespace {

// Offsets of the head's tensors (model.hpp's layout: [final LN], dense W and b, LN gamma and beta, bias).
struct HeadOffsets {
  bool final_ln;
  int64_t lnf_w, lnf_b, dense_w, dense_b, tln_w, tln_b, bias;
};

HeadOffsets offsets(const ModelConfig& cfg) {
  const ParamLayout l = head_layout(cfg);
  const bool f = cfg.ln == LnPlacement::pre;
  const size_t o = f ? 2 : 0;
  return {f, f ? l[0].offset : 0, f ? l[1].offset : 0, l[o].offset, l[o + 1].offset, l[o + 2].offset,
          l[o + 3].offset, l[o + 4].offset};
}

// The transform's input: the final layer norm's output (pre-LN) or the head's input.
ConstView transform_input(const HeadStash& s, const HeadOffsets& at) { return at.final_ln ? s.ln.cview() : s.x.cview(); }

}  // namespace

void head_forward(const LayerCall& k, ConstView params, ConstView wte, ConstView input, HeadStash& s, View loss) {
  const ModelConfig& cfg = k.config;
  const int64_t n = s.batch * s.seq, c = cfg.d_model, v = cfg.vocab;
  const HeadOffsets at = offsets(cfg);
  const DType acc = accumulate_dtype(k.compute);
  Backend& be = k.be;
  if (at.final_ln) {
    s.ln = be.alloc(k.compute, n * c);
    s.ln_mean = be.alloc(acc, n);
    s.ln_rstd = be.alloc(acc, n);
    be.layernorm_forward(input, params.slice(at.lnf_w, c), params.slice(at.lnf_b, c), s.ln.view(), s.ln_mean.view(),
                         s.ln_rstd.view(), n, c);
  }
  for (Buffer* b : {&s.dense, &s.act, &s.tln}) *b = be.alloc(k.compute, n * c);
  s.tln_mean = be.alloc(acc, n);
  s.tln_rstd = be.alloc(acc, n);
  s.logits = be.alloc(k.compute, n * v);
  s.lse = be.alloc(acc, n);
  be.linear_forward(transform_input(s, at), params.slice(at.dense_w, c * c), params.slice(at.dense_b, c), s.dense.view(),
                    n, c, c);
  be.gelu_forward(s.dense.view(), s.act.view(), n * c, GeluKind::erf);
  be.layernorm_forward(s.act.view(), params.slice(at.tln_w, c), params.slice(at.tln_b, c), s.tln.view(),
                       s.tln_mean.view(), s.tln_rstd.view(), n, c);
  be.linear_forward(s.tln.view(), wte, params.slice(at.bias, v), s.logits.view(), n, c, v);
  be.cross_entropy_forward(s.logits.view(), s.targets.view(), s.lse.view(), loss, n, v);
}

namespace {

// The backward with or without parameter gradients (grads and dwte empty: B's share); `w`, when given,
// keeps the output gradients W multiplies: dtln (the decoder's input), ddense (the dense's output), dln
// (the final layer norm's output, pre-LN).
void head_backward_parts(const LayerCall& k, ConstView params, ConstView wte, HeadStash& s, double loss_scale,
                         View grad_input, View grads, View dwte, HeadWeightStash& w) {
  const ModelConfig& cfg = k.config;
  const int64_t n = s.batch * s.seq, c = cfg.d_model, v = cfg.vocab;
  const HeadOffsets at = offsets(cfg);
  Backend& be = k.be;
  const auto g = [&](int64_t offset, int64_t count) { return grads.empty() ? View{} : grads.slice(offset, count); };
  for (Buffer* b : {&w.dtln, &w.ddense}) *b = be.alloc(k.compute, n * c);
  if (at.final_ln) w.dln = be.alloc(k.compute, n * c);
  const View dlogits = s.logits.view();  // in place: the stash is spent
  be.cross_entropy_backward(s.logits.view(), s.targets.view(), s.lse.view(), dlogits, n, v, loss_scale);
  be.linear_backward(dlogits, s.tln.view(), wte, w.dtln.view(), dwte, g(at.bias, v), n, c, v);
  be.layernorm_backward(w.dtln.view(), s.act.view(), params.slice(at.tln_w, c), s.tln_mean.view(), s.tln_rstd.view(),
                        w.ddense.view(), g(at.tln_w, c), g(at.tln_b, c), n, c);
  be.gelu_backward(w.ddense.view(), s.dense.view(), w.ddense.view(), n * c, GeluKind::erf);
  const View dtransform_in = at.final_ln ? w.dln.view() : grad_input;
  be.linear_backward(w.ddense.view(), transform_input(s, at), params.slice(at.dense_w, c * c), dtransform_in,
                     g(at.dense_w, c * c), g(at.dense_b, c), n, c, c);
  if (at.final_ln)
    be.layernorm_backward(w.dln.view(), s.x.view(), params.slice(at.lnf_w, c), s.ln_mean.view(), s.ln_rstd.view(),
                          grad_input, g(at.lnf_w, c), g(at.lnf_b, c), n, c);
}

}  // namespace

void head_backward(const LayerCall& k, ConstView params, ConstView wte, HeadStash& s, double loss_scale,
                   View grad_input, View grads, View dwte) {
  HeadWeightStash scratch;
  head_backward_parts(k, params, wte, s, loss_scale, grad_input, grads, dwte, scratch);
}

void head_backward_input(const LayerCall& k, ConstView params, ConstView wte, HeadStash& s, double loss_scale,
                         View grad_input, HeadWeightStash& w) {
  head_backward_parts(k, params, wte, s, loss_scale, grad_input, {}, {}, w);
  s.dense.reset();  // only B reads it (the GELU's input)
}

void head_backward_weight(const LayerCall& k, ConstView params, HeadStash& s, HeadWeightStash& w, View grads,
                          View dwte) {
  const ModelConfig& cfg = k.config;
  const int64_t n = s.batch * s.seq, c = cfg.d_model, v = cfg.vocab;
  const HeadOffsets at = offsets(cfg);
  Backend& be = k.be;
  be.linear_backward(s.logits.view(), s.tln.view(), {}, {}, dwte, grads.slice(at.bias, v), n, c, v);
  be.layernorm_backward(w.dtln.view(), s.act.view(), params.slice(at.tln_w, c), s.tln_mean.view(), s.tln_rstd.view(),
                        {}, grads.slice(at.tln_w, c), grads.slice(at.tln_b, c), n, c);
  be.linear_backward(w.ddense.view(), transform_input(s, at), {}, {}, grads.slice(at.dense_w, c * c),
                     grads.slice(at.dense_b, c), n, c, c);
  if (at.final_ln)
    be.layernorm_backward(w.dln.view(), s.x.view(), params.slice(at.lnf_w, c), s.ln_mean.view(), s.ln_rstd.view(), {},
                          grads.slice(at.lnf_w, c), grads.slice(at.lnf_b, c), n, c);
}

}  // namespace pd2bw::executor::detail::bert

// GPT's last layer: final layer norm, LM head (own or tied) and mean softmax cross-entropy; its backward
// fused or split into the input-gradient (B) and weight-gradient (W) halves.
#include "models/family.hpp"

namespace pd2bw::executor::detail::gpt {
namespace {
// Offsets in the head's layout: ln_f.weight, ln_f.bias (then lm_head.weight when untied).
constexpr int64_t kGamma = 0;
}  // namespace

// The stash's targets and x are set by HeadLayer::forward.
void head_forward(const LayerCall& k, ConstView params, ConstView lm_head, ConstView input, HeadStash& s, View loss) {
  const ModelConfig& cfg = k.config;
  const int64_t n = s.batch * s.seq, c = cfg.d_model;
  const DType acc = accumulate_dtype(k.compute);
  Backend& be = k.be;
  s.ln = be.alloc(k.compute, n * c);
  s.ln_mean = be.alloc(acc, n);
  s.ln_rstd = be.alloc(acc, n);
  s.logits = be.alloc(k.compute, n * cfg.vocab);
  s.lse = be.alloc(acc, n);
  be.layernorm_forward(input, params.slice(kGamma, c), params.slice(c, c), s.ln.view(), s.ln_mean.view(),
                       s.ln_rstd.view(), n, c);
  be.linear_forward(s.ln.view(), lm_head, {}, s.logits.view(), n, c, cfg.vocab);
  be.cross_entropy_forward(s.logits.view(), s.targets.view(), s.lse.view(), loss, n, cfg.vocab);
}

void head_backward(const LayerCall& k, ConstView params, ConstView lm_head, HeadStash& s, double loss_scale,
                   View grad_input, View grads, View dlm_head) {
  const ModelConfig& cfg = k.config;
  const int64_t n = s.batch * s.seq, c = cfg.d_model;
  Backend& be = k.be;
  Buffer dln = be.alloc(k.compute, n * c);
  const View dlogits = s.logits.view();  // in place: the stash is spent
  be.cross_entropy_backward(s.logits.view(), s.targets.view(), s.lse.view(), dlogits, n, cfg.vocab, loss_scale);
  be.linear_backward(dlogits, s.ln.view(), lm_head, dln.view(), dlm_head, {}, n, c, cfg.vocab);
  be.layernorm_backward(dln.view(), s.x.view(), params.slice(kGamma, c), s.ln_mean.view(), s.ln_rstd.view(), grad_input,
                        grads.slice(kGamma, c), grads.slice(c, c), n, c);
}

// head_backward() in two halves over the same operands: B computes dlogits (in place, as there), dln and
// grad_input; W the LM head's and ln_f's gradients.
void head_backward_input(const LayerCall& k, ConstView params, ConstView lm_head, HeadStash& s, double loss_scale,
                         View grad_input, HeadWeightStash& w) {
  const ModelConfig& cfg = k.config;
  const int64_t n = s.batch * s.seq, c = cfg.d_model;
  Backend& be = k.be;
  w.dln = be.alloc(k.compute, n * c);
  const View dlogits = s.logits.view();
  be.cross_entropy_backward(s.logits.view(), s.targets.view(), s.lse.view(), dlogits, n, cfg.vocab, loss_scale);
  be.linear_backward(dlogits, s.ln.view(), lm_head, w.dln.view(), {}, {}, n, c, cfg.vocab);
  be.layernorm_backward(w.dln.view(), s.x.view(), params.slice(kGamma, c), s.ln_mean.view(), s.ln_rstd.view(),
                        grad_input, {}, {}, n, c);
}

void head_backward_weight(const LayerCall& k, ConstView params, HeadStash& s, HeadWeightStash& w, View grads,
                          View dlm_head) {
  const ModelConfig& cfg = k.config;
  const int64_t n = s.batch * s.seq, c = cfg.d_model;
  Backend& be = k.be;
  be.linear_backward(s.logits.view(), s.ln.view(), {}, {}, dlm_head, {}, n, c, cfg.vocab);
  be.layernorm_backward(w.dln.view(), s.x.view(), params.slice(kGamma, c), s.ln_mean.view(), s.ln_rstd.view(), {},
                        grads.slice(kGamma, c), grads.slice(c, c), n, c);
}

}  // namespace pd2bw::executor::detail::gpt

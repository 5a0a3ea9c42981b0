// GPT last layer: final layer norm, LM head (own or tied to wte) and mean softmax cross-entropy; its
// backward fused or split into the input-gradient (B) and weight-gradient (W) halves.
#include "gpt_internal.hpp"

namespace pd2bw::executor {

namespace {
// Offsets in the head's layout: ln_f.weight, ln_f.bias, then lm_head.weight when untied.
constexpr int64_t kGamma = 0;
}  // namespace

int64_t HeadStash::bytes() const {
  return targets.bytes() + x.bytes() + ln.bytes() + ln_mean.bytes() + ln_rstd.bytes() + logits.bytes() + lse.bytes();
}

HeadLayer::HeadLayer(const GptConfig& config, Backend& backend, DType compute)
    : config_(config), backend_(&backend), compute_(compute) {
  config_.validate();
  detail::check_backend(backend, compute, "head");
}

ConstView HeadLayer::lm_head(ConstView params, ConstView wte) const {
  const int64_t table = config_.vocab * config_.d_model;
  if (!config_.tie_embeddings) return params.slice(2 * config_.d_model, table);
  if (wte.empty()) throw UsageError("head: tied embeddings need the embedding's wte table, but none was passed");
  return wte.slice(0, table);
}

void HeadLayer::forward(ConstView params, ConstView wte, ConstView input, ConstView targets, int64_t batch, int64_t seq,
                        HeadStash& s, View loss) const {
  const GptConfig& cfg = config_;
  detail::check_microbatch(cfg, batch, seq, "head");
  const ConstView weight = lm_head(params, wte);
  const int64_t n = batch * seq, c = cfg.d_model;
  const DType acc = accumulate_dtype(compute_);
  Backend& be = *backend_;
  s.batch = batch;
  s.seq = seq;
  s.targets = be.alloc(DType::i32, n);
  be.copy(targets.slice(0, n), s.targets.view());
  s.x = be.alloc(compute_, n * c);
  be.copy(input.slice(0, n * c), s.x.view());
  s.ln = be.alloc(compute_, n * c);
  s.ln_mean = be.alloc(acc, n);
  s.ln_rstd = be.alloc(acc, n);
  s.logits = be.alloc(compute_, n * cfg.vocab);
  s.lse = be.alloc(acc, n);
  be.layernorm_forward(input, params.slice(kGamma, c), params.slice(c, c), s.ln.view(), s.ln_mean.view(),
                       s.ln_rstd.view(), n, c);
  be.linear_forward(s.ln.view(), weight, {}, s.logits.view(), n, c, cfg.vocab);
  be.cross_entropy_forward(s.logits.view(), s.targets.view(), s.lse.view(), loss, n, cfg.vocab);
}

void HeadLayer::backward(ConstView params, ConstView wte, HeadStash& s, double loss_scale, View grad_input,
                         View grads, View dwte) const {
  const GptConfig& cfg = config_;
  const ConstView weight = lm_head(params, wte);
  const int64_t n = s.batch * s.seq, c = cfg.d_model, table = cfg.vocab * c;
  const View dweight = cfg.tie_embeddings ? dwte : grads.slice(2 * c, table);
  if (dweight.empty())
    throw UsageError("head: tied embeddings need a dwte buffer for the LM-head gradient, but none was passed");
  Backend& be = *backend_;
  Buffer dln = be.alloc(compute_, n * c);
  const View dlogits = s.logits.view();  // in place: the stash is spent
  be.cross_entropy_backward(s.logits.view(), s.targets.view(), s.lse.view(), dlogits, n, cfg.vocab, loss_scale);
  be.linear_backward(dlogits, s.ln.view(), weight, dln.view(), dweight.slice(0, table), {}, n, c, cfg.vocab);
  be.layernorm_backward(dln.view(), s.x.view(), params.slice(kGamma, c), s.ln_mean.view(), s.ln_rstd.view(), grad_input,
                        grads.slice(kGamma, c), grads.slice(c, c), n, c);
}

// backward() in two halves over the same operands: B computes dlogits (in place, as there), dln and
// grad_input; W the LM head's and ln_f's gradients.
void HeadLayer::backward_input(ConstView params, ConstView wte, HeadStash& s, double loss_scale, View grad_input,
                               HeadWeightStash& w) const {
  const GptConfig& cfg = config_;
  const ConstView weight = lm_head(params, wte);
  const int64_t n = s.batch * s.seq, c = cfg.d_model;
  Backend& be = *backend_;
  w.dln = be.alloc(compute_, n * c);
  const View dlogits = s.logits.view();
  be.cross_entropy_backward(s.logits.view(), s.targets.view(), s.lse.view(), dlogits, n, cfg.vocab, loss_scale);
  be.linear_backward(dlogits, s.ln.view(), weight, w.dln.view(), {}, {}, n, c, cfg.vocab);
  be.layernorm_backward(w.dln.view(), s.x.view(), params.slice(kGamma, c), s.ln_mean.view(), s.ln_rstd.view(),
                        grad_input, {}, {}, n, c);
  s.targets.reset();  // only B reads them
  s.lse.reset();
}

void HeadLayer::backward_weight(ConstView params, HeadStash& s, HeadWeightStash& w, View grads, View dwte) const {
  const GptConfig& cfg = config_;
  const int64_t n = s.batch * s.seq, c = cfg.d_model, table = cfg.vocab * c;
  const View dweight = cfg.tie_embeddings ? dwte : grads.slice(2 * c, table);
  if (dweight.empty())
    throw UsageError("head: tied embeddings need a dwte buffer for the LM-head gradient, but none was passed");
  Backend& be = *backend_;
  be.linear_backward(s.logits.view(), s.ln.view(), {}, {}, dweight.slice(0, table), {}, n, c, cfg.vocab);
  be.layernorm_backward(w.dln.view(), s.x.view(), params.slice(kGamma, c), s.ln_mean.view(), s.ln_rstd.view(), {},
                        grads.slice(kGamma, c), grads.slice(c, c), n, c);
  w = HeadWeightStash{};
  s = HeadStash{};
}

template <typename T>
GptHead<T>::GptHead(const GptConfig& config, uint64_t seed, Buffers buffers)
    : LayerBuffers<T>(config, config.blocks + 1, seed, buffers), layer_(config, default_backend(), dtype_of<T>()) {}

template <typename T>
double GptHead<T>::forward(const T* params, const T* wte, const T* input, const int32_t* targets, int64_t batch,
                           int64_t seq, Stash& stash) const {
  const GptConfig& c = this->config_;
  detail::check_microbatch(c, batch, seq, "head");
  double loss = 0;
  layer_.forward(detail::host(params, layout_numel(this->layout_)), detail::host(wte, c.vocab * c.d_model),
                 detail::host(input, batch * seq * c.d_model), detail::host(targets, batch * seq), batch, seq, stash,
                 view_of(&loss, 1));
  return loss;
}

template <typename T>
double GptHead<T>::recompute(const T* params, const T* wte, const T* input, const int32_t* targets, int64_t batch,
                             int64_t seq, Stash& stash) const {
  return forward(params, wte, input, targets, batch, seq, stash);
}

template <typename T>
void GptHead<T>::backward(const T* params, const T* wte, Stash& stash, double loss_scale, T* grad_input, T* grads,
                          T* dwte) const {
  const GptConfig& c = this->config_;
  const int64_t act = stash.batch * stash.seq * c.d_model, table = c.vocab * c.d_model;
  layer_.backward(detail::host(params, layout_numel(this->layout_)), detail::host(wte, table), stash, loss_scale,
                  detail::host(grad_input, act), detail::host(grads, layout_numel(this->layout_)),
                  detail::host(dwte, table));
}

template class GptHead<float>;
template class GptHead<double>;

}  // namespace pd2bw::executor

// The last layer of every family: HeadLayer keeps the targets and the input, checks the LM head's
// weight (own or tied) and runs the family's head (models/<family>/head.cpp); HostHead is its typed
// convenience over the cpu backend.
#include "models/family.hpp"

namespace pd2bw::executor {

int64_t HeadStash::bytes() const {
  int64_t total = 0;
  for (const Buffer* b : {&targets, &x, &ln, &ln_mean, &ln_rstd, &dense, &act, &tln, &tln_mean, &tln_rstd, &logits, &lse})
    total += b->bytes();
  return total;
}

HeadLayer::HeadLayer(const ModelConfig& config, Backend& backend, DType compute)
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

// Where the LM head's gradient goes: the tied table's dwte (required then) or the head's own slot.
static View lm_head_grad(const ModelConfig& cfg, View grads, View dwte) {
  const int64_t table = cfg.vocab * cfg.d_model;
  const View dweight = cfg.tie_embeddings ? dwte : grads.slice(2 * cfg.d_model, table);
  if (dweight.empty())
    throw UsageError("head: tied embeddings need a dwte buffer for the LM-head gradient, but none was passed");
  return dweight.slice(0, table);
}

void HeadLayer::forward(ConstView params, ConstView wte, ConstView input, ConstView targets, int64_t batch, int64_t seq,
                        HeadStash& s, View loss) const {
  detail::check_microbatch(config_, batch, seq, "head");
  const ConstView weight = lm_head(params, wte);
  const int64_t n = batch * seq, c = config_.d_model;
  Backend& be = *backend_;
  s = HeadStash{};
  s.batch = batch;
  s.seq = seq;
  s.targets = be.alloc(DType::i32, n);
  be.copy(targets.slice(0, n), s.targets.view());
  s.x = be.alloc(compute_, n * c);
  be.copy(input.slice(0, n * c), s.x.view());
  const detail::LayerCall k{config_, be, compute_};
  if (config_.is_bert())
    detail::bert::head_forward(k, params, weight, input, s, loss);
  else
    detail::gpt::head_forward(k, params, weight, input, s, loss);
}

void HeadLayer::backward(ConstView params, ConstView wte, HeadStash& s, double loss_scale, View grad_input,
                         View grads, View dwte) const {
  const ConstView weight = lm_head(params, wte);
  const View dweight = lm_head_grad(config_, grads, dwte);
  const detail::LayerCall k{config_, *backend_, compute_};
  if (config_.is_bert())
    detail::bert::head_backward(k, params, weight, s, loss_scale, grad_input, grads, dweight);
  else
    detail::gpt::head_backward(k, params, weight, s, loss_scale, grad_input, grads, dweight);
}

// B frees what only it reads (the targets and the log-sum-exps).
void HeadLayer::backward_input(ConstView params, ConstView wte, HeadStash& s, double loss_scale, View grad_input,
                               HeadWeightStash& w) const {
  const ConstView weight = lm_head(params, wte);
  const detail::LayerCall k{config_, *backend_, compute_};
  if (config_.is_bert())
    detail::bert::head_backward_input(k, params, weight, s, loss_scale, grad_input, w);
  else
    detail::gpt::head_backward_input(k, params, weight, s, loss_scale, grad_input, w);
  s.targets.reset();
  s.lse.reset();
}

void HeadLayer::backward_weight(ConstView params, HeadStash& s, HeadWeightStash& w, View grads, View dwte) const {
  const View dweight = lm_head_grad(config_, grads, dwte);
  const detail::LayerCall k{config_, *backend_, compute_};
  if (config_.is_bert())
    detail::bert::head_backward_weight(k, params, s, w, grads, dweight);
  else
    detail::gpt::head_backward_weight(k, params, s, w, grads, dweight);
  w = HeadWeightStash{};
  s = HeadStash{};
}

template <typename T>
HostHead<T>::HostHead(const ModelConfig& config, uint64_t seed, Buffers buffers)
    : LayerBuffers<T>(config, config.blocks + 1, seed, buffers), layer_(config, default_backend(), dtype_of<T>()) {}

template <typename T>
double HostHead<T>::forward(const T* params, const T* wte, const T* input, const int32_t* targets, int64_t batch,
                            int64_t seq, Stash& stash) const {
  const ModelConfig& c = this->config_;
  detail::check_microbatch(c, batch, seq, "head");
  double loss = 0;
  layer_.forward(detail::host(params, layout_numel(this->layout_)), detail::host(wte, c.vocab * c.d_model),
                 detail::host(input, batch * seq * c.d_model), detail::host(targets, batch * seq), batch, seq, stash,
                 view_of(&loss, 1));
  return loss;
}

template <typename T>
double HostHead<T>::recompute(const T* params, const T* wte, const T* input, const int32_t* targets, int64_t batch,
                              int64_t seq, Stash& stash) const {
  return forward(params, wte, input, targets, batch, seq, stash);
}

template <typename T>
void HostHead<T>::backward(const T* params, const T* wte, Stash& stash, double loss_scale, T* grad_input, T* grads,
                           T* dwte) const {
  const ModelConfig& c = this->config_;
  const int64_t act = stash.batch * stash.seq * c.d_model, table = c.vocab * c.d_model;
  layer_.backward(detail::host(params, layout_numel(this->layout_)), detail::host(wte, table), stash, loss_scale,
                  detail::host(grad_input, act), detail::host(grads, layout_numel(this->layout_)),
                  detail::host(dwte, table));
}

template class HostHead<float>;
template class HostHead<double>;

}  // namespace pd2bw::executor

// The split backward of one microbatch through the stage's layers (zb-h1): B, the input gradient, on
// the pipeline's critical path, and W, the parameter gradients, run later. Together they compute what
// backward() computes, with the same operands in each call, so the gradients carry the same bits.
#include "stage_state.hpp"

namespace pd2bw::executor {

// backward()'s walk (backward_layers) with each layer's B in place of its backward. The first stage keeps
// its embedding's output gradient in mb.grad_in for W (the embedding has no B).
template <typename T>
void StageWorker<T>::Impl::backward_input(Microbatch& mb, ConstView p) {
  mb.blocks_w.resize(blocks.size());
  mb.grad_in = backward_layers(
      mb,
      [&](size_t pos, View out) {
        mb.head_w.emplace();
        head->backward_input(layer_params(p, pos), head_wte(p), *mb.head, 1.0 / static_cast<double>(cfg.microbatches),
                             out, *mb.head_w);
      },
      [&](size_t j, size_t pos, ConstView in, View out) {
        blocks[j].backward_input(layer_params(p, pos), mb.blocks[j], in, out, mb.blocks_w[j]);
      });
  mb.awaiting_weight = true;
}

// The layers' W in backward()'s order (head, blocks from the last, embedding), which matters only for
// the one tensor two layers add into: the tied token table when the head and the embedding share a stage.
template <typename T>
void StageWorker<T>::Impl::backward_weight(Microbatch& mb, ConstView p) {
  size_t pos = offsets.size();
  if (last) {
    --pos;
    head->backward_weight(layer_params(p, pos), *mb.head, *mb.head_w, layer_grads(pos), head_dwte());
  }
  for (size_t j = blocks.size(); j-- > 0;) {
    --pos;
    blocks[j].backward_weight(layer_params(p, pos), mb.blocks[j], mb.blocks_w[j], layer_grads(pos));
  }
  if (first) embedding->backward(*mb.embedding, mb.grad_in.cview(), layer_grads(0));
  mb.drop_stash();
  mb.grad_in.reset();
  mb.awaiting_weight = false;
}

// The microbatch stays live from its B, across its send_gradient (which sees awaiting_weight), to its W.
template <typename T>
void StageWorker<T>::Impl::split_backward_op(pipeline::OpKind kind, const std::pair<int64_t, int64_t>& key,
                                             ConstView params) {
  Microbatch& mb = live.at(key);
  const TimerMark t0 = backend->mark();
  if (kind == pipeline::OpKind::backward_input) {
    backward_input(mb, params);
    time_since(t0);
    return;
  }
  backward_weight(mb, params);
  time_since(t0);
  ++computed_microbatches;
  live.erase(key);
}

template void StageWorker<float>::Impl::split_backward_op(pipeline::OpKind, const std::pair<int64_t, int64_t>&,
                                                          ConstView);
template void StageWorker<double>::Impl::split_backward_op(pipeline::OpKind, const std::pair<int64_t, int64_t>&,
                                                           ConstView);
template void StageWorker<float>::Impl::backward_input(Microbatch&, ConstView);
template void StageWorker<float>::Impl::backward_weight(Microbatch&, ConstView);
template void StageWorker<double>::Impl::backward_input(Microbatch&, ConstView);
template void StageWorker<double>::Impl::backward_weight(Microbatch&, ConstView);

}  // namespace pd2bw::executor

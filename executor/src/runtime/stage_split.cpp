// The split backward of one microbatch through a chunk's layers (zb-h1, zb-h2, zb-v): B, the input
// gradient, on the pipeline's critical path, and W, the parameter gradients, run later. Together they
// compute what backward() computes, with the same operands in each call, so the gradients carry the same
// bits.
#include "chunk_state.hpp"

namespace pd2bw::executor {

// backward()'s walk (backward_layers) with each layer's B in place of its backward. The first chunk keeps
// its embedding's output gradient in mb.grad_in for W (the embedding has no B).
template <typename T>
void ChunkState<T>::backward_input(Microbatch& mb, ConstView p) {
  mb.blocks_w.resize(blocks.size());
  mb.grad_in = backward_layers(
      mb,
      [&](size_t pos, View out) {
        mb.head_w.emplace();
        head->backward_input(layer_params(p, pos), head_wte(p), *mb.head, 1.0 / static_cast<double>(cfg->microbatches),
                             out, *mb.head_w);
      },
      [&](size_t j, size_t pos, ConstView in, View out) {
        blocks[j].backward_input(layer_params(p, pos), mb.blocks[j], in, out, mb.blocks_w[j]);
      });
  mb.awaiting_weight = true;
}

// The layers' W in backward()'s order (head, blocks from the last, embedding), which matters only for
// the one tensor two layers add into: the tied token table when the head and the embedding share a chunk.
template <typename T>
void ChunkState<T>::backward_weight(Microbatch& mb, ConstView p) {
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

template void ChunkState<float>::backward_input(Microbatch&, ConstView);
template void ChunkState<float>::backward_weight(Microbatch&, ConstView);
template void ChunkState<double>::backward_input(Microbatch&, ConstView);
template void ChunkState<double>::backward_weight(Microbatch&, ConstView);

}  // namespace pd2bw::executor

// The sequential whole-model reference (any family): embedding, blocks and head on one rank.
#include "pd2bw/executor/sequential_model.hpp"

#include <utility>

namespace pd2bw::executor {
namespace {

template <typename T>
std::vector<HostBlock<T>> make_blocks(const ModelConfig& config, uint64_t seed) {
  std::vector<HostBlock<T>> blocks;
  blocks.reserve(static_cast<size_t>(config.blocks));
  for (int64_t i = 0; i < config.blocks; ++i) blocks.emplace_back(config, i, seed);
  return blocks;
}

}  // namespace

template <typename T>
SequentialModel<T>::SequentialModel(const ModelConfig& config, uint64_t seed)
    : config_(config), embedding_(config, seed), blocks_(make_blocks<T>(config, seed)), head_(config, seed) {}

template <typename T>
double SequentialModel<T>::loss(const int32_t* tokens, const int32_t* targets, int64_t batch, int64_t seq,
                                const int32_t* types, const int32_t* lengths) const {
  std::vector<T> x(static_cast<size_t>(batch * seq * config_.d_model));
  std::vector<T> y(x.size());
  typename HostEmbedding<T>::Stash es;
  embedding_.forward(embedding_.params().data(), tokens, batch, seq, es, x.data(), types);
  typename HostBlock<T>::Stash bs;
  for (const HostBlock<T>& b : blocks_) {
    b.forward(b.params().data(), x.data(), batch, seq, bs, y.data(), lengths);
    std::swap(x, y);
  }
  typename HostHead<T>::Stash hs;
  const T* wte = embedding_.params().data() + HostEmbedding<T>::kWteOffset;
  return head_.forward(head_.params().data(), wte, x.data(), targets, batch, seq, hs);
}

template <typename T>
double SequentialModel<T>::forward_backward(const int32_t* tokens, const int32_t* targets, int64_t batch,
                                            int64_t seq, double loss_scale, const int32_t* types,
                                            const int32_t* lengths) {
  const size_t act = static_cast<size_t>(batch * seq * config_.d_model);
  // acts[i] is the input of block i; acts[blocks] the input of the head.
  std::vector<std::vector<T>> acts(blocks_.size() + 1, std::vector<T>(act));
  typename HostEmbedding<T>::Stash es;
  std::vector<typename HostBlock<T>::Stash> bs(blocks_.size());
  typename HostHead<T>::Stash hs;
  embedding_.forward(embedding_.params().data(), tokens, batch, seq, es, acts[0].data(), types);
  for (size_t i = 0; i < blocks_.size(); ++i) {
    blocks_[i].forward(blocks_[i].params().data(), acts[i].data(), batch, seq, bs[i], acts[i + 1].data(), lengths);
  }
  const T* wte = embedding_.params().data() + HostEmbedding<T>::kWteOffset;
  T* dwte = embedding_.grads().data() + HostEmbedding<T>::kWteOffset;
  const double loss = head_.forward(head_.params().data(), wte, acts.back().data(), targets, batch, seq, hs);

  std::vector<T> grad(act);
  std::vector<T> grad_in(act);
  head_.backward(head_.params().data(), wte, hs, loss_scale, grad.data(), head_.grads().data(), dwte);
  for (size_t i = blocks_.size(); i-- > 0;) {
    blocks_[i].backward(blocks_[i].params().data(), bs[i], grad.data(), grad_in.data(),
                        blocks_[i].grads().data());
    std::swap(grad, grad_in);
  }
  embedding_.backward(es, grad.data(), embedding_.grads().data());
  return loss;
}

template <typename T>
void SequentialModel<T>::zero_grads() {
  embedding_.zero_grads();
  for (HostBlock<T>& b : blocks_) b.zero_grads();
  head_.zero_grads();
}

template class SequentialModel<float>;
template class SequentialModel<double>;

}  // namespace pd2bw::executor

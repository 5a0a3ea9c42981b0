// The sequential whole-model reference: embedding, blocks and head on one rank.
#include "pd2bw/executor/gpt_model.hpp"

#include <utility>

namespace pd2bw::executor {
namespace {

template <typename T>
std::vector<GptBlock<T>> make_blocks(const GptConfig& config, uint64_t seed) {
  std::vector<GptBlock<T>> blocks;
  blocks.reserve(static_cast<size_t>(config.blocks));
  for (int64_t i = 0; i < config.blocks; ++i) blocks.emplace_back(config, i, seed);
  return blocks;
}

}  // namespace

template <typename T>
GptModel<T>::GptModel(const GptConfig& config, uint64_t seed)
    : config_(config), embedding_(config, seed), blocks_(make_blocks<T>(config, seed)), head_(config, seed) {}

template <typename T>
double GptModel<T>::loss(const int32_t* tokens, const int32_t* targets, int64_t batch, int64_t seq) const {
  std::vector<T> x(static_cast<size_t>(batch * seq * config_.d_model));
  std::vector<T> y(x.size());
  typename GptEmbedding<T>::Stash es;
  embedding_.forward(embedding_.params().data(), tokens, batch, seq, es, x.data());
  typename GptBlock<T>::Stash bs;
  for (const GptBlock<T>& b : blocks_) {
    b.forward(b.params().data(), x.data(), batch, seq, bs, y.data());
    std::swap(x, y);
  }
  typename GptHead<T>::Stash hs;
  const T* wte = embedding_.params().data() + GptEmbedding<T>::kWteOffset;
  return head_.forward(head_.params().data(), wte, x.data(), targets, batch, seq, hs);
}

template <typename T>
double GptModel<T>::forward_backward(const int32_t* tokens, const int32_t* targets, int64_t batch,
                                     int64_t seq, double loss_scale) {
  const size_t act = static_cast<size_t>(batch * seq * config_.d_model);
  // acts[i] is the input of block i; acts[blocks] the input of the head.
  std::vector<std::vector<T>> acts(blocks_.size() + 1, std::vector<T>(act));
  typename GptEmbedding<T>::Stash es;
  std::vector<typename GptBlock<T>::Stash> bs(blocks_.size());
  typename GptHead<T>::Stash hs;
  embedding_.forward(embedding_.params().data(), tokens, batch, seq, es, acts[0].data());
  for (size_t i = 0; i < blocks_.size(); ++i) {
    blocks_[i].forward(blocks_[i].params().data(), acts[i].data(), batch, seq, bs[i], acts[i + 1].data());
  }
  const T* wte = embedding_.params().data() + GptEmbedding<T>::kWteOffset;
  T* dwte = embedding_.grads().data() + GptEmbedding<T>::kWteOffset;
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
void GptModel<T>::zero_grads() {
  embedding_.zero_grads();
  for (GptBlock<T>& b : blocks_) b.zero_grads();
  head_.zero_grads();
}

template class GptModel<float>;
template class GptModel<double>;

}  // namespace pd2bw::executor

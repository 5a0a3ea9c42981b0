// The whole GPT run sequentially on one rank, over the layers' own buffers: the reference that the
// pipeline runtime is tested against (same math, no pipeline), and the model of a d = 1 run.
#pragma once

#include <cstdint>
#include <vector>

#include "pd2bw/executor/gpt.hpp"

namespace pd2bw::executor {

template <typename T>
class GptModel {
 public:
  // Builds and initialises every layer (see init_gpt_layer). Throws pd2bw::UsageError for a bad config.
  GptModel(const GptConfig& config, uint64_t seed);

  const GptConfig& config() const { return config_; }
  GptEmbedding<T>& embedding() { return embedding_; }
  const GptEmbedding<T>& embedding() const { return embedding_; }
  GptBlock<T>& block(int64_t i) { return blocks_.at(static_cast<size_t>(i)); }
  const GptBlock<T>& block(int64_t i) const { return blocks_.at(static_cast<size_t>(i)); }
  GptHead<T>& head() { return head_; }
  const GptHead<T>& head() const { return head_; }

  // Mean loss of one microbatch with the owned parameters. tokens, targets: (B, S).
  // Throws as the layers' forward passes do.
  double loss(const int32_t* tokens, const int32_t* targets, int64_t batch, int64_t seq) const;

  // Forward and backward of one microbatch: accumulates the gradient of loss_scale * loss into every
  // layer's grads() (tied: the head's LM-head gradient goes straight into the embedding's wte
  // gradient). Returns the unscaled mean loss. tokens, targets: (B, S).
  double forward_backward(const int32_t* tokens, const int32_t* targets, int64_t batch, int64_t seq,
                          double loss_scale);

  void zero_grads();

 private:
  GptConfig config_;
  GptEmbedding<T> embedding_;
  std::vector<GptBlock<T>> blocks_;
  GptHead<T> head_;
};

extern template class GptModel<float>;
extern template class GptModel<double>;

}  // namespace pd2bw::executor

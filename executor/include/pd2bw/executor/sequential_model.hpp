// The whole model (any family) run sequentially on one rank, over the layers' own buffers: the reference that the
// pipeline runtime is tested against (same math, no pipeline), and the model of a d = 1 run.
#pragma once

#include <cstdint>
#include <vector>

#include "pd2bw/executor/layers.hpp"

namespace pd2bw::executor {

template <typename T>
class SequentialModel {
 public:
  // Builds and initialises every layer (see init_layer). Throws pd2bw::UsageError for a bad config.
  SequentialModel(const ModelConfig& config, uint64_t seed);

  const ModelConfig& config() const { return config_; }
  HostEmbedding<T>& embedding() { return embedding_; }
  const HostEmbedding<T>& embedding() const { return embedding_; }
  HostBlock<T>& block(int64_t i) { return blocks_.at(static_cast<size_t>(i)); }
  const HostBlock<T>& block(int64_t i) const { return blocks_.at(static_cast<size_t>(i)); }
  HostHead<T>& head() { return head_; }
  const HostHead<T>& head() const { return head_; }

  // Mean loss of one microbatch with the owned parameters. tokens, targets: (B, S); bert also reads
  // types (B, S) and lengths (B) (nullptr: every key). Throws as the layers' forward passes do.
  double loss(const int32_t* tokens, const int32_t* targets, int64_t batch, int64_t seq,
              const int32_t* types = nullptr, const int32_t* lengths = nullptr) const;

  // Forward and backward of one microbatch: accumulates the gradient of loss_scale * loss into every
  // layer's grads() (tied: the head's LM-head gradient goes straight into the embedding's wte
  // gradient). Returns the unscaled mean loss. tokens, targets: (B, S).
  double forward_backward(const int32_t* tokens, const int32_t* targets, int64_t batch, int64_t seq,
                          double loss_scale, const int32_t* types = nullptr, const int32_t* lengths = nullptr);

  void zero_grads();

 private:
  ModelConfig config_;
  HostEmbedding<T> embedding_;
  std::vector<HostBlock<T>> blocks_;
  HostHead<T> head_;
};

extern template class SequentialModel<float>;
extern template class SequentialModel<double>;

}  // namespace pd2bw::executor

// Optimizers over flat parameter buffers (AdamW, SGD with momentum), the learning-rate schedule and
// gradient-norm helpers.
//
// Updates may be out of place, as 2BW needs: W(j+1) = W(j) - update(g(W(j-1))) reads one weight
// buffer and writes the other, while the optimizer state (moments) is kept once and updated in place.
// In-place updates pass the same span as params_in and params_out. Per element the arithmetic is done
// in double in a fixed order, then rounded to T, so a step is bit-reproducible.
#pragma once

#include <cstdint>
#include <span>

#include "pd2bw/executor/layout.hpp"

namespace pd2bw::executor {

struct AdamWConfig {
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1e-8;
  double weight_decay = 0.1;  // decoupled; applied only to 2-D tensors (TensorInfo::is_matrix)
};

struct SgdConfig {
  double momentum = 0.9;
  double weight_decay = 0.0;  // L2 added to the gradient; applied only to 2-D tensors
};

// One AdamW step over a buffer described by layout (all spans have layout_numel(layout) elements):
//   g = grads * grad_scale;  m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2;
//   p_out = p_in - lr * (m / (1 - b1^step) / (sqrt(v / (1 - b2^step)) + eps) + wd * p_in).
// step: 1-based index of this update (bias correction). grad_scale folds in a clip factor or a
// 1/replicas average. m and v: the moments, updated in place. params_out may be params_in itself but
// must not otherwise overlap it. Throws pd2bw::Error for mismatched sizes, partial overlap or step < 1.
template <typename T>
void adamw_step(const AdamWConfig& config, const ParamLayout& layout, double lr, int64_t step,
                double grad_scale, std::span<const T> params_in, std::span<const T> grads, std::span<T> m,
                std::span<T> v, std::span<T> params_out);

// One SGD-with-momentum step (PyTorch semantics, no dampening):
//   g = grads * grad_scale + wd * p_in;  buf = momentum * buf + g;  p_out = p_in - lr * buf.
// buf starts at zero, so the first step moves by lr * g. Same buffer rules and throws as adamw_step.
template <typename T>
void sgd_step(const SgdConfig& config, const ParamLayout& layout, double lr, double grad_scale,
              std::span<const T> params_in, std::span<const T> grads, std::span<T> momentum_buf,
              std::span<T> params_out);

// Linear warm-up then cosine decay. For the 0-based update index s:
//   s < warmup_steps:            max_lr * (s + 1) / warmup_steps
//   s >= total_steps:            min_lr
//   otherwise, p = (s - warmup_steps) / (total_steps - warmup_steps):
//                                min_lr + 0.5 (1 + cos(pi p)) (max_lr - min_lr)
struct LrSchedule {
  double max_lr = 6e-4;
  double min_lr = 6e-5;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;

  // Throws pd2bw::UsageError unless 0 <= min_lr <= max_lr, 0 <= warmup_steps <= total_steps.
  void validate() const;
  // The learning rate of update s (s >= 0). Throws pd2bw::UsageError for s < 0.
  double at(int64_t step) const;
};

// Sum of squares of a gradient buffer, accumulated in double in index order. The caller adds the sums
// of every stage (and of a replica's share) before taking the square root: the global norm.
template <typename T>
double sum_of_squares(std::span<const T> values);

// The factor to scale gradients by so their global norm is at most max_norm: min(1, max_norm / norm),
// norm = sqrt(total_sum_of_squares). max_norm <= 0 turns clipping off (returns 1).
// Throws pd2bw::Error when the sum is negative or not finite (a diverged step).
double clip_factor(double total_sum_of_squares, double max_norm);

}  // namespace pd2bw::executor

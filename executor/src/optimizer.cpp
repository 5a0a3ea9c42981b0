// AdamW and SGD with momentum over flat buffers, in or out of place, with weight decay on matrices only.
#include "pd2bw/executor/optimizer.hpp"

#include <fmt/format.h>

#include <cmath>
#include <functional>

#include "pd2bw/error.hpp"

namespace pd2bw::executor {
namespace {

template <typename T>
void check_buffers(const char* who, const ParamLayout& layout, std::span<const T> params_in,
                   std::span<const T> grads, std::span<const T> state_a, std::span<const T> state_b,
                   std::span<const T> params_out) {
  const size_t n = static_cast<size_t>(layout_numel(layout));
  for (size_t size : {params_in.size(), grads.size(), state_a.size(), state_b.size(), params_out.size()}) {
    if (size != n) throw Error(fmt::format("{}: a buffer has {} elements, the layout has {}", who, size, n));
  }
  const T* in = params_in.data();
  const T* out = params_out.data();
  const std::less<const T*> before;
  const bool overlap = before(in, out + n) && before(out, in + n);
  if (overlap && in != out) {
    throw Error(
        fmt::format("{}: params_out partially overlaps params_in (in place needs the same buffer)", who));
  }
}

// Calls fn(begin, end, decay) for each tensor of the layout, decay = weight_decay on matrices only.
template <typename Fn>
void for_each_tensor(const ParamLayout& layout, double weight_decay, Fn&& fn) {
  for (const TensorInfo& t : layout) fn(t.offset, t.offset + t.numel(), t.is_matrix() ? weight_decay : 0.0);
}

}  // namespace

template <typename T>
void adamw_step(const AdamWConfig& config, const ParamLayout& layout, double lr, int64_t step,
                double grad_scale, std::span<const T> params_in, std::span<const T> grads, std::span<T> m,
                std::span<T> v, std::span<T> params_out) {
  check_buffers<T>("adamw_step", layout, params_in, grads, m, v, params_out);
  if (step < 1) throw Error(fmt::format("adamw_step: step {} must be >= 1 (1-based)", step));
  const double b1 = config.beta1;
  const double b2 = config.beta2;
  const double bc1 = 1.0 - std::pow(b1, static_cast<double>(step));
  const double bc2 = 1.0 - std::pow(b2, static_cast<double>(step));
  for_each_tensor(layout, config.weight_decay, [&](int64_t begin, int64_t end, double decay) {
    for (auto i = static_cast<size_t>(begin); i < static_cast<size_t>(end); ++i) {
      const double g = static_cast<double>(grads[i]) * grad_scale;
      const double mt = b1 * static_cast<double>(m[i]) + (1.0 - b1) * g;
      const double vt = b2 * static_cast<double>(v[i]) + (1.0 - b2) * (g * g);
      m[i] = static_cast<T>(mt);
      v[i] = static_cast<T>(vt);
      const double p = static_cast<double>(params_in[i]);
      const double update = (mt / bc1) / (std::sqrt(vt / bc2) + config.eps) + decay * p;
      params_out[i] = static_cast<T>(p - lr * update);
    }
  });
}

template <typename T>
void sgd_step(const SgdConfig& config, const ParamLayout& layout, double lr, double grad_scale,
              std::span<const T> params_in, std::span<const T> grads, std::span<T> momentum_buf,
              std::span<T> params_out) {
  check_buffers<T>("sgd_step", layout, params_in, grads, momentum_buf, momentum_buf, params_out);
  for_each_tensor(layout, config.weight_decay, [&](int64_t begin, int64_t end, double decay) {
    for (auto i = static_cast<size_t>(begin); i < static_cast<size_t>(end); ++i) {
      const double p = static_cast<double>(params_in[i]);
      const double g = static_cast<double>(grads[i]) * grad_scale + decay * p;
      const double buf = config.momentum * static_cast<double>(momentum_buf[i]) + g;
      momentum_buf[i] = static_cast<T>(buf);
      params_out[i] = static_cast<T>(p - lr * buf);
    }
  });
}

template <typename T>
double sum_of_squares(std::span<const T> values) {
  double total = 0;
  for (T x : values) total += static_cast<double>(x) * static_cast<double>(x);
  return total;
}

double clip_factor(double total_sum_of_squares, double max_norm) {
  if (!std::isfinite(total_sum_of_squares) || total_sum_of_squares < 0) {
    throw Error(fmt::format("gradient sum of squares is {}; the step diverged", total_sum_of_squares),
                "lower the learning rate or enable gradient clipping");
  }
  if (max_norm <= 0) return 1.0;
  const double norm = std::sqrt(total_sum_of_squares);
  return norm > max_norm ? max_norm / norm : 1.0;
}

#define PD2BW_INSTANTIATE(T)                                                                          \
  template void adamw_step<T>(const AdamWConfig&, const ParamLayout&, double, int64_t, double,        \
                              std::span<const T>, std::span<const T>, std::span<T>, std::span<T>,     \
                              std::span<T>);                                                          \
  template void sgd_step<T>(const SgdConfig&, const ParamLayout&, double, double, std::span<const T>, \
                            std::span<const T>, std::span<T>, std::span<T>);                          \
  template double sum_of_squares<T>(std::span<const T>);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(double)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor

// CPU layer norm over the last dimension with gamma/beta; statistics are accumulated in double. Float
// above the baseline kernel level runs the AVX2 rows of rows_simd.hpp (rows.hpp).
#include <cmath>
#include <type_traits>

#include "cpu/rows.hpp"
#include "cpu/rows_simd.hpp"
#include "pd2bw/executor/ops.hpp"

namespace pd2bw::executor::cpu {
namespace detail {

template <typename T>
void layernorm_forward_at(KernelLevel level, const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                          int64_t n, int64_t c) {
  if constexpr (std::is_same_v<T, float>) {
    if (level != KernelLevel::baseline) return layernorm_forward_avx2(x, gamma, beta, y, mean, rstd, n, c);
  }
  const double inv_c = 1.0 / static_cast<double>(c);
  for (int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * c;
    double sum = 0;
    for (int64_t j = 0; j < c; ++j) sum += xi[j];
    const double mu = sum * inv_c;
    double sq = 0;
    for (int64_t j = 0; j < c; ++j) {
      const double d = xi[j] - mu;
      sq += d * d;
    }
    const double rs = 1.0 / std::sqrt(sq * inv_c + kLayerNormEps);
    mean[i] = static_cast<T>(mu);
    rstd[i] = static_cast<T>(rs);
    // Normalise with the stored (rounded) statistics so a backward pass sees exactly what was used.
    T* yi = y + i * c;
    for (int64_t j = 0; j < c; ++j) yi[j] = (xi[j] - mean[i]) * rstd[i] * gamma[j] + beta[j];
  }
}

template <typename T>
void layernorm_backward_at(KernelLevel level, const T* dy, const T* x, const T* gamma, const T* mean, const T* rstd,
                           T* dx, T* dgamma, T* dbeta, int64_t n, int64_t c) {
  if constexpr (std::is_same_v<T, float>) {
    if (level != KernelLevel::baseline)
      return layernorm_backward_avx2(dy, x, gamma, mean, rstd, dx, dgamma, dbeta, n, c);
  }
  const double inv_c = 1.0 / static_cast<double>(c);
  for (int64_t i = 0; i < n; ++i) {
    const T* xi = x + i * c;
    const T* dyi = dy + i * c;
    // dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)), dxhat = dy * gamma.
    double sum_dxhat = 0;
    double sum_dxhat_xhat = 0;
    for (int64_t j = 0; j < c; ++j) {
      const T xhat = (xi[j] - mean[i]) * rstd[i];
      const T dxhat = dyi[j] * gamma[j];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += static_cast<double>(dxhat) * xhat;
      if (dgamma == nullptr) continue;
      dgamma[j] += dyi[j] * xhat;
      dbeta[j] += dyi[j];
    }
    if (dx == nullptr) continue;
    const double mean_dxhat = sum_dxhat * inv_c;
    const double mean_dxhat_xhat = sum_dxhat_xhat * inv_c;
    T* dxi = dx + i * c;
    for (int64_t j = 0; j < c; ++j) {
      const double xhat = static_cast<double>((xi[j] - mean[i]) * rstd[i]);
      const double dxhat = static_cast<double>(dyi[j] * gamma[j]);
      dxi[j] = static_cast<T>(rstd[i] * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
    }
  }
}

}  // namespace detail

template <typename T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd, int64_t n, int64_t c) {
  detail::layernorm_forward_at(detail::kernel_level(), x, gamma, beta, y, mean, rstd, n, c);
}

template <typename T>
void layernorm_backward(const T* dy, const T* x, const T* gamma, const T* mean, const T* rstd, T* dx, T* dgamma,
                        T* dbeta, int64_t n, int64_t c) {
  detail::layernorm_backward_at(detail::kernel_level(), dy, x, gamma, mean, rstd, dx, dgamma, dbeta, n, c);
}

#define PD2BW_INSTANTIATE(T)                                                                                   \
  template void detail::layernorm_forward_at<T>(detail::KernelLevel, const T*, const T*, const T*, T*, T*, T*, \
                                                int64_t, int64_t);                                             \
  template void detail::layernorm_backward_at<T>(detail::KernelLevel, const T*, const T*, const T*, const T*,  \
                                                 const T*, T*, T*, T*, int64_t, int64_t);                      \
  template void layernorm_forward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t);              \
  template void layernorm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(double)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cpu

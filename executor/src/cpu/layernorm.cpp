// CPU layer norm over the last dimension with gamma/beta; statistics are accumulated in double.
#include <cmath>

#include "pd2bw/executor/ops.hpp"

namespace pd2bw::executor::cpu {

template <typename T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd, int64_t n,
                       int64_t c) {
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
void layernorm_backward(const T* dy, const T* x, const T* gamma, const T* mean, const T* rstd, T* dx,
                        T* dgamma, T* dbeta, int64_t n, int64_t c) {
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

#define PD2BW_INSTANTIATE(T)                                                                                 \
  template void layernorm_forward<T>(const T*, const T*, const T*, T*, T*, T*, int64_t, int64_t);            \
  template void layernorm_backward<T>(const T*, const T*, const T*, const T*, const T*, T*, T*, T*, int64_t, \
                                      int64_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(double)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cpu

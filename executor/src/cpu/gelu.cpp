// CPU GELU, the tanh approximation used by GPT-2 and the exact (erf) form used by BERT, and their derivatives.
#include <cmath>
#include <type_traits>

#include "cpu/gelu_simd.hpp"
#include "cpu/kernel_level.hpp"
#include "pd2bw/executor/ops.hpp"

namespace pd2bw::executor::cpu {
namespace {
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kCubic = 0.044715;
constexpr double kInvSqrt2 = 0.70710678118654752440;     // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
}  // namespace

// Float above the baseline level: the kernels of gelu_simd.hpp (16 lanes at avx512, 8 at avx2).
template <typename T>
bool simd_gelu() {
  return std::is_same_v<T, float> && detail::kernel_level() != detail::KernelLevel::baseline;
}

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (detail::kernel_level() == detail::KernelLevel::avx512) return detail::gelu_tanh_forward_avx512(x, y, n);
    if (simd_gelu<T>()) return detail::gelu_tanh_forward_avx2(x, y, n);
  }
  const T s = static_cast<T>(kSqrt2OverPi);
  const T a = static_cast<T>(kCubic);
  for (int64_t i = 0; i < n; ++i) {
    const T xi = x[i];
    const T u = s * (xi + a * xi * xi * xi);
    if constexpr (std::is_same_v<T, float>) {  // the logistic form of every float GELU (gelu_simd.hpp)
      y[i] = xi / (1.0f + std::exp(std::fmin(-2.0f * u, 88.0f)));
    } else {
      y[i] = T(0.5) * xi * (T(1) + std::tanh(u));
    }
  }
}

template <typename T>
void gelu_backward(const T* dy, const T* x, T* dx, int64_t n) {
  if constexpr (std::is_same_v<T, float>) {
    if (detail::kernel_level() == detail::KernelLevel::avx512) return detail::gelu_tanh_backward_avx512(dy, x, dx, n);
    if (simd_gelu<T>()) return detail::gelu_tanh_backward_avx2(dy, x, dx, n);
  }
  const T s = static_cast<T>(kSqrt2OverPi);
  const T a = static_cast<T>(kCubic);
  for (int64_t i = 0; i < n; ++i) {
    const T xi = x[i];
    const T du = s * (T(1) + T(3) * a * xi * xi);
    if constexpr (std::is_same_v<T, float>) {  // s + 2 x s (1 - s) u', 1 - s = e s, as gelu_simd.hpp
      const float e = std::exp(std::fmin(-2.0f * (s * (xi + a * xi * xi * xi)), 88.0f));
      const float sg = 1.0f / (1.0f + e);
      dx[i] = (sg + 2.0f * xi * sg * (e * sg) * du) * dy[i];
    } else {
      const T th = std::tanh(s * (xi + a * xi * xi * xi));
      const T grad = T(0.5) * (T(1) + th) + T(0.5) * xi * (T(1) - th * th) * du;
      dx[i] = grad * dy[i];
    }
  }
}

template <typename T>
void gelu_erf_forward(const T* x, T* y, int64_t n) {
  const T r = static_cast<T>(kInvSqrt2);
  for (int64_t i = 0; i < n; ++i) {
    const T xi = x[i];
    y[i] = T(0.5) * xi * (T(1) + std::erf(xi * r));
  }
}

template <typename T>
void gelu_erf_backward(const T* dy, const T* x, T* dx, int64_t n) {
  const T r = static_cast<T>(kInvSqrt2);
  const T d = static_cast<T>(kInvSqrt2Pi);
  for (int64_t i = 0; i < n; ++i) {
    const T xi = x[i];
    const T cdf = T(0.5) * (T(1) + std::erf(xi * r));
    const T pdf = d * std::exp(T(-0.5) * xi * xi);
    dx[i] = (cdf + xi * pdf) * dy[i];
  }
}

#define PD2BW_INSTANTIATE(T)                                         \
  template void gelu_forward<T>(const T*, T*, int64_t);              \
  template void gelu_backward<T>(const T*, const T*, T*, int64_t);   \
  template void gelu_erf_forward<T>(const T*, T*, int64_t);          \
  template void gelu_erf_backward<T>(const T*, const T*, T*, int64_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(double)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cpu

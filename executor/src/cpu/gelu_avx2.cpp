// The tanh GELU of the avx2 and avx512 levels (gelu_simd.hpp). Only the functions marked
// PD2BW_SIMD_TARGET use AVX2 and FMA.
#include <immintrin.h>

#include "cpu/gelu_simd.hpp"

#define PD2BW_SIMD_TARGET __attribute__((target("avx2,fma")))
#include "cpu/exp_avx2.hpp"

namespace pd2bw::executor::cpu::detail {
namespace {

constexpr float kSqrt2OverPi = kGeluSqrt2OverPi;
constexpr float kCubic = kGeluCubic;

// exp(-2u), u = sqrt(2/pi) (x + 0.044715 x^3), the scalar form's operations in its order.
PD2BW_SIMD_TARGET __m256 exp_minus_2u(__m256 x) {
  const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(kCubic), x), x), x);
  const __m256 u = _mm256_mul_ps(_mm256_set1_ps(kSqrt2OverPi), _mm256_add_ps(x, x3));
  return exp_ps(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u));
}

PD2BW_SIMD_TARGET __m256 forward8(__m256 x) {
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_minus_2u(x)));
}

// d gelu / dx = s + 2 x s (1 - s) u', with s = 1 / (1 + e), 1 - s = e s and u' = sqrt(2/pi) (1 + 3a x^2).
PD2BW_SIMD_TARGET __m256 backward8(__m256 dy, __m256 x) {
  const __m256 e = exp_minus_2u(x);
  const __m256 s = _mm256_div_ps(_mm256_set1_ps(1.0f), _mm256_add_ps(_mm256_set1_ps(1.0f), e));
  const __m256 du = _mm256_mul_ps(
      _mm256_set1_ps(kSqrt2OverPi),
      _mm256_add_ps(_mm256_set1_ps(1.0f), _mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(3.0f * kCubic), x), x)));
  const __m256 t =
      _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(2.0f), x), s), _mm256_mul_ps(e, s)), du);
  return _mm256_mul_ps(_mm256_add_ps(s, t), dy);
}

PD2BW_SIMD_TARGET void forward(const float* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, forward8(_mm256_loadu_ps(x + i)));
  if (i == n) return;
  float xs[8] = {};
  float ys[8];
  for (int64_t j = i; j < n; ++j) xs[j - i] = x[j];
  _mm256_storeu_ps(ys, forward8(_mm256_loadu_ps(xs)));
  for (int64_t j = i; j < n; ++j) y[j] = ys[j - i];
}

PD2BW_SIMD_TARGET void backward(const float* dy, const float* x, float* dx, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dx + i, backward8(_mm256_loadu_ps(dy + i), _mm256_loadu_ps(x + i)));
  if (i == n) return;
  float xs[8] = {};
  float ds[8] = {};
  float out[8];
  for (int64_t j = i; j < n; ++j) {
    xs[j - i] = x[j];
    ds[j - i] = dy[j];
  }
  _mm256_storeu_ps(out, backward8(_mm256_loadu_ps(ds), _mm256_loadu_ps(xs)));
  for (int64_t j = i; j < n; ++j) dx[j] = out[j - i];
}

}  // namespace

void gelu_tanh_forward_avx2(const float* x, float* y, int64_t n) {
  forward(x, y, n);
}
void gelu_tanh_backward_avx2(const float* dy, const float* x, float* dx, int64_t n) {
  backward(dy, x, dx, n);
}

}  // namespace pd2bw::executor::cpu::detail

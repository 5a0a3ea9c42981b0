// The tanh GELU of the avx512 level: gelu_avx2.cpp's lane arithmetic, operation for operation, on 16
// lanes (gelu_simd.hpp), so both levels give the same bits. Only the functions marked PD2BW_SIMD_TARGET
// use AVX-512.
#include <immintrin.h>

#include "cpu/gelu_simd.hpp"

#define PD2BW_SIMD_TARGET __attribute__((target("avx512f,fma")))

namespace pd2bw::executor::cpu::detail {
namespace {

using reg = __m512;

constexpr float kSqrt2OverPi = kGeluSqrt2OverPi;
constexpr float kCubic = kGeluCubic;

PD2BW_SIMD_TARGET inline reg splat(float v) {
  return _mm512_set1_ps(v);
}

// exp_avx2.hpp's exp_ps on 16 lanes. (The all-lanes masked forms of min, max, roundscale, cvtps and slli
// are the plain instructions; GCC 12 warns about the undefined pass-through of the unmasked ones.)
constexpr __mmask16 kAll = 0xFFFF;

PD2BW_SIMD_TARGET reg exp16(reg x) {
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  x = _mm512_maskz_max_ps(kAll, _mm512_maskz_min_ps(kAll, x, splat(88.0f)), splat(-87.0f));
  const reg n = _mm512_maskz_roundscale_ps(kAll, _mm512_mul_ps(x, splat(1.44269504088896341f)),
                                           _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  reg r = _mm512_fnmadd_ps(n, splat(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, splat(-2.12194440e-4f), r);
  reg p = splat(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, splat(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, splat(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, splat(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, splat(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, splat(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, splat(1.0f)));
  const __m512i e =
      _mm512_maskz_slli_epi32(kAll, _mm512_add_epi32(_mm512_maskz_cvtps_epi32(kAll, n), _mm512_set1_epi32(127)), 23);
  const reg out = _mm512_mul_ps(p, _mm512_castsi512_ps(e));
  return _mm512_mask_blend_ps(nan, out, x);
}

PD2BW_SIMD_TARGET reg exp_minus_2u(reg x) {
  const reg x3 = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(splat(kCubic), x), x), x);
  const reg u = _mm512_mul_ps(splat(kSqrt2OverPi), _mm512_add_ps(x, x3));
  return exp16(_mm512_mul_ps(splat(-2.0f), u));
}

PD2BW_SIMD_TARGET reg forward16(reg x) {
  return _mm512_div_ps(x, _mm512_add_ps(splat(1.0f), exp_minus_2u(x)));
}

PD2BW_SIMD_TARGET reg backward16(reg dy, reg x) {
  const reg e = exp_minus_2u(x);
  const reg s = _mm512_div_ps(splat(1.0f), _mm512_add_ps(splat(1.0f), e));
  const reg du = _mm512_mul_ps(splat(kSqrt2OverPi),
                               _mm512_add_ps(splat(1.0f), _mm512_mul_ps(_mm512_mul_ps(splat(3.0f * kCubic), x), x)));
  const reg t = _mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_mul_ps(splat(2.0f), x), s), _mm512_mul_ps(e, s)), du);
  return _mm512_mul_ps(_mm512_add_ps(s, t), dy);
}

// Lanes past n are masked off (loads give zeros, stores leave memory alone).
PD2BW_SIMD_TARGET void forward(const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(y + i, m, forward16(_mm512_maskz_loadu_ps(m, x + i)));
  }
}

PD2BW_SIMD_TARGET void backward(const float* dy, const float* x, float* dx, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(dx + i, m, backward16(_mm512_maskz_loadu_ps(m, dy + i), _mm512_maskz_loadu_ps(m, x + i)));
  }
}

}  // namespace

void gelu_tanh_forward_avx512(const float* x, float* y, int64_t n) {
  forward(x, y, n);
}
void gelu_tanh_backward_avx512(const float* dy, const float* x, float* dx, int64_t n) {
  backward(dy, x, dx, n);
}

}  // namespace pd2bw::executor::cpu::detail

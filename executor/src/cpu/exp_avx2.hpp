// Internal: exp of 8 floats with AVX2 + FMA, shared by the SIMD GELU and softmax. Include it only from a
// file that defines PD2BW_SIMD_TARGET as target("avx2,fma") (or wider) before including; everything here
// has internal linkage. Not a public header.
//
// exp_ps: x clamped to [-87, 88] (so 2^n stays a normal float), a degree-6 polynomial on
// [-ln2/2, ln2/2] (about 1 ulp), NaN stays NaN. Each lane is computed alone: the same bits in any lane.
#pragma once

#include <immintrin.h>

#ifndef PD2BW_SIMD_TARGET
#error "define PD2BW_SIMD_TARGET before including exp_avx2.hpp"
#endif

namespace {

PD2BW_SIMD_TARGET inline __m256 exp_ps(__m256 x) {
  const __m256 hi = _mm256_set1_ps(88.0f);
  const __m256 lo = _mm256_set1_ps(-87.0f);
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  x = _mm256_max_ps(_mm256_min_ps(x, hi), lo);
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  const __m256 out = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
  return _mm256_blendv_ps(out, x, nan);
}

}  // namespace

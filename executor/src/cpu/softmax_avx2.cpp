// The float attention softmax rows of the avx2 and avx512 levels (rows_simd.hpp). Only the functions
// marked PD2BW_SIMD_TARGET use AVX2 and FMA.
#include <immintrin.h>

#include <algorithm>

#include "cpu/rows_simd.hpp"

#define PD2BW_SIMD_TARGET __attribute__((target("avx2,fma")))
#include "cpu/exp_avx2.hpp"

namespace pd2bw::executor::cpu::detail {
namespace {

PD2BW_SIMD_TARGET inline __m256d lo_pd(__m256 v) {
  return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}
PD2BW_SIMD_TARGET inline __m256d hi_pd(__m256 v) {
  return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}
// ((l0 + h0) + (l2 + h2)) + ((l1 + h1) + (l3 + h3)).
PD2BW_SIMD_TARGET inline double hsum(__m256d lo, __m256d hi) {
  const __m256d s = _mm256_add_pd(lo, hi);
  const __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(t) + _mm_cvtsd_f64(_mm_unpackhi_pd(t, t));
}

// exp(scale * s - mx) lane by lane (the scalar code's float operations), 0 where the argument is below
// -87 (exp_ps would clamp it there).
PD2BW_SIMD_TARGET inline __m256 shifted_exp(__m256 s, __m256 scale, __m256 mx) {
  const __m256 arg = _mm256_sub_ps(_mm256_mul_ps(scale, s), mx);
  const __m256 tiny = _mm256_cmp_ps(arg, _mm256_set1_ps(-87.0f), _CMP_LT_OQ);
  return _mm256_andnot_ps(tiny, exp_ps(arg));
}

PD2BW_SIMD_TARGET void forward_row(const float* scores, float* p, int64_t end, int64_t t, float scale) {
  const int64_t body = end - end % 8;
  const __m256 sv = _mm256_set1_ps(scale);
  // The maximum of scale * s (the same whatever the order but for NaN and the sign of a zero maximum,
  // neither of which changes exp(x - max)).
  float mx = scale * scores[0];
  if (body > 0) {
    __m256 m = _mm256_mul_ps(sv, _mm256_loadu_ps(scores));
    for (int64_t s = 8; s < body; s += 8) m = _mm256_max_ps(m, _mm256_mul_ps(sv, _mm256_loadu_ps(scores + s)));
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, m);
    for (float v : lanes) mx = std::max(mx, v);
  }
  for (int64_t s = body; s < end; ++s) mx = std::max(mx, scale * scores[s]);
  const __m256 mv = _mm256_set1_ps(mx);
  __m256d lo = _mm256_setzero_pd();
  __m256d hi = _mm256_setzero_pd();
  for (int64_t s = 0; s < body; s += 8) {
    const __m256 e = shifted_exp(_mm256_loadu_ps(scores + s), sv, mv);
    _mm256_storeu_ps(p + s, e);
    lo = _mm256_add_pd(lo, lo_pd(e));
    hi = _mm256_add_pd(hi, hi_pd(e));
  }
  double sum = hsum(lo, hi);
  if (body < end) {  // the tail through padded lanes: each element by the same lane function
    alignas(32) float in[8] = {};
    alignas(32) float out[8];
    std::copy(scores + body, scores + end, in);
    _mm256_store_ps(out, shifted_exp(_mm256_load_ps(in), sv, mv));
    for (int64_t s = body; s < end; ++s) sum += p[s] = out[s - body];
  }
  const float inv = static_cast<float>(1.0 / sum);
  const __m256 iv = _mm256_set1_ps(inv);
  for (int64_t s = 0; s < body; s += 8) _mm256_storeu_ps(p + s, _mm256_mul_ps(_mm256_loadu_ps(p + s), iv));
  for (int64_t s = body; s < end; ++s) p[s] *= inv;
  std::fill(p + end, p + t, 0.0f);
}

PD2BW_SIMD_TARGET void backward_row(const float* p, float* d, int64_t end, int64_t t, float scale) {
  const int64_t body = end - end % 8;
  __m256d lo = _mm256_setzero_pd();
  __m256d hi = _mm256_setzero_pd();
  for (int64_t s = 0; s < body; s += 8) {
    const __m256 pv = _mm256_loadu_ps(p + s);
    const __m256 dv = _mm256_loadu_ps(d + s);
    lo = _mm256_add_pd(lo, _mm256_mul_pd(lo_pd(pv), lo_pd(dv)));
    hi = _mm256_add_pd(hi, _mm256_mul_pd(hi_pd(pv), hi_pd(dv)));
  }
  double dot = hsum(lo, hi);
  for (int64_t s = body; s < end; ++s) dot += static_cast<double>(p[s]) * d[s];
  const float dot_f = static_cast<float>(dot);
  const __m256 sv = _mm256_set1_ps(scale);
  const __m256 dotv = _mm256_set1_ps(dot_f);
  for (int64_t s = 0; s < body; s += 8) {
    const __m256 g =
        _mm256_mul_ps(_mm256_mul_ps(sv, _mm256_loadu_ps(p + s)), _mm256_sub_ps(_mm256_loadu_ps(d + s), dotv));
    _mm256_storeu_ps(d + s, g);
  }
  for (int64_t s = body; s < end; ++s) d[s] = scale * p[s] * (d[s] - dot_f);
  std::fill(d + end, d + t, 0.0f);
}

}  // namespace

void softmax_row_avx2(const float* scores, float* p, int64_t end, int64_t t, float scale) {
  forward_row(scores, p, end, t, scale);
}
void softmax_backward_row_avx2(const float* p, float* d, int64_t end, int64_t t, float scale) {
  backward_row(p, d, end, t, scale);
}

}  // namespace pd2bw::executor::cpu::detail

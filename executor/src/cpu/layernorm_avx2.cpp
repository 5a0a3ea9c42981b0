// The float layer norm of the avx2 and avx512 levels (rows_simd.hpp). Only the functions marked
// PD2BW_SIMD_TARGET use AVX2 and FMA.
#include <immintrin.h>

#include <cmath>

#include "cpu/rows_simd.hpp"
#include "pd2bw/executor/ops.hpp"

#define PD2BW_SIMD_TARGET __attribute__((target("avx2,fma")))

namespace pd2bw::executor::cpu::detail {
namespace {

// Two doubles accumulators cover lanes 0-3 and 4-7 of 8 floats.
struct Acc {
  __m256d lo, hi;
};

PD2BW_SIMD_TARGET inline Acc zero_acc() {
  return {_mm256_setzero_pd(), _mm256_setzero_pd()};
}
PD2BW_SIMD_TARGET inline __m256d lo_pd(__m256 v) {
  return _mm256_cvtps_pd(_mm256_castps256_ps128(v));
}
PD2BW_SIMD_TARGET inline __m256d hi_pd(__m256 v) {
  return _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
}
// ((l0 + h0) + (l2 + h2)) + ((l1 + h1) + (l3 + h3)).
PD2BW_SIMD_TARGET inline double hsum(Acc a) {
  const __m256d s = _mm256_add_pd(a.lo, a.hi);
  const __m128d t = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
  return _mm_cvtsd_f64(t) + _mm_cvtsd_f64(_mm_unpackhi_pd(t, t));
}

PD2BW_SIMD_TARGET void forward_row(const float* x, const float* gamma, const float* beta, float* y, float* mean,
                                   float* rstd, int64_t c) {
  const double inv_c = 1.0 / static_cast<double>(c);
  const int64_t body = c - c % 8;
  Acc s = zero_acc();
  for (int64_t j = 0; j < body; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    s.lo = _mm256_add_pd(s.lo, lo_pd(v));
    s.hi = _mm256_add_pd(s.hi, hi_pd(v));
  }
  double sum = hsum(s);
  for (int64_t j = body; j < c; ++j) sum += x[j];
  const double mu = sum * inv_c;
  const __m256d muv = _mm256_set1_pd(mu);
  Acc q = zero_acc();
  for (int64_t j = 0; j < body; j += 8) {
    const __m256 v = _mm256_loadu_ps(x + j);
    const __m256d dl = _mm256_sub_pd(lo_pd(v), muv);
    const __m256d dh = _mm256_sub_pd(hi_pd(v), muv);
    q.lo = _mm256_add_pd(q.lo, _mm256_mul_pd(dl, dl));
    q.hi = _mm256_add_pd(q.hi, _mm256_mul_pd(dh, dh));
  }
  double sq = hsum(q);
  for (int64_t j = body; j < c; ++j) {
    const double d = x[j] - mu;
    sq += d * d;
  }
  const float m = static_cast<float>(mu);
  const float r = static_cast<float>(1.0 / std::sqrt(sq * inv_c + kLayerNormEps));
  *mean = m;
  *rstd = r;
  // The scalar code's (x - mean) * rstd * gamma + beta with the stored statistics.
  const __m256 mv = _mm256_set1_ps(m);
  const __m256 rv = _mm256_set1_ps(r);
  for (int64_t j = 0; j < body; j += 8) {
    const __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv), rv);
    _mm256_storeu_ps(y + j, _mm256_add_ps(_mm256_mul_ps(xh, _mm256_loadu_ps(gamma + j)), _mm256_loadu_ps(beta + j)));
  }
  for (int64_t j = body; j < c; ++j) y[j] = (x[j] - m) * r * gamma[j] + beta[j];
}

// sum_j dxhat and sum_j dxhat * xhat of one row; adds dy * xhat and dy into dgamma and dbeta unless null.
PD2BW_SIMD_TARGET void backward_sums(const float* dy, const float* x, const float* gamma, float m, float r,
                                     float* dgamma, float* dbeta, int64_t c, double* sum_dxhat,
                                     double* sum_dxhat_xhat) {
  const int64_t body = c - c % 8;
  const __m256 mv = _mm256_set1_ps(m);
  const __m256 rv = _mm256_set1_ps(r);
  Acc sd = zero_acc();
  Acc sx = zero_acc();
  for (int64_t j = 0; j < body; j += 8) {
    const __m256 dyv = _mm256_loadu_ps(dy + j);
    const __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv), rv);
    const __m256 dxh = _mm256_mul_ps(dyv, _mm256_loadu_ps(gamma + j));
    sd.lo = _mm256_add_pd(sd.lo, lo_pd(dxh));
    sd.hi = _mm256_add_pd(sd.hi, hi_pd(dxh));
    sx.lo = _mm256_add_pd(sx.lo, _mm256_mul_pd(lo_pd(dxh), lo_pd(xh)));
    sx.hi = _mm256_add_pd(sx.hi, _mm256_mul_pd(hi_pd(dxh), hi_pd(xh)));
    if (dgamma == nullptr) continue;
    _mm256_storeu_ps(dgamma + j, _mm256_add_ps(_mm256_loadu_ps(dgamma + j), _mm256_mul_ps(dyv, xh)));
    _mm256_storeu_ps(dbeta + j, _mm256_add_ps(_mm256_loadu_ps(dbeta + j), dyv));
  }
  double s1 = hsum(sd);
  double s2 = hsum(sx);
  for (int64_t j = body; j < c; ++j) {
    const float xh = (x[j] - m) * r;
    const float dxh = dy[j] * gamma[j];
    s1 += dxh;
    s2 += static_cast<double>(dxh) * xh;
    if (dgamma == nullptr) continue;
    dgamma[j] += dy[j] * xh;
    dbeta[j] += dy[j];
  }
  *sum_dxhat = s1;
  *sum_dxhat_xhat = s2;
}

// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)) in double, as the scalar code.
PD2BW_SIMD_TARGET void backward_dx(const float* dy, const float* x, const float* gamma, float m, float r,
                                   double mean_dxhat, double mean_dxhat_xhat, float* dx, int64_t c) {
  const int64_t body = c - c % 8;
  const __m256 mv = _mm256_set1_ps(m);
  const __m256 rv = _mm256_set1_ps(r);
  const __m256d rd = _mm256_set1_pd(r);
  const __m256d md = _mm256_set1_pd(mean_dxhat);
  const __m256d mdx = _mm256_set1_pd(mean_dxhat_xhat);
  for (int64_t j = 0; j < body; j += 8) {
    const __m256 xh = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + j), mv), rv);
    const __m256 dxh = _mm256_mul_ps(_mm256_loadu_ps(dy + j), _mm256_loadu_ps(gamma + j));
    const __m256d lo = _mm256_mul_pd(rd, _mm256_sub_pd(_mm256_sub_pd(lo_pd(dxh), md), _mm256_mul_pd(lo_pd(xh), mdx)));
    const __m256d hi = _mm256_mul_pd(rd, _mm256_sub_pd(_mm256_sub_pd(hi_pd(dxh), md), _mm256_mul_pd(hi_pd(xh), mdx)));
    _mm256_storeu_ps(dx + j, _mm256_set_m128(_mm256_cvtpd_ps(hi), _mm256_cvtpd_ps(lo)));
  }
  for (int64_t j = body; j < c; ++j) {
    const double xh = static_cast<double>((x[j] - m) * r);
    const double dxh = static_cast<double>(dy[j] * gamma[j]);
    dx[j] = static_cast<float>(r * (dxh - mean_dxhat - xh * mean_dxhat_xhat));
  }
}

}  // namespace

void layernorm_forward_avx2(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                            int64_t n, int64_t c) {
  for (int64_t i = 0; i < n; ++i) forward_row(x + i * c, gamma, beta, y + i * c, mean + i, rstd + i, c);
}

void layernorm_backward_avx2(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                             float* dx, float* dgamma, float* dbeta, int64_t n, int64_t c) {
  const double inv_c = 1.0 / static_cast<double>(c);
  for (int64_t i = 0; i < n; ++i) {
    const float* xi = x + i * c;
    const float* dyi = dy + i * c;
    double sum_dxhat = 0;
    double sum_dxhat_xhat = 0;
    backward_sums(dyi, xi, gamma, mean[i], rstd[i], dgamma, dbeta, c, &sum_dxhat, &sum_dxhat_xhat);
    if (dx == nullptr) continue;
    backward_dx(dyi, xi, gamma, mean[i], rstd[i], sum_dxhat * inv_c, sum_dxhat_xhat * inv_c, dx + i * c, c);
  }
}

}  // namespace pd2bw::executor::cpu::detail

// The avx2 level's GEMM: gemm_packed.hpp's driver with a 6 x 16 (float) or 6 x 8 (double) register
// tile of AVX2 FMAs. Only the functions marked PD2BW_SIMD_TARGET use AVX2, so nothing shared
// with other files (inline library code) is compiled for it.
#include <immintrin.h>

#include "cpu/gemm_simd.hpp"

#define PD2BW_SIMD_TARGET __attribute__((target("avx2,fma")))
#include "cpu/gemm_packed.hpp"

namespace pd2bw::executor::cpu::detail {
namespace {

struct VecF {
  using T = float;
  using reg = __m256;
  static constexpr int kWidth = 8;
  static constexpr int kRows = 6;
  PD2BW_SIMD_TARGET static reg zero() { return _mm256_setzero_ps(); }
  PD2BW_SIMD_TARGET static reg load(const T* p) { return _mm256_loadu_ps(p); }
  PD2BW_SIMD_TARGET static reg bcast(T x) { return _mm256_set1_ps(x); }
  PD2BW_SIMD_TARGET static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_ps(a, b, c); }
  PD2BW_SIMD_TARGET static reg add(reg a, reg b) { return _mm256_add_ps(a, b); }
  PD2BW_SIMD_TARGET static void store(T* p, reg x) { _mm256_storeu_ps(p, x); }
};

struct VecD {
  using T = double;
  using reg = __m256d;
  static constexpr int kWidth = 4;
  static constexpr int kRows = 6;
  PD2BW_SIMD_TARGET static reg zero() { return _mm256_setzero_pd(); }
  PD2BW_SIMD_TARGET static reg load(const T* p) { return _mm256_loadu_pd(p); }
  PD2BW_SIMD_TARGET static reg bcast(T x) { return _mm256_set1_pd(x); }
  PD2BW_SIMD_TARGET static reg fma(reg a, reg b, reg c) { return _mm256_fmadd_pd(a, b, c); }
  PD2BW_SIMD_TARGET static reg add(reg a, reg b) { return _mm256_add_pd(a, b); }
  PD2BW_SIMD_TARGET static void store(T* p, reg x) { _mm256_storeu_pd(p, x); }
};

constexpr int64_t kMc = 72;

}  // namespace

void gemm_avx2(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float* c, int64_t ldc, bool accumulate, const float* bias) {
  gemm_packed_here<VecF, kMc>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate, bias);
}
void gemm_avx2(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
               int64_t ldb, double* c, int64_t ldc, bool accumulate, const double* bias) {
  gemm_packed_here<VecD, kMc>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate, bias);
}

}  // namespace pd2bw::executor::cpu::detail

// The avx512 level's GEMM: gemm_packed.hpp's driver with an 8 x 32 (float) or 8 x 16 (double) register
// tile of AVX-512F FMAs. Only the functions marked PD2BW_SIMD_TARGET use AVX-512, so nothing shared
// with other files (inline library code) is compiled for it.
#include <immintrin.h>

#include "cpu/gemm_simd.hpp"

#define PD2BW_SIMD_TARGET __attribute__((target("avx512f,fma")))
#include "cpu/gemm_packed.hpp"

namespace pd2bw::executor::cpu::detail {
namespace {

struct VecF {
  using T = float;
  using reg = __m512;
  static constexpr int kWidth = 16;
  static constexpr int kRows = 8;
  PD2BW_SIMD_TARGET static reg zero() { return _mm512_setzero_ps(); }
  PD2BW_SIMD_TARGET static reg load(const T* p) { return _mm512_loadu_ps(p); }
  PD2BW_SIMD_TARGET static reg bcast(T x) { return _mm512_set1_ps(x); }
  PD2BW_SIMD_TARGET static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_ps(a, b, c); }
  PD2BW_SIMD_TARGET static reg add(reg a, reg b) { return _mm512_add_ps(a, b); }
  PD2BW_SIMD_TARGET static void store(T* p, reg x) { _mm512_storeu_ps(p, x); }
};

struct VecD {
  using T = double;
  using reg = __m512d;
  static constexpr int kWidth = 8;
  static constexpr int kRows = 8;
  PD2BW_SIMD_TARGET static reg zero() { return _mm512_setzero_pd(); }
  PD2BW_SIMD_TARGET static reg load(const T* p) { return _mm512_loadu_pd(p); }
  PD2BW_SIMD_TARGET static reg bcast(T x) { return _mm512_set1_pd(x); }
  PD2BW_SIMD_TARGET static reg fma(reg a, reg b, reg c) { return _mm512_fmadd_pd(a, b, c); }
  PD2BW_SIMD_TARGET static reg add(reg a, reg b) { return _mm512_add_pd(a, b); }
  PD2BW_SIMD_TARGET static void store(T* p, reg x) { _mm512_storeu_pd(p, x); }
};

constexpr int64_t kMc = 128;

}  // namespace

void gemm_avx512(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
                 int64_t ldb, float* c, int64_t ldc, bool accumulate, const float* bias) {
  gemm_packed_here<VecF, kMc>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate, bias);
}
void gemm_avx512(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda, const double* b,
                 int64_t ldb, double* c, int64_t ldc, bool accumulate, const double* bias) {
  gemm_packed_here<VecD, kMc>(ta, tb, m, n, k, a, lda, b, ldb, c, ldc, accumulate, bias);
}

}  // namespace pd2bw::executor::cpu::detail

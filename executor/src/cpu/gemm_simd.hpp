// Internal: the GEMMs of the avx2 and avx512 kernel levels (kernel_level.hpp), same contract as
// gemm.hpp's gemm for every shape (bias as there, or nullptr). Call one only when
// kernel_level_supported says the CPU has it. Not a public header.
#pragma once

#include <cstdint>

namespace pd2bw::executor::cpu::detail {

void gemm_avx2(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
               int64_t ldb, float* c, int64_t ldc, bool accumulate, const float* bias);
void gemm_avx2(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
               const double* b, int64_t ldb, double* c, int64_t ldc, bool accumulate, const double* bias);
void gemm_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float* c, int64_t ldc, bool accumulate, const float* bias);
void gemm_avx512(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const double* a, int64_t lda,
                 const double* b, int64_t ldb, double* c, int64_t ldc, bool accumulate, const double* bias);

}  // namespace pd2bw::executor::cpu::detail

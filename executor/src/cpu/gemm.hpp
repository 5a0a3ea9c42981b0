// Internal: the one matrix-product entry point of the CPU backend. Not a public header.
#pragma once

#include <cstdint>

#include "cpu/kernel_level.hpp"

namespace pd2bw::executor::cpu::detail {

// C (M, N) = op(A) op(B), or += when accumulate. All matrices are row-major with explicit row strides
// (lda, ldb, ldc >= their row lengths), so a head's slice of a (B, T, 3C) tensor can be used in place.
// op(A) is (M, K): A is (M, K) with stride lda, or (K, M) when trans_a; op(B) is (K, N) likewise.
// The order of the additions depends only on (M, N, K), the kernel level and (baseline) the machine's
// cache sizes, never on buffer addresses: the baseline's Eigen blocked GEMM packs its operands, the avx2
// and avx512 levels pack theirs (gemm_packed.hpp), and shapes Eigen would send to its address-dependent
// small-product or matrix-vector kernels take a plain fixed-order loop instead at every level.
// C must not overlap A or B. bias: nullptr, or n values added to every row of C after the product,
// as a separate pass over C would add them (C = (op(A) op(B) [+ C]) + bias). gemm runs the process's
// kernel_level(); gemm_at a given one (the CPU must support it).
template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
          T* c, int64_t ldc, bool accumulate, const T* bias = nullptr);
template <typename T>
void gemm_at(KernelLevel level, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
             const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate, const T* bias = nullptr);

}  // namespace pd2bw::executor::cpu::detail

// The CPU matrix product: for real matrices the kernel level's GEMM (Eigen's blocked GEMM at the
// baseline, the packed FMA kernels of gemm_simd.hpp above it), a fixed-order loop for the rest.
#include "cpu/gemm.hpp"

#include <Eigen/Core>

#include "cpu/gemm_simd.hpp"

namespace pd2bw::executor::cpu::detail {
namespace {

// Eigen 3.3/3.4 evaluate a dynamic product with a coefficient-based kernel when M + N + K is below
// EIGEN_GEMM_TO_COEFFBASED_THRESHOLD and with GEMV when M or N is 1. Both vectorise reductions with
// an alignment-dependent peel, so their rounding could change with the buffer address; we keep them
// out of the way and only hand Eigen shapes that reach the packed GEMM kernel. The avx2 and avx512
// kernels do not depend on alignment at any shape; they take the same shapes as Eigen, so every level
// computes the small ones with the same loop.
constexpr int64_t kEigenMinDimSum = 24;
static_assert(EIGEN_GEMM_TO_COEFFBASED_THRESHOLD <= kEigenMinDimSum,
              "update kEigenMinDimSum: this Eigen sends larger products to its coefficient-based kernel");

template <typename T>
using RowMat = Eigen::Matrix<T, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
template <typename T>
using ConstView = Eigen::Map<const RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;
template <typename T>
using View = Eigen::Map<RowMat<T>, Eigen::Unaligned, Eigen::OuterStride<>>;

template <typename T>
void gemm_loop(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
               const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      T sum = 0;
      for (int64_t p = 0; p < k; ++p) {
        const T av = trans_a ? a[p * lda + i] : a[i * lda + p];
        const T bv = trans_b ? b[j * ldb + p] : b[p * ldb + j];
        sum += av * bv;
      }
      T& out = c[i * ldc + j];
      out = accumulate ? out + sum : sum;
    }
  }
}

template <typename T, typename Lhs, typename Rhs>
void assign_product(View<T>& c, const Lhs& a, const Rhs& b, bool accumulate) {
  if (accumulate) {
    c.noalias() += a * b;
  } else {
    c.noalias() = a * b;
  }
}

template <typename T>
void gemm_eigen(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b,
                int64_t ldb, T* c, int64_t ldc, bool accumulate) {
  const ConstView<T> av(a, trans_a ? k : m, trans_a ? m : k, Eigen::OuterStride<>(lda));
  const ConstView<T> bv(b, trans_b ? n : k, trans_b ? k : n, Eigen::OuterStride<>(ldb));
  View<T> cv(c, m, n, Eigen::OuterStride<>(ldc));
  if (!trans_a && !trans_b) {
    assign_product<T>(cv, av, bv, accumulate);
  } else if (!trans_a) {
    assign_product<T>(cv, av, bv.transpose(), accumulate);
  } else if (!trans_b) {
    assign_product<T>(cv, av.transpose(), bv, accumulate);
  } else {
    assign_product<T>(cv, av.transpose(), bv.transpose(), accumulate);
  }
}

}  // namespace

template <typename T>
void gemm_at(KernelLevel level, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda,
             const T* b, int64_t ldb, T* c, int64_t ldc, bool accumulate, const T* bias) {
  if (m >= 2 && n >= 2 && m + n + k >= kEigenMinDimSum && level != KernelLevel::baseline) {
    // The packed kernels add the bias as they store C's last depth block.
    if (level == KernelLevel::avx512)
      return gemm_avx512(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate, bias);
    return gemm_avx2(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate, bias);
  }
  if (m < 2 || n < 2 || m + n + k < kEigenMinDimSum) {
    gemm_loop(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  } else {
    gemm_eigen(trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate);
  }
  if (bias == nullptr) return;
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] += bias[j];
}

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const T* a, int64_t lda, const T* b, int64_t ldb,
          T* c, int64_t ldc, bool accumulate, const T* bias) {
  gemm_at(kernel_level(), trans_a, trans_b, m, n, k, a, lda, b, ldb, c, ldc, accumulate, bias);
}

template void gemm<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*, int64_t, float*,
                          int64_t, bool, const float*);
template void gemm<double>(bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, const double*, int64_t,
                           double*, int64_t, bool, const double*);
template void gemm_at<float>(KernelLevel, bool, bool, int64_t, int64_t, int64_t, const float*, int64_t, const float*,
                             int64_t, float*, int64_t, bool, const float*);
template void gemm_at<double>(KernelLevel, bool, bool, int64_t, int64_t, int64_t, const double*, int64_t, const double*,
                              int64_t, double*, int64_t, bool, const double*);

}  // namespace pd2bw::executor::cpu::detail

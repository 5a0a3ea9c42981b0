// Helpers of the emulated cuBLAS/cuBLASLt tests (test_emu_blas*.cpp): bf16 conversions, a cuBLASLt
// problem (handle, descriptor, layouts, preference) freed at scope end, and an independent reference
// of the documented GEMM arithmetic (cublasLt.h) to compare the emulation with bit for bit.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "emu_test_util.hpp"

inline std::vector<__nv_bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<__nv_bfloat16> out;
  for (float x : v) out.push_back(__float2bfloat16_rn(x));
  return out;
}

inline std::vector<float> from_bf16(const std::vector<__nv_bfloat16>& v) {
  std::vector<float> out;
  for (__nv_bfloat16 x : v) out.push_back(__bfloat162float(x));
  return out;
}

// A device array holding `host`.
template <typename T>
struct Uploaded : DeviceArray<T> {
  explicit Uploaded(const std::vector<T>& host) : DeviceArray<T>(host.size()) { this->write(host); }
};

// One cuBLASLt matmul problem: op(A) m x k, op(B) k x n, C and D m x n, A/B of type ab, C/D of type cd.
struct LtProblem {
  LtProblem(cublasOperation_t ta, cublasOperation_t tb, cudaDataType_t ab, cudaDataType_t cd, uint64_t m, uint64_t n,
            uint64_t k, int64_t lda, int64_t ldb, int64_t ldc, int64_t ldd) {
    REQUIRE(cublasLtCreate(&handle) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(set(CUBLASLT_MATMUL_DESC_TRANSA, static_cast<int32_t>(ta)) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(set(CUBLASLT_MATMUL_DESC_TRANSB, static_cast<int32_t>(tb)) == CUBLAS_STATUS_SUCCESS);
    const bool na = ta == CUBLAS_OP_N, nb = tb == CUBLAS_OP_N;
    REQUIRE(cublasLtMatrixLayoutCreate(&a, ab, na ? m : k, na ? k : m, lda) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&b, ab, nb ? k : n, nb ? n : k, ldb) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&c, cd, m, n, ldc) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatrixLayoutCreate(&d, cd, m, n, ldd) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(cublasLtMatmulPreferenceCreate(&pref) == CUBLAS_STATUS_SUCCESS);
  }
  ~LtProblem() {
    cublasLtMatmulPreferenceDestroy(pref);
    for (cublasLtMatrixLayout_t x : {a, b, c, d}) cublasLtMatrixLayoutDestroy(x);
    cublasLtMatmulDescDestroy(desc);
    cublasLtDestroy(handle);
  }
  LtProblem(const LtProblem&) = delete;
  LtProblem& operator=(const LtProblem&) = delete;

  template <typename T>
  cublasStatus_t set(cublasLtMatmulDescAttributes_t attr, T value) {
    return cublasLtMatmulDescSetAttribute(desc, attr, &value, sizeof value);
  }
  cublasStatus_t prefer(cublasLtMatmulPreferenceAttributes_t attr, uint32_t value) {
    return cublasLtMatmulPreferenceSetAttribute(pref, attr, &value, sizeof value);
  }
  // The BIAS epilogue with `bias` (m elements of D's type).
  void set_bias(const void* bias) {
    REQUIRE(set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS)) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, bias) == CUBLAS_STATUS_SUCCESS);
  }
  cublasStatus_t heuristic(cublasLtMatmulHeuristicResult_t* result, int* count) const {
    return cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, d, pref, 1, result, count);
  }
  // The heuristic's algo (REQUIREd to exist), or null for the implicit one.
  cublasLtMatmulAlgo_t algo() const {
    cublasLtMatmulHeuristicResult_t r{};
    int count = 0;
    REQUIRE(heuristic(&r, &count) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(count == 1);
    REQUIRE(r.state == CUBLAS_STATUS_SUCCESS);
    return r.algo;
  }
  cublasStatus_t run(const cublasLtMatmulAlgo_t* algo_ptr, float alpha, float beta, const void* A, const void* B,
                     const void* C, void* D, cudaStream_t stream = nullptr, void* ws = nullptr, size_t ws_bytes = 0) {
    return cublasLtMatmul(handle, desc, &alpha, A, a, B, b, &beta, C, c, D, d, algo_ptr, ws, ws_bytes, stream);
  }
  // Heuristic, matmul on stream 0 and synchronize; returns the matmul's status.
  cublasStatus_t matmul(float alpha, float beta, const void* A, const void* B, const void* C, void* D) {
    const cublasLtMatmulAlgo_t chosen = algo();
    const cublasStatus_t rc = run(&chosen, alpha, beta, A, B, C, D);
    REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
    return rc;
  }

  cublasLtHandle_t handle{};
  cublasLtMatmulDesc_t desc{};
  cublasLtMatrixLayout_t a{}, b{}, c{}, d{};
  cublasLtMatmulPreference_t pref{};
};

// The documented arithmetic (cublasLt.h), written independently of the emulation: column-major float
// inputs, D(i, j) = [fma over increasing p] -> alpha * acc -> fma(beta, C, .) -> + bias[i], in float.
inline std::vector<float> reference_gemm(bool ta, bool tb, int m, int n, int k, float alpha,
                                         const std::vector<float>& A, int lda, const std::vector<float>& B, int ldb,
                                         float beta, const std::vector<float>& C, int ldc,
                                         const std::vector<float>& bias) {
  std::vector<float> D(static_cast<size_t>(m) * static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      float acc = 0.0f;
      for (int p = 0; p < k; ++p) {
        const float x = ta ? A[static_cast<size_t>(p + i * lda)] : A[static_cast<size_t>(i + p * lda)];
        const float y = tb ? B[static_cast<size_t>(j + p * ldb)] : B[static_cast<size_t>(p + j * ldb)];
        acc = std::fma(x, y, acc);
      }
      const volatile float scaled = alpha * acc;
      float t = (alpha != 0.0f && k > 0) ? static_cast<float>(scaled) : 0.0f;
      if (beta != 0.0f) t = std::fma(beta, C[static_cast<size_t>(i + j * ldc)], t);
      if (!bias.empty()) t = t + bias[static_cast<size_t>(i)];
      D[static_cast<size_t>(i + j * m)] = t;
    }
  }
  return D;
}

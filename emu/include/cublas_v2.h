// The emulated device's cuBLAS (the v2 API): a handle bound to a stream, and cublasGemmEx, computed on
// the CPU as NVIDIA's cuBLAS documentation defines it. Matrices are column-major: element (i, j) of a
// matrix X with leading dimension ldx is X[i + j * ldx] (0-based), so ldx >= its row count.
//
// cublasGemmEx computes C = alpha * op(A) * op(B) + beta * C, op(A) m x k, op(B) k x n, C m x n, with the
// type combinations, summation order and rounding of cublasLt.h's cublasLtMatmul (CUBLASLT_EPILOGUE_DEFAULT,
// D = C). alpha and beta are host pointers to floats (the handle's pointer mode is always host), read
// when the call is made; the work runs on the handle's stream (cublasSetStream; stream 0 by default).
#pragma once

#include <cuda_runtime.h>
#include <library_types.h>

#include <cstdint>

#include "cublas_api.h"

#define cublasCreate cublasCreate_v2
#define cublasDestroy cublasDestroy_v2
#define cublasSetStream cublasSetStream_v2
#define cublasGetStream cublasGetStream_v2

// Creates a handle (stream 0, CUBLAS_DEFAULT_MATH) in *handle. INVALID_VALUE when handle is null.
cublasStatus_t cublasCreate_v2(cublasHandle_t* handle);

// Destroys `handle` after synchronizing the device (as the library's cleanup does). NOT_INITIALIZED when
// it is null or not a live handle.
cublasStatus_t cublasDestroy_v2(cublasHandle_t handle);

// The stream that later calls on `handle` queue their work on (0: the legacy default stream); whether
// the stream is live is seen when work is queued. NOT_INITIALIZED for a bad handle.
cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream);
cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream);

// The handle's math mode: CUBLAS_DEFAULT_MATH or CUBLAS_PEDANTIC_MATH (both compute exactly as
// documented below), CUBLAS_TENSOR_OP_MATH or CUBLAS_TF32_TENSOR_OP_MATH (accepted, but a later 32F
// cublasGemmEx returns NOT_SUPPORTED: the emulation has no reduced-precision paths), each optionally
// or'ed with CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION. INVALID_VALUE for any other value.
cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode);
cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode);

// C = alpha * op(A) * op(B) + beta * C on the handle's stream. A is m x k (lda >= max(1, m)) for
// transa == N, k x m (lda >= max(1, k)) otherwise; B is k x n (ldb >= max(1, k)) for transb == N, n x k
// (ldb >= max(1, n)) otherwise; C is m x n, ldc >= max(1, m). Supported, with computeType
// CUBLAS_COMPUTE_32F or CUBLAS_COMPUTE_32F_PEDANTIC and algo CUBLAS_GEMM_DEFAULT: Atype = Btype = Ctype =
// CUDA_R_32F; Atype = Btype = CUDA_R_16BF with Ctype CUDA_R_16BF or CUDA_R_32F. A and B are not read
// when alpha == 0 or k == 0, C is not read when beta == 0 (so it may hold NaN). Returns
//   NOT_INITIALIZED  a bad handle;
//   INVALID_VALUE    m, n or k < 0, an op other than N/T/C, an ld below its bound, alpha or beta null,
//                    a pointer not aligned to its element, or a matrix whose bytes (as the sizes and ld
//                    say) are not all device memory (cudaMalloc'ed or mapped pinned; printed to stderr);
//   NOT_SUPPORTED    another type combination, compute type, algo, or a tensor-op math mode with 32F;
//   EXECUTION_FAILED the work could not be queued (the device has a sticky error, or the stream was
//                    destroyed; the CUDA error is left for cudaGetLastError).
cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType_t Atype, int lda, const void* B,
                            cudaDataType_t Btype, int ldb, const void* beta, void* C, cudaDataType_t Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo);

// cublasGemmEx with 64-bit sizes and leading dimensions; otherwise the same.
cublasStatus_t cublasGemmEx_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                               int64_t n, int64_t k, const void* alpha, const void* A, cudaDataType_t Atype,
                               int64_t lda, const void* B, cudaDataType_t Btype, int64_t ldb, const void* beta, void* C,
                               cudaDataType_t Ctype, int64_t ldc, cublasComputeType_t computeType,
                               cublasGemmAlgo_t algo);

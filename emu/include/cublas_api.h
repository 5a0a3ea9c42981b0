// The emulated device's cublas_api.h: what cuBLAS (cublas_v2.h) and cuBLASLt (cublasLt.h) share, with
// NVIDIA's names and numeric values: the status codes, the transpose operations, the compute types, the
// math modes, the GEMM algorithm selector and the cuBLAS handle. Included by both; not for direct use.
#pragma once

#include <cuda_runtime.h>
#include <library_types.h>

#include <cstdint>

// What every cuBLAS/cuBLASLt call returns.
typedef enum {
  CUBLAS_STATUS_SUCCESS = 0,
  CUBLAS_STATUS_NOT_INITIALIZED = 1,  // a null, destroyed or never created handle
  CUBLAS_STATUS_ALLOC_FAILED = 3,
  CUBLAS_STATUS_INVALID_VALUE = 7,  // an argument out of range, null, or in conflict with another
  CUBLAS_STATUS_ARCH_MISMATCH = 8,
  CUBLAS_STATUS_MAPPING_ERROR = 11,
  CUBLAS_STATUS_EXECUTION_FAILED = 13,  // the work could not be queued (sticky device error, bad stream)
  CUBLAS_STATUS_INTERNAL_ERROR = 14,
  CUBLAS_STATUS_NOT_SUPPORTED = 15,  // a valid request outside what is implemented (types, modes)
  CUBLAS_STATUS_LICENSE_ERROR = 16,
} cublasStatus_t;

// op(X): X itself (N), its transpose (T) or its conjugate transpose (C, the transpose for real types).
typedef enum {
  CUBLAS_OP_N = 0,
  CUBLAS_OP_T = 1,
  CUBLAS_OP_C = 2,
} cublasOperation_t;

// The precision products are accumulated in. The emulation computes every supported case in exact
// float arithmetic (see cublasLt.h), so it accepts only the 32F types that promise that.
typedef enum {
  CUBLAS_COMPUTE_16F = 64,
  CUBLAS_COMPUTE_16F_PEDANTIC = 65,
  CUBLAS_COMPUTE_32F = 68,
  CUBLAS_COMPUTE_32F_PEDANTIC = 69,
  CUBLAS_COMPUTE_32F_FAST_16F = 74,
  CUBLAS_COMPUTE_32F_FAST_16BF = 75,
  CUBLAS_COMPUTE_32F_FAST_TF32 = 77,
  CUBLAS_COMPUTE_64F = 70,
  CUBLAS_COMPUTE_64F_PEDANTIC = 71,
  CUBLAS_COMPUTE_32I = 72,
  CUBLAS_COMPUTE_32I_PEDANTIC = 73,
} cublasComputeType_t;

// A cuBLAS handle's math mode (cublasSetMathMode): which reduced-precision shortcuts it may take.
typedef enum {
  CUBLAS_DEFAULT_MATH = 0,
  CUBLAS_TENSOR_OP_MATH = 1,
  CUBLAS_PEDANTIC_MATH = 2,
  CUBLAS_TF32_TENSOR_OP_MATH = 3,
  CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16,
} cublasMath_t;

// The algorithm cublasGemmEx uses; the emulation has the default one only.
typedef enum {
  CUBLAS_GEMM_DFALT = -1,
  CUBLAS_GEMM_DEFAULT = -1,
  CUBLAS_GEMM_DEFAULT_TENSOR_OP = 99,
  CUBLAS_GEMM_DFALT_TENSOR_OP = 99,
} cublasGemmAlgo_t;

struct cublasContext;
using cublasHandle_t = cublasContext*;

// The enumerator's name ("CUBLAS_STATUS_INVALID_VALUE") and a one-line description of `status`; both
// static strings, "unknown" ones for a value outside the enum.
const char* cublasGetStatusName(cublasStatus_t status);
const char* cublasGetStatusString(cublasStatus_t status);

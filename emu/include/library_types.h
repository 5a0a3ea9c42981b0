// The emulated device's library_types.h: the data-type tags that NVIDIA's CUDA libraries (cuBLAS,
// cuBLASLt, ...) take to say how the elements of a buffer are stored, with NVIDIA's numeric values, and
// the library property selectors. Only tags; which of them a library accepts is its own business (the
// emulated cuBLAS subset computes with CUDA_R_32F and CUDA_R_16BF only, see cublasLt.h).
#pragma once

// The element type of a buffer: R_ real, C_ complex (pairs); 16F IEEE half, 16BF bfloat16, 32F float,
// 64F double, 8I/32I signed and 8U/32U unsigned integers, 8F_E4M3/8F_E5M2 the two 8-bit float formats.
typedef enum cudaDataType_t {
  CUDA_R_32F = 0,
  CUDA_R_64F = 1,
  CUDA_R_16F = 2,
  CUDA_R_8I = 3,
  CUDA_C_32F = 4,
  CUDA_C_64F = 5,
  CUDA_C_16F = 6,
  CUDA_C_8I = 7,
  CUDA_R_8U = 8,
  CUDA_C_8U = 9,
  CUDA_R_32I = 10,
  CUDA_C_32I = 11,
  CUDA_R_32U = 12,
  CUDA_C_32U = 13,
  CUDA_R_16BF = 14,
  CUDA_C_16BF = 15,
  CUDA_R_8F_E4M3 = 28,
  CUDA_R_8F_E5M2 = 29,
} cudaDataType;

// Which part of a library's version a *GetProperty call reports.
typedef enum libraryPropertyType_t {
  MAJOR_VERSION = 0,
  MINOR_VERSION = 1,
  PATCH_LEVEL = 2,
} libraryPropertyType;

// The emulated cuBLAS (cublas_v2.h): handles with a stream and a math mode, and cublasGemmEx, which checks
// its arguments as cuBLAS documents and queues blas_core's GEMM on the handle's stream.
#include <cublas_v2.h>

#include <cstring>

#include "blas_core.hpp"

struct cublasContext {
  cudaStream_t stream = nullptr;
  cublasMath_t mode = CUBLAS_DEFAULT_MATH;
};

namespace {

using namespace pd2bw_emu::blas;

Registry handles;

constexpr int kReducedPrecisionFlag = CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION;

bool valid_op(cublasOperation_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

// The documented INVALID_VALUE conditions of cublasGemmEx.
bool valid_arguments(cublasOperation_t transa, cublasOperation_t transb, int64_t m, int64_t n, int64_t k,
                     const void* alpha, int64_t lda, int64_t ldb, const void* beta, int64_t ldc) {
  if (m < 0 || n < 0 || k < 0 || !valid_op(transa) || !valid_op(transb) || alpha == nullptr || beta == nullptr)
    return false;
  const auto at_least = [](int64_t ld, int64_t rows) { return ld >= 1 && ld >= rows; };
  return at_least(lda, transa == CUBLAS_OP_N ? m : k) && at_least(ldb, transb == CUBLAS_OP_N ? k : n) &&
         at_least(ldc, m);
}

// Whether the emulation has this combination (and the handle's math mode lets it compute exactly).
bool supported(const cublasContext& h, cudaDataType_t a_type, cudaDataType_t b_type, cudaDataType_t c_type,
               cublasComputeType_t compute, cublasGemmAlgo_t algo) {
  const int tensor_ops = static_cast<int>(h.mode) & ~kReducedPrecisionFlag;
  const bool reduced =
      a_type == CUDA_R_32F && (tensor_ops == CUBLAS_TENSOR_OP_MATH || tensor_ops == CUBLAS_TF32_TENSOR_OP_MATH);
  return a_type == b_type && supported_types(a_type, c_type) && supported_compute(compute, CUDA_R_32F) &&
         algo == CUBLAS_GEMM_DEFAULT && !reduced;
}

}  // namespace

const char* cublasGetStatusName(cublasStatus_t status) {
  return status_name(status);
}
const char* cublasGetStatusString(cublasStatus_t status) {
  return status_string(status);
}

cublasStatus_t cublasCreate_v2(cublasHandle_t* handle) {
  if (handle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *handle = new cublasContext;
  handles.add(*handle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t handle) {
  if (!handles.remove(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  // Releasing the library's resources synchronizes the device, as NVIDIA documents.
  (void)cudaDeviceSynchronize();
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t handle, cudaStream_t stream) {
  if (!handles.live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetStream_v2(cublasHandle_t handle, cudaStream_t* stream) {
  if (!handles.live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (stream == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *stream = handle->stream;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t handle, cublasMath_t mode) {
  if (!handles.live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  const int base = static_cast<int>(mode) & ~kReducedPrecisionFlag;
  if (base < CUBLAS_DEFAULT_MATH || base > CUBLAS_TF32_TENSOR_OP_MATH) return CUBLAS_STATUS_INVALID_VALUE;
  handle->mode = mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGetMathMode(cublasHandle_t handle, cublasMath_t* mode) {
  if (!handles.live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (mode == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *mode = handle->mode;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasGemmEx_64(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int64_t m,
                               int64_t n, int64_t k, const void* alpha, const void* A, cudaDataType_t Atype,
                               int64_t lda, const void* B, cudaDataType_t Btype, int64_t ldb, const void* beta, void* C,
                               cudaDataType_t Ctype, int64_t ldc, cublasComputeType_t computeType,
                               cublasGemmAlgo_t algo) {
  if (!handles.live(handle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (!valid_arguments(transa, transb, m, n, k, alpha, lda, ldb, beta, ldc)) return CUBLAS_STATUS_INVALID_VALUE;
  if (!supported(*handle, Atype, Btype, Ctype, computeType, algo)) return CUBLAS_STATUS_NOT_SUPPORTED;
  Gemm g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.trans_a = transa != CUBLAS_OP_N;
  g.trans_b = transb != CUBLAS_OP_N;
  std::memcpy(&g.alpha, alpha, sizeof g.alpha);  // compute type 32F: host floats, read now
  std::memcpy(&g.beta, beta, sizeof g.beta);
  g.a = {A, Atype, lda};
  g.b = {B, Btype, ldb};
  g.c = {C, Ctype, ldc};
  g.d = C;
  g.d_type = Ctype;
  g.ldd = ldc;
  if (m == 0 || n == 0) return CUBLAS_STATUS_SUCCESS;
  // Stored shapes: A is m x k or k x m, B k x n or n x k. Alignment: each pointer to its element.
  const char* api = "cublasGemmEx";
  const auto rows = [](bool trans, int64_t r, int64_t c) { return static_cast<uint64_t>(trans ? c : r); };
  const auto cols = [](bool trans, int64_t r, int64_t c) { return static_cast<uint64_t>(trans ? r : c); };
  const auto u = [](int64_t x) { return static_cast<uint64_t>(x); };
  if (g.alpha != 0.0f && k > 0 &&
      (!check_matrix(api, "matrix A", A, rows(g.trans_a, m, k), cols(g.trans_a, m, k), u(lda), Atype,
                     element_bytes(Atype)) ||
       !check_matrix(api, "matrix B", B, rows(g.trans_b, k, n), cols(g.trans_b, k, n), u(ldb), Btype,
                     element_bytes(Btype))))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!check_matrix(api, "matrix C", C, u(m), u(n), u(ldc), Ctype, element_bytes(Ctype)))
    return CUBLAS_STATUS_INVALID_VALUE;
  return queue(handle->stream, g);
}

cublasStatus_t cublasGemmEx(cublasHandle_t handle, cublasOperation_t transa, cublasOperation_t transb, int m, int n,
                            int k, const void* alpha, const void* A, cudaDataType_t Atype, int lda, const void* B,
                            cudaDataType_t Btype, int ldb, const void* beta, void* C, cudaDataType_t Ctype, int ldc,
                            cublasComputeType_t computeType, cublasGemmAlgo_t algo) {
  return cublasGemmEx_64(handle, transa, transb, m, n, k, alpha, A, Atype, lda, B, Btype, ldb, beta, C, Ctype, ldc,
                         computeType, algo);
}

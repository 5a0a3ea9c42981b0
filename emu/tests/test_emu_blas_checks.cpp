// The emulated cuBLASLt/cuBLAS refuse what NVIDIA's documentation calls invalid (INVALID_VALUE), what the
// emulation does not implement (NOT_SUPPORTED), bad handles (NOT_INITIALIZED), and memory the operation
// would touch outside device allocations or less aligned than promised (INVALID_VALUE, before any work
// is queued). (Results: test_emu_blas.cpp.)
#include <doctest/doctest.h>

#include <cstring>
#include <string>

#include "blas_test_util.hpp"

namespace {

const std::vector<float> kA = {1, 4, 2, 5, 3, 6};     // 2 x 3, lda 2
const std::vector<float> kB = {7, 9, 11, 8, 10, 12};  // 3 x 2, ldb 3

// The status of the heuristic for `lt`, and that it reports no algorithm unless it succeeds.
cublasStatus_t heuristic_status(const LtProblem& lt) {
  cublasLtMatmulHeuristicResult_t r{};
  int count = -1;
  const cublasStatus_t rc = lt.heuristic(&r, &count);
  if (rc == CUBLAS_STATUS_SUCCESS) CHECK(count == 1);
  if (rc == CUBLAS_STATUS_NOT_SUPPORTED) CHECK(count == 0);
  return rc;
}

}  // namespace

TEST_CASE("cuBLASLt handles and descriptors: null and destroyed ones are refused") {
  CHECK(cublasLtCreate(nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasLtDestroy(nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasLtMatmulDescCreate(nullptr, CUBLAS_COMPUTE_32F, CUDA_R_32F) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasLtMatrixLayoutCreate(nullptr, CUDA_R_32F, 1, 1, 1) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasLtMatmulPreferenceCreate(nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  Uploaded<float> A(kA), B(kB);
  DeviceArray<float> D(4);
  LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
  const float one = 1, zero = 0;
  CHECK(cublasLtMatmul(nullptr, lt.desc, &one, A.p, lt.a, B.p, lt.b, &zero, nullptr, lt.c, D.p, lt.d, nullptr, nullptr,
                       0, nullptr) == CUBLAS_STATUS_NOT_INITIALIZED);
  cublasLtHandle_t gone = nullptr;
  REQUIRE(cublasLtCreate(&gone) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtDestroy(gone) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasLtDestroy(gone) == CUBLAS_STATUS_NOT_INITIALIZED);
  CHECK(cublasLtMatmul(gone, lt.desc, &one, A.p, lt.a, B.p, lt.b, &zero, nullptr, lt.c, D.p, lt.d, nullptr, nullptr, 0,
                       nullptr) == CUBLAS_STATUS_NOT_INITIALIZED);
  CHECK(cublasLtMatmul(lt.handle, nullptr, &one, A.p, lt.a, B.p, lt.b, &zero, nullptr, lt.c, D.p, lt.d, nullptr,
                       nullptr, 0, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasLtMatmul(lt.handle, lt.desc, nullptr, A.p, lt.a, B.p, lt.b, &zero, nullptr, lt.c, D.p, lt.d, nullptr,
                       nullptr, 0, nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  // Cdesc may be omitted (it is then Ddesc).
  CHECK(cublasLtMatmul(lt.handle, lt.desc, &one, A.p, lt.a, B.p, lt.b, &zero, nullptr, nullptr, D.p, lt.d, nullptr,
                       nullptr, 0, nullptr) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  CHECK(D.read() == std::vector<float>{58, 139, 64, 154});
  cublasLtMatmulHeuristicResult_t r{};
  int count = 0;
  CHECK(cublasLtMatmulAlgoGetHeuristic(lt.handle, lt.desc, lt.a, lt.b, lt.c, lt.d, lt.pref, 0, &r, &count) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(std::string(cublasLtGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED)) == "CUBLAS_STATUS_NOT_SUPPORTED");
  CHECK(std::string(cublasLtGetStatusString(CUBLAS_STATUS_INVALID_VALUE)).size() > 0);
}

TEST_CASE("cuBLASLt attributes: the size must match and unknown attributes are refused") {
  LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
  const int64_t wide = CUBLAS_OP_T;
  CHECK(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_TRANSA, &wide, sizeof wide) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(cublasLtMatmulDescSetAttribute(lt.desc, CUBLASLT_MATMUL_DESC_TRANSA, nullptr, 4) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(lt.set(static_cast<cublasLtMatmulDescAttributes_t>(10), int32_t{0}) == CUBLAS_STATUS_INVALID_VALUE);
  const uint64_t workspace = 1 << 20;
  CHECK(cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                             sizeof workspace) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasLtMatmulPreferenceSetAttribute(lt.pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, 4) ==
        CUBLAS_STATUS_INVALID_VALUE);
  CHECK(lt.prefer(static_cast<cublasLtMatmulPreferenceAttributes_t>(3), 1) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(lt.set(CUBLASLT_MATMUL_DESC_TRANSA, int32_t{7}) == CUBLAS_STATUS_SUCCESS);  // checked when used
  CHECK(heuristic_status(lt) == CUBLAS_STATUS_INVALID_VALUE);
}

TEST_CASE("cuBLASLt problems in conflict are INVALID_VALUE") {
  SUBCASE("lda below the row count") {
    LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 1, 3, 2, 2);
    CHECK(heuristic_status(lt) == CUBLAS_STATUS_INVALID_VALUE);
  }
  SUBCASE("ldd below the row count") {
    LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 1);
    CHECK(heuristic_status(lt) == CUBLAS_STATUS_INVALID_VALUE);
  }
  SUBCASE("a negative ld") {
    LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, -3, 2, 2);
    CHECK(heuristic_status(lt) == CUBLAS_STATUS_INVALID_VALUE);
  }
  SUBCASE("inner sizes that do not chain") {
    LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
    cublasLtMatrixLayout_t b4 = nullptr;
    REQUIRE(cublasLtMatrixLayoutCreate(&b4, CUDA_R_32F, 4, 2, 4) == CUBLAS_STATUS_SUCCESS);
    std::swap(lt.b, b4);
    CHECK(heuristic_status(lt) == CUBLAS_STATUS_INVALID_VALUE);
    std::swap(lt.b, b4);
    cublasLtMatrixLayoutDestroy(b4);
  }
  SUBCASE("C of another type than D") {
    LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_16BF, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
    cublasLtMatrixLayout_t c16 = nullptr;
    REQUIRE(cublasLtMatrixLayoutCreate(&c16, CUDA_R_16BF, 2, 2, 2) == CUBLAS_STATUS_SUCCESS);
    std::swap(lt.c, c16);
    CHECK(heuristic_status(lt) == CUBLAS_STATUS_INVALID_VALUE);
    std::swap(lt.c, c16);
    cublasLtMatrixLayoutDestroy(c16);
  }
  SUBCASE("in place with C's ld not D's, and BIAS without a bias vector") {
    Uploaded<float> A(kA), B(kB);
    DeviceArray<float> D(6);
    LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 3, 2);
    const cublasLtMatmulAlgo_t algo = lt.algo();
    CHECK(lt.run(&algo, 1, 1, A.p, B.p, D.p, D.p) == CUBLAS_STATUS_INVALID_VALUE);
    REQUIRE(lt.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_BIAS)) ==
            CUBLAS_STATUS_SUCCESS);
    const cublasLtMatmulAlgo_t bias_algo = lt.algo();
    CHECK(lt.run(&bias_algo, 1, 0, A.p, B.p, nullptr, D.p) == CUBLAS_STATUS_INVALID_VALUE);
  }
}

TEST_CASE("cuBLASLt configurations outside the supported set are NOT_SUPPORTED") {
  SUBCASE("fp16 inputs") {
    LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_16F, CUDA_R_16F, 2, 2, 3, 2, 3, 2, 2);
    CHECK(heuristic_status(lt) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  SUBCASE("fp32 inputs into bf16") {
    LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_16BF, 2, 2, 3, 2, 3, 2, 2);
    CHECK(heuristic_status(lt) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  SUBCASE("a bias type other than D's") {
    LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_16BF, CUDA_R_16BF, 2, 2, 3, 2, 3, 2, 2);
    lt.set_bias(nullptr);
    CHECK(heuristic_status(lt) == CUBLAS_STATUS_SUCCESS);
    REQUIRE(lt.set(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, static_cast<int32_t>(CUDA_R_32F)) == CUBLAS_STATUS_SUCCESS);
    CHECK(heuristic_status(lt) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  SUBCASE("an epilogue other than DEFAULT and BIAS") {
    LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
    REQUIRE(lt.set(CUBLASLT_MATMUL_DESC_EPILOGUE, uint32_t{2}) == CUBLAS_STATUS_SUCCESS);  // RELU
    CHECK(heuristic_status(lt) == CUBLAS_STATUS_NOT_SUPPORTED);
  }
  SUBCASE("reduced-precision compute and double scalars") {
    for (const auto& [compute, scale] :
         {std::pair{CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F}, std::pair{CUBLAS_COMPUTE_32F, CUDA_R_64F}}) {
      LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
      cublasLtMatmulDescDestroy(lt.desc);
      REQUIRE(cublasLtMatmulDescCreate(&lt.desc, compute, scale) == CUBLAS_STATUS_SUCCESS);
      CHECK(heuristic_status(lt) == CUBLAS_STATUS_NOT_SUPPORTED);
    }
  }
  SUBCASE("a min alignment below the element size") {
    LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_16BF, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
    REQUIRE(lt.prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, 2) == CUBLAS_STATUS_SUCCESS);
    CHECK(heuristic_status(lt) == CUBLAS_STATUS_SUCCESS);  // 2 bytes: one bf16
    REQUIRE(lt.prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, 2) == CUBLAS_STATUS_SUCCESS);
    CHECK(heuristic_status(lt) == CUBLAS_STATUS_NOT_SUPPORTED);  // half a float
  }
}

TEST_CASE("cublasLtMatmul holds pointers to the alignments the algo was promised") {
  Uploaded<float> A(std::vector<float>{0, 1, 4, 2, 5, 3, 6}), B(kB);  // A from element 1: 4-byte aligned
  DeviceArray<float> D(4);
  LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
  const cublasLtMatmulAlgo_t promised_256 = lt.algo();
  CHECK(lt.run(&promised_256, 1, 0, A.p + 1, B.p, nullptr, D.p) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(lt.run(nullptr, 1, 0, A.p + 1, B.p, nullptr, D.p) == CUBLAS_STATUS_INVALID_VALUE);  // default: 256
  REQUIRE(lt.prefer(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, 4) == CUBLAS_STATUS_SUCCESS);
  const cublasLtMatmulAlgo_t promised_4 = lt.algo();
  REQUIRE(lt.run(&promised_4, 1, 0, A.p + 1, B.p, nullptr, D.p) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  CHECK(D.read() == std::vector<float>{58, 139, 64, 154});
  // The bias pointer set at heuristic time says how aligned the bias will be.
  Uploaded<float> bias(std::vector<float>{0, 0, 0});
  lt.set_bias(bias.p);
  const cublasLtMatmulAlgo_t bias_256 = lt.algo();
  REQUIRE(lt.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias.p + 1)) == CUBLAS_STATUS_SUCCESS);
  CHECK(lt.run(&bias_256, 1, 0, A.p + 1, B.p, nullptr, D.p) == CUBLAS_STATUS_INVALID_VALUE);
  const cublasLtMatmulAlgo_t bias_4 = lt.algo();
  CHECK(lt.run(&bias_4, 1, 0, A.p + 1, B.p, nullptr, D.p) == CUBLAS_STATUS_SUCCESS);
  // An algo is only good for the types it was made for, and must come from the heuristic.
  const cublasLtMatmulAlgo_t zeroed{};
  CHECK(lt.run(&zeroed, 1, 0, A.p + 1, B.p, nullptr, D.p) == CUBLAS_STATUS_INVALID_VALUE);
  REQUIRE(lt.set(CUBLASLT_MATMUL_DESC_EPILOGUE, static_cast<uint32_t>(CUBLASLT_EPILOGUE_DEFAULT)) ==
          CUBLAS_STATUS_SUCCESS);
  CHECK(lt.run(&bias_4, 1, 0, A.p + 1, B.p, nullptr, D.p) == CUBLAS_STATUS_INVALID_VALUE);
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
}

TEST_CASE("cublasLtMatmul checks every byte it would touch is device memory, and the workspace") {
  Uploaded<float> A(kA), B(kB);
  LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
  const cublasLtMatmulAlgo_t algo = lt.algo();
  DeviceArray<float> small(3), D(4);  // D needs 4 floats
  CHECK(lt.run(&algo, 1, 0, A.p, B.p, nullptr, small.p) == CUBLAS_STATUS_INVALID_VALUE);
  std::vector<float> host(4);
  CHECK(lt.run(&algo, 1, 0, A.p, B.p, nullptr, host.data()) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(lt.run(&algo, 1, 1, A.p, B.p, small.p, D.p) == CUBLAS_STATUS_INVALID_VALUE);  // C read: too small
  CHECK(lt.run(&algo, 1, 0, A.p, B.p, small.p, D.p) == CUBLAS_STATUS_SUCCESS);        // C not read
  // A 2 x 3 with lda 3 spans 2 + 2 * 3 = 8 floats; the allocation holds 6.
  LtProblem wide(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 3, 3, 2, 2);
  const cublasLtMatmulAlgo_t wide_algo = wide.algo();
  CHECK(wide.run(&wide_algo, 1, 0, A.p, B.p, nullptr, D.p) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(wide.run(&wide_algo, 0, 0, A.p, B.p, nullptr, D.p) == CUBLAS_STATUS_SUCCESS);  // alpha 0: A not read
  // The workspace: 256-byte aligned device memory of the size given.
  DeviceArray<char> ws(1024);
  CHECK(lt.run(&algo, 1, 0, A.p, B.p, nullptr, D.p, nullptr, ws.p, 1024) == CUBLAS_STATUS_SUCCESS);
  CHECK(lt.run(&algo, 1, 0, A.p, B.p, nullptr, D.p, nullptr, ws.p, 2048) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(lt.run(&algo, 1, 0, A.p, B.p, nullptr, D.p, nullptr, ws.p + 16, 512) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(lt.run(&algo, 1, 0, A.p, B.p, nullptr, D.p, nullptr, nullptr, 512) == CUBLAS_STATUS_INVALID_VALUE);
  // The bias vector: m elements.
  DeviceArray<float> bias1(1), bias2(2);
  lt.set_bias(bias1.p);
  const cublasLtMatmulAlgo_t bias_algo = lt.algo();
  CHECK(lt.run(&bias_algo, 1, 0, A.p, B.p, nullptr, D.p) == CUBLAS_STATUS_INVALID_VALUE);
  REQUIRE(lt.set(CUBLASLT_MATMUL_DESC_BIAS_POINTER, static_cast<const void*>(bias2.p)) == CUBLAS_STATUS_SUCCESS);
  CHECK(lt.run(&bias_algo, 1, 0, A.p, B.p, nullptr, D.p) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
}

TEST_CASE("cublasGemmEx: documented statuses") {
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  Uploaded<float> A(kA), B(kB);
  DeviceArray<float> C(4), small(3);
  const float one = 1, zero = 0;
  const auto gemm = [&](cublasHandle_t handle, cublasOperation_t ta, int m, int lda, const void* alpha, float* c,
                        cudaDataType_t ab = CUDA_R_32F, cublasComputeType_t compute = CUBLAS_COMPUTE_32F,
                        cublasGemmAlgo_t algo = CUBLAS_GEMM_DEFAULT) {
    return cublasGemmEx(handle, ta, CUBLAS_OP_N, m, 2, 3, alpha, A.p, ab, lda, B.p, ab, 3, &zero, c, CUDA_R_32F, 2,
                        compute, algo);
  };
  CHECK(gemm(h, CUBLAS_OP_N, 2, 2, &one, C.p) == CUBLAS_STATUS_SUCCESS);
  CHECK(gemm(nullptr, CUBLAS_OP_N, 2, 2, &one, C.p) == CUBLAS_STATUS_NOT_INITIALIZED);
  CHECK(gemm(h, CUBLAS_OP_N, -1, 2, &one, C.p) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(gemm(h, CUBLAS_OP_N, 2, 1, &one, C.p) == CUBLAS_STATUS_INVALID_VALUE);  // lda < m
  CHECK(gemm(h, CUBLAS_OP_T, 2, 2, &one, C.p) == CUBLAS_STATUS_INVALID_VALUE);  // lda < k when transposed
  CHECK(gemm(h, static_cast<cublasOperation_t>(3), 2, 2, &one, C.p) == CUBLAS_STATUS_INVALID_VALUE);  // CONJG
  CHECK(gemm(h, CUBLAS_OP_N, 2, 2, nullptr, C.p) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(gemm(h, CUBLAS_OP_N, 2, 2, &one, C.p, CUDA_R_16F) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(gemm(h, CUBLAS_OP_N, 2, 2, &one, C.p, CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_16BF) == CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(gemm(h, CUBLAS_OP_N, 2, 2, &one, C.p, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT_TENSOR_OP) ==
        CUBLAS_STATUS_NOT_SUPPORTED);
  CHECK(gemm(h, CUBLAS_OP_N, 2, 2, &one, small.p) == CUBLAS_STATUS_INVALID_VALUE);  // C spans 4 floats
  CHECK(gemm(h, CUBLAS_OP_N, 0, 2, &one, nullptr) == CUBLAS_STATUS_SUCCESS);        // m = 0: nothing to do
  CHECK(gemm(h, CUBLAS_OP_N, 0, 0, &one, nullptr) == CUBLAS_STATUS_INVALID_VALUE);  // lda < max(1, m)
  // Math modes: TF32 tensor ops would round fp32 inputs, which the emulation does not do.
  CHECK(cublasSetMathMode(h, static_cast<cublasMath_t>(7)) == CUBLAS_STATUS_INVALID_VALUE);
  REQUIRE(cublasSetMathMode(h, CUBLAS_TF32_TENSOR_OP_MATH) == CUBLAS_STATUS_SUCCESS);
  CHECK(gemm(h, CUBLAS_OP_N, 2, 2, &one, C.p) == CUBLAS_STATUS_NOT_SUPPORTED);
  REQUIRE(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH) == CUBLAS_STATUS_SUCCESS);
  // A destroyed stream: the work cannot be queued.
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
  REQUIRE(cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS);
  CHECK(gemm(h, CUBLAS_OP_N, 2, 2, &one, C.p) == CUBLAS_STATUS_EXECUTION_FAILED);
  CHECK(cudaGetLastError() == cudaErrorInvalidResourceHandle);
  REQUIRE(cublasSetStream(h, nullptr) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
  CHECK(cublasDestroy(h) == CUBLAS_STATUS_NOT_INITIALIZED);
  CHECK(gemm(h, CUBLAS_OP_N, 2, 2, &one, C.p) == CUBLAS_STATUS_NOT_INITIALIZED);
  CHECK(cublasCreate(nullptr) == CUBLAS_STATUS_INVALID_VALUE);
  CHECK(C.read() == std::vector<float>{58, 139, 64, 154});
}

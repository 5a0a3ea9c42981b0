// The emulated cuBLASLt/cuBLAS compute what NVIDIA's documentation defines: D = alpha * op(A) * op(B) +
// beta * C (+ bias on each row), column-major with leading dimensions, fp32 accumulation in a fixed order,
// one rounding to D's type. Expected numbers are worked out by hand in the comments.
// (Argument checks and statuses: test_emu_blas_checks.cpp.)
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>

#include "../src/blas_core.hpp"
#include "blas_test_util.hpp"

namespace {

// The worked example: A (2 x 3) = [1 2 3; 4 5 6], B (3 x 2) = [7 8; 9 10; 11 12].
// A * B = [1*7+2*9+3*11  1*8+2*10+3*12; 4*7+5*9+6*11  4*8+5*10+6*12] = [58 64; 139 154],
// column-major {58, 139, 64, 154}.
const std::vector<float> kA_N = {1, 4, 2, 5, 3, 6};     // A column-major, lda 2
const std::vector<float> kA_T = {1, 2, 3, 4, 5, 6};     // A^T (3 x 2) column-major, lda 3: op T gives A
const std::vector<float> kB_N = {7, 9, 11, 8, 10, 12};  // B column-major, ldb 3
const std::vector<float> kB_T = {7, 8, 9, 10, 11, 12};  // B^T (2 x 3) column-major, ldb 2: op T gives B
const std::vector<float> kAB = {58, 139, 64, 154};

}  // namespace

TEST_CASE("cublasLtMatmul: 2x3 times 3x2 for each transpose combination") {
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      Uploaded<float> A(ta ? kA_T : kA_N), B(tb ? kB_T : kB_N);
      DeviceArray<float> D(4);
      LtProblem lt(ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3,
                   ta ? 3 : 2, tb ? 2 : 3, 2, 2);
      REQUIRE(lt.matmul(1.0f, 0.0f, A.p, B.p, nullptr, D.p) == CUBLAS_STATUS_SUCCESS);
      CHECK(D.read() == kAB);
    }
  }
}

TEST_CASE("cublasLtMatmul: leading dimensions above the row count skip the padding and leave D's untouched") {
  const float P = 1000;  // padding of A and B: reading it would change every sum
  const float S = 777;   // padding of D: must survive
  Uploaded<float> A(std::vector<float>{1, 4, P, P, 2, 5, P, P, 3, 6, P, P});  // lda 4
  Uploaded<float> B(std::vector<float>{7, 9, 11, P, P, 8, 10, 12, P, P});     // ldb 5
  Uploaded<float> D(std::vector<float>{S, S, S, S, S, S});                    // ldd 3
  LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 4, 5, 3, 3);
  REQUIRE(lt.matmul(1.0f, 0.0f, A.p, B.p, nullptr, D.p) == CUBLAS_STATUS_SUCCESS);
  CHECK(D.read() == std::vector<float>{58, 139, S, 64, 154, S});
}

TEST_CASE("cublasLtMatmul: alpha and beta, C and D apart with different leading dimensions") {
  // C (2 x 2, ldc 2) = [1 3; 2 4]. D = 2 * AB + 3 * C:
  // (0,0) 2*58+3*1 = 119, (1,0) 2*139+3*2 = 284, (0,1) 2*64+3*3 = 137, (1,1) 2*154+3*4 = 320.
  Uploaded<float> A(kA_N), B(kB_N), C(std::vector<float>{1, 2, 3, 4});
  Uploaded<float> D(std::vector<float>{-1, -1, -1, -1, -1, -1});  // ldd 3
  LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 3);
  REQUIRE(lt.matmul(2.0f, 3.0f, A.p, B.p, C.p, D.p) == CUBLAS_STATUS_SUCCESS);
  CHECK(D.read() == std::vector<float>{119, 284, -1, 137, 320, -1});
  CHECK(C.read() == std::vector<float>{1, 2, 3, 4});  // C is input only
}

TEST_CASE("cublasLtMatmul: C with leading dimension 0 is one column broadcast to every column of D") {
  // C = {1, 2} read with ldc 0: C(i, j) = C[i]. D = AB + C = [58+1 64+1; 139+2 154+2] -> {59, 141, 65, 156}.
  Uploaded<float> A(kA_N), B(kB_N), C(std::vector<float>{1, 2});
  DeviceArray<float> D(4);
  LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 0, 2);
  REQUIRE(lt.matmul(1.0f, 1.0f, A.p, B.p, C.p, D.p) == CUBLAS_STATUS_SUCCESS);
  CHECK(D.read() == std::vector<float>{59, 141, 65, 156});
}

TEST_CASE("cublasLtMatmul: beta = 1 in place accumulates, and queued calls run in order") {
  // D starts [10 30; 20 40]; each call adds AB: {68, 159, 94, 194}, then {126, 298, 158, 348}.
  Uploaded<float> A(kA_N), B(kB_N), D(std::vector<float>{10, 20, 30, 40});
  LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
  const cublasLtMatmulAlgo_t algo = lt.algo();
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  REQUIRE(lt.run(&algo, 1.0f, 1.0f, A.p, B.p, D.p, D.p, s) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(D.read() == std::vector<float>{68, 159, 94, 194});
  REQUIRE(lt.run(&algo, 1.0f, 1.0f, A.p, B.p, D.p, D.p, s) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(lt.run(nullptr, 1.0f, 1.0f, A.p, B.p, D.p, D.p, s) == CUBLAS_STATUS_SUCCESS);  // implicit algo
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(D.read() == std::vector<float>{184, 437, 222, 502});  // + 2 AB: 68+116, 159+278, 94+128, 194+308
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("cublasLtMatmul and cublasGemmEx read alpha and beta when called, not when the work runs") {
  // A 256^3 product queued first keeps the stream busy while the scalars change on the host.
  const int s = 256;
  Uploaded<float> big(std::vector<float>(s * s, 1.0f));
  DeviceArray<float> big_out(s * s);
  Uploaded<float> A(kA_N), B(kB_N), C(std::vector<float>{1, 2, 3, 4});
  DeviceArray<float> D(4);
  LtProblem busy(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, s, s, s, s, s, s, s);
  LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
  const cublasLtMatmulAlgo_t busy_algo = busy.algo(), algo = lt.algo();
  float alpha = 1, beta = 0;
  REQUIRE(busy.run(&busy_algo, 1, 0, big.p, big.p, nullptr, big_out.p) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasLtMatmul(lt.handle, lt.desc, &alpha, A.p, lt.a, B.p, lt.b, &beta, C.p, lt.c, D.p, lt.d, &algo, nullptr,
                         0, nullptr) == CUBLAS_STATUS_SUCCESS);
  alpha = 100;
  beta = 100;
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  CHECK(D.read() == kAB);
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  alpha = 1;
  beta = 0;
  REQUIRE(busy.run(&busy_algo, 1, 0, big.p, big.p, nullptr, big_out.p) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 2, 3, &alpha, A.p, CUDA_R_32F, 2, B.p, CUDA_R_32F, 3, &beta, C.p,
                       CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  alpha = 100;
  beta = 100;
  REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
  CHECK(C.read() == kAB);
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("cublasLtMatmul: beta = 0 does not read C, alpha = 0 does not read A and B") {
  const float nan = std::nanf("");
  Uploaded<float> A(kA_N), B(kB_N), C(std::vector<float>{nan, nan, nan, nan});
  DeviceArray<float> D(4);
  LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
  REQUIRE(lt.matmul(1.0f, 0.0f, A.p, B.p, C.p, D.p) == CUBLAS_STATUS_SUCCESS);
  CHECK(D.read() == kAB);
  // alpha = 0: D = beta * C with A, B full of NaN: 0.5 * {2, 4, 6, 8} = {1, 2, 3, 4}.
  Uploaded<float> An(std::vector<float>(6, nan)), Bn(std::vector<float>(6, nan)), C2(std::vector<float>{2, 4, 6, 8});
  REQUIRE(lt.matmul(0.0f, 0.5f, An.p, Bn.p, C2.p, D.p) == CUBLAS_STATUS_SUCCESS);
  CHECK(D.read() == std::vector<float>{1, 2, 3, 4});
}

TEST_CASE("cublasLtMatmul: the BIAS epilogue adds bias[i] to row i of every column") {
  // bias = {0.5, -1}: AB + bias = [58.5 64.5; 138 153] -> {58.5, 138, 64.5, 153} (per column it would be
  // {58.5, 139.5, 63, 153}). With alpha 2, beta 3, C [1 3; 2 4]: {119.5, 283, 137.5, 319}.
  Uploaded<float> A(kA_N), B(kB_N), C(std::vector<float>{1, 2, 3, 4}), bias(std::vector<float>{0.5f, -1.0f});
  DeviceArray<float> D(4);
  LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
  lt.set_bias(bias.p);
  REQUIRE(lt.matmul(1.0f, 0.0f, A.p, B.p, nullptr, D.p) == CUBLAS_STATUS_SUCCESS);
  CHECK(D.read() == std::vector<float>{58.5f, 138, 64.5f, 153});
  REQUIRE(lt.matmul(2.0f, 3.0f, A.p, B.p, C.p, D.p) == CUBLAS_STATUS_SUCCESS);
  CHECK(D.read() == std::vector<float>{119.5f, 283, 137.5f, 319});
}

TEST_CASE("cublasLtMatmul: bf16 inputs, D rounded to bf16 to nearest with ties to even, or kept in fp32") {
  // A = [1 1; 1 3], B = [256; 1] (all exact in bf16): A * B = {257, 259}. Near 256 bf16 steps by 2, so both
  // are ties: 257 -> 256 (even significand) not 258, 259 -> 260 (even) not 258. 32F D keeps 257, 259.
  Uploaded<__nv_bfloat16> A(to_bf16({1, 1, 1, 3})), B(to_bf16({256, 1}));
  {
    DeviceArray<__nv_bfloat16> D(2);
    LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_16BF, CUDA_R_16BF, 2, 1, 2, 2, 2, 2, 2);
    REQUIRE(lt.matmul(1.0f, 0.0f, A.p, B.p, nullptr, D.p) == CUBLAS_STATUS_SUCCESS);
    CHECK(from_bf16(D.read()) == std::vector<float>{256, 260});
    // With a bf16 bias {0.5, 0.5}: 257.5 -> 258 and 259.5 -> 260 (no ties: to nearest).
    Uploaded<__nv_bfloat16> bias(to_bf16({0.5f, 0.5f}));
    lt.set_bias(bias.p);
    REQUIRE(lt.matmul(1.0f, 0.0f, A.p, B.p, nullptr, D.p) == CUBLAS_STATUS_SUCCESS);
    CHECK(from_bf16(D.read()) == std::vector<float>{258, 260});
  }
  {
    // 32F C and D: D = AB + 1 * C with C {0.25, -0.25}: {257.25, 258.75}, not representable in bf16.
    Uploaded<float> C(std::vector<float>{0.25f, -0.25f});
    DeviceArray<float> D(2);
    LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_16BF, CUDA_R_32F, 2, 1, 2, 2, 2, 2, 2);
    REQUIRE(lt.matmul(1.0f, 1.0f, A.p, B.p, C.p, D.p) == CUBLAS_STATUS_SUCCESS);
    CHECK(D.read() == std::vector<float>{257.25f, 258.75f});
  }
}

TEST_CASE("cublasLtMatmul: the documented summation order (increasing k, fused multiply-add)") {
  // Row [1 1e8 -1e8] times column [1 1 1]: 1, then 1 + 1e8 = 1e8 (floats step by 8 there), then 0. Any
  // other order ((1e8 - 1e8) + 1) gives 1.
  // Row [1+2^-11, 1+2^-12] times column [-1, 1+2^-12]: acc = -(1+2^-11), then fma adds the exact product
  // 1 + 2^-11 + 2^-24, leaving 2^-24; rounding the product first (a tie, to 1 + 2^-11) would leave 0.
  const float e11 = std::ldexp(1.0f, -11), e12 = std::ldexp(1.0f, -12);
  Uploaded<float> A(std::vector<float>{1, 1 + e11, 1e8f, 1 + e12, -1e8f, 0});  // 2 x 3, lda 2
  Uploaded<float> B(std::vector<float>{1, 1, 1, -1, 1 + e12, 0});              // 3 x 2, ldb 3
  DeviceArray<float> D(4);
  LtProblem lt(CUBLAS_OP_N, CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, 2, 2, 3, 2, 3, 2, 2);
  REQUIRE(lt.matmul(1.0f, 0.0f, A.p, B.p, nullptr, D.p) == CUBLAS_STATUS_SUCCESS);
  const std::vector<float> d = D.read();
  CHECK(d[0] == 0.0f);                   // row 0 . column 0
  CHECK(d[3] == std::ldexp(1.0f, -24));  // row 1 . column 1
}

TEST_CASE("cublasGemmEx: the same worked examples, C in place, on the handle's stream") {
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH) == CUBLAS_STATUS_SUCCESS);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  REQUIRE(cublasSetStream(h, s) == CUBLAS_STATUS_SUCCESS);
  const float one = 1, zero = 0, two = 2, three = 3;
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      Uploaded<float> A(ta ? kA_T : kA_N), B(tb ? kB_T : kB_N), C(std::vector<float>{1, 2, -1, 3, 4, -1});
      // C (ldc 3) = [1 3; 2 4] with padding -1; 2 * AB + 3 * C = {119, 284, 137, 320} (worked out above).
      REQUIRE(cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, 2, 2, 3, &two, A.p,
                           CUDA_R_32F, ta ? 3 : 2, B.p, CUDA_R_32F, tb ? 2 : 3, &three, C.p, CUDA_R_32F, 3,
                           CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
      CHECK(C.read() == std::vector<float>{119, 284, -1, 137, 320, -1});
    }
  }
  // bf16 in and out (ties to even), and bf16 in with fp32 out, through the 64-bit entry point.
  Uploaded<__nv_bfloat16> A(to_bf16({1, 1, 1, 3})), B(to_bf16({256, 1}));
  DeviceArray<__nv_bfloat16> D(2);
  REQUIRE(cublasGemmEx_64(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 1, 2, &one, A.p, CUDA_R_16BF, 2, B.p, CUDA_R_16BF, 2, &zero,
                          D.p, CUDA_R_16BF, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  DeviceArray<float> F(2);
  REQUIRE(cublasGemmEx(h, CUBLAS_OP_N, CUBLAS_OP_N, 2, 1, 2, &one, A.p, CUDA_R_16BF, 2, B.p, CUDA_R_16BF, 2, &zero, F.p,
                       CUDA_R_32F, 2, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  CHECK(from_bf16(D.read()) == std::vector<float>{256, 260});
  CHECK(F.read() == std::vector<float>{257, 259});
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
  REQUIRE(cudaStreamDestroy(s) == cudaSuccess);
}

TEST_CASE("cublasLtMatmul and cublasGemmEx agree bit for bit with the documented arithmetic on larger shapes") {
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const auto fill = [&](size_t n) {
    std::vector<float> v(n);
    for (float& x : v) x = dist(rng);
    return v;
  };
  const int m = 37, n = 29, k = 61, pad = 3;
  cublasHandle_t h = nullptr;
  REQUIRE(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS);
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      CAPTURE(ta);
      CAPTURE(tb);
      const int lda = (ta ? k : m) + pad, ldb = (tb ? n : k) + pad;
      const std::vector<float> a = fill(static_cast<size_t>(lda * (ta ? m : k)));
      const std::vector<float> b = fill(static_cast<size_t>(ldb * (tb ? k : n)));
      const std::vector<float> c = fill(static_cast<size_t>(m * n)), bias = fill(static_cast<size_t>(m));
      const float alpha = 0.75f, beta = -1.25f;
      Uploaded<float> A(a), B(b), C(c), Bias(bias), C2(c);
      DeviceArray<float> D(static_cast<size_t>(m * n));
      LtProblem lt(ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, CUDA_R_32F, CUDA_R_32F, m, n, k, lda,
                   ldb, m, m);
      lt.set_bias(Bias.p);
      REQUIRE(lt.matmul(alpha, beta, A.p, B.p, C.p, D.p) == CUBLAS_STATUS_SUCCESS);
      CHECK(D.read() == reference_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, m, bias));
      REQUIRE(cublasGemmEx(h, ta ? CUBLAS_OP_T : CUBLAS_OP_N, tb ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, A.p,
                           CUDA_R_32F, lda, B.p, CUDA_R_32F, ldb, &beta, C2.p, CUDA_R_32F, m, CUBLAS_COMPUTE_32F,
                           CUBLAS_GEMM_DEFAULT) == CUBLAS_STATUS_SUCCESS);
      REQUIRE(cudaStreamSynchronize(nullptr) == cudaSuccess);
      CHECK(C2.read() == reference_gemm(ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, m, {}));
    }
  }
  REQUIRE(cublasDestroy(h) == CUBLAS_STATUS_SUCCESS);
}

TEST_CASE("the core computes a 300 x 300 x 300 product with bf16 output, the same on every run") {
  const int s = 300;
  std::vector<float> a(s * s), b(s * s);
  for (int i = 0; i < s * s; ++i) {
    a[static_cast<size_t>(i)] = static_cast<float>(i % 7) - 3.0f;
    b[static_cast<size_t>(i)] = static_cast<float>(i % 5) * 0.5f;
  }
  std::vector<__nv_bfloat16> d1(s * s), d2(s * s);
  pd2bw_emu::blas::Gemm g;
  g.m = g.n = g.k = s;
  g.trans_b = true;
  g.a = {a.data(), CUDA_R_32F, s};
  g.b = {b.data(), CUDA_R_32F, s};
  g.d = d1.data();
  g.d_type = CUDA_R_16BF;
  g.ldd = s;
  pd2bw_emu::blas::compute(g);
  g.d = d2.data();
  pd2bw_emu::blas::compute(g);
  CHECK(std::memcmp(d1.data(), d2.data(), d1.size() * sizeof d1[0]) == 0);
  // D(0, 0) = sum over p of a[300 p] * b[300 p] (B transposed: B(0, p) is b[300 p]): 300 p mod 7 and mod 5
  // cycle through all residues with period 35; computed here in doubles (exact for these small integers).
  double expected = 0;
  for (int p = 0; p < s; ++p) expected += (static_cast<double>(300 * p % 7) - 3.0) * (300 * p % 5) * 0.5;
  CHECK(__bfloat162float(d1[0]) == __bfloat162float(__double2bfloat16(expected)));
}

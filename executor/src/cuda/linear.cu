// CUDA linear layer through cuBLASLt (see linear.hpp). cuBLASLt is column-major: a row-major (R, C)
// matrix is a column-major C x R one, so y (N, Out) = x W^T is y^T (Out x N) = W (Out x In) x^T, with
// W's row-major (Out, In) storage read as a transposed In x Out matrix:
//   forward  D(Out x N)  = op_T(W: In x Out) * x(In x N) [+ bias over the Out rows]
//   dx       D(In x N)   = W(In x Out) * dy(Out x N)
//   dweight  D(In x Out) += x(In x N) * op_T(dy: Out x N)
//   dbias    D(Out x 1)  += dy(Out x N) * ones(N x 1)
#include "cuda/linear.hpp"

#include <cublasLt.h>
#include <cublas_v2.h>

#include <map>
#include <tuple>

#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{32} << 20;  // what cuBLASLt's Hopper kernels ask for

void check_blas(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("cuBLAS error in ") + what + ": " + cublasLtGetStatusString(status),
                "check the GPU's state with nvidia-smi; a shape cuBLASLt refuses is a bug to report");
}

template <typename H, cublasStatus_t (*Destroy)(H)>
class LtHandle {
 public:
  LtHandle() = default;
  LtHandle(LtHandle&& o) noexcept : h_(std::exchange(o.h_, H{})) {}
  LtHandle& operator=(LtHandle&& o) noexcept {
    std::swap(h_, o.h_);
    return *this;
  }
  LtHandle(const LtHandle&) = delete;
  LtHandle& operator=(const LtHandle&) = delete;
  ~LtHandle() {
    if (h_ != H{}) (void)Destroy(h_);
  }
  H get() const { return h_; }
  H* out() { return &h_; }

 private:
  H h_{};
};

using Desc = LtHandle<cublasLtMatmulDesc_t, cublasLtMatmulDescDestroy>;
using Layout = LtHandle<cublasLtMatrixLayout_t, cublasLtMatrixLayoutDestroy>;
using Preference = LtHandle<cublasLtMatmulPreference_t, cublasLtMatmulPreferenceDestroy>;

// The largest power of two up to 256 that divides the address (256 for null).
uint32_t alignment(const void* p) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  uint32_t align = 256;
  while (align > 1 && a % align != 0) align /= 2;
  return align;
}

template <typename T>
constexpr cudaDataType_t data_type() {
  return std::is_same_v<T, float> ? CUDA_R_32F : CUDA_R_16BF;
}

// One product D (m x n) = op(A) op(B) (+ D when accumulate) (+ bias over the m rows), column-major.
// A is stored k x m when trans_a, else m x k; B n x k when trans_b, else k x n.
struct Gemm {
  bool trans_a = false, trans_b = false;
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  cudaDataType_t in_type = CUDA_R_32F, d_type = CUDA_R_32F;
  bool accumulate = false;
  const void* bias = nullptr;  // of in_type, 16-byte aligned
};

using PlanKey = std::tuple<bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int, int, bool, bool,
                           uint32_t, uint32_t, uint32_t, uint32_t>;

PlanKey key_of(const Gemm& g) {
  return {g.trans_a, g.trans_b, g.m,          g.n,           g.k,           g.lda,         g.ldb,         g.ldd,
          g.in_type, g.d_type,  g.accumulate, g.bias != nullptr, alignment(g.a), alignment(g.b), alignment(g.d),
          alignment(g.bias)};
}

struct Plan {
  Desc desc;
  Layout a, b, d;
  cublasLtMatmulAlgo_t algo{};
  bool found = false;  // false: cuBLASLt has no algorithm, run the cuBLAS fallback
};

}  // namespace

struct Linear::Impl {
  LtHandle<cublasLtHandle_t, cublasLtDestroy> lt;
  LtHandle<cublasHandle_t, cublasDestroy> blas;
  DeviceMemory workspace;
  std::map<PlanKey, Plan> plans;

  Impl() : workspace(device_alloc(kWorkspaceBytes, "cudaMalloc (cuBLASLt workspace)")) {
    check_blas(cublasLtCreate(lt.out()), "cublasLtCreate");
    check_blas(cublasCreate(blas.out()), "cublasCreate");
    check_blas(cublasSetMathMode(blas.get(), CUBLAS_PEDANTIC_MATH), "cublasSetMathMode");
  }

  Plan make_plan(const Gemm& g) {
    Plan p;
    check_blas(cublasLtMatmulDescCreate(p.desc.out(), CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
    const cublasOperation_t ta = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, tb = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    set(p, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
    set(p, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
    if (g.bias != nullptr) {
      const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BIAS;
      const auto bias_type = static_cast<int32_t>(g.in_type);
      set(p, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
      set(p, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
      set(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias);
    }
    const auto rows_a = static_cast<uint64_t>(g.trans_a ? g.k : g.m), cols_a = static_cast<uint64_t>(g.trans_a ? g.m : g.k);
    const auto rows_b = static_cast<uint64_t>(g.trans_b ? g.n : g.k), cols_b = static_cast<uint64_t>(g.trans_b ? g.k : g.n);
    check_blas(cublasLtMatrixLayoutCreate(p.a.out(), g.in_type, rows_a, cols_a, g.lda), "cublasLtMatrixLayoutCreate");
    check_blas(cublasLtMatrixLayoutCreate(p.b.out(), g.in_type, rows_b, cols_b, g.ldb), "cublasLtMatrixLayoutCreate");
    check_blas(cublasLtMatrixLayoutCreate(p.d.out(), g.d_type, static_cast<uint64_t>(g.m), static_cast<uint64_t>(g.n),
                                          g.ldd),
               "cublasLtMatrixLayoutCreate");
    Preference pref;
    check_blas(cublasLtMatmulPreferenceCreate(pref.out()), "cublasLtMatmulPreferenceCreate");
    const uint64_t ws = kWorkspaceBytes;
    check_blas(cublasLtMatmulPreferenceSetAttribute(pref.get(), CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
               "cublasLtMatmulPreferenceSetAttribute");
    const uint32_t aligns[] = {alignment(g.a), alignment(g.b), alignment(g.d), alignment(g.d)};
    const cublasLtMatmulPreferenceAttributes_t which[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    for (int i = 0; i < 4; ++i)
      check_blas(cublasLtMatmulPreferenceSetAttribute(pref.get(), which[i], &aligns[i], sizeof aligns[i]),
                 "cublasLtMatmulPreferenceSetAttribute");
    cublasLtMatmulHeuristicResult_t result{};
    int count = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(lt.get(), p.desc.get(), p.a.get(), p.b.get(), p.d.get(),
                                                                 p.d.get(), pref.get(), 1, &result, &count);
    p.found = status == CUBLAS_STATUS_SUCCESS && count > 0 && result.state == CUBLAS_STATUS_SUCCESS;
    if (p.found) p.algo = result.algo;
    return p;
  }

  static void set(Plan& p, cublasLtMatmulDescAttributes_t attr, const void* value, size_t bytes) {
    check_blas(cublasLtMatmulDescSetAttribute(p.desc.get(), attr, value, bytes), "cublasLtMatmulDescSetAttribute");
  }

  void run(const Gemm& g, cudaStream_t stream) {
    auto it = plans.find(key_of(g));
    if (it == plans.end()) it = plans.emplace(key_of(g), make_plan(g)).first;
    Plan& p = it->second;
    const float alpha = 1.0f, beta = g.accumulate ? 1.0f : 0.0f;
    if (!p.found) return fallback(g, alpha, beta, stream);
    if (g.bias != nullptr) set(p, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias);
    check_blas(cublasLtMatmul(lt.get(), p.desc.get(), &alpha, g.a, p.a.get(), g.b, p.b.get(), &beta, g.d, p.d.get(), g.d,
                              p.d.get(), &p.algo, workspace.get(), kWorkspaceBytes, stream),
               "cublasLtMatmul");
  }

  // cuBLAS takes any shape and alignment (no bias epilogue: the caller adds the bias itself).
  void fallback(const Gemm& g, float alpha, float beta, cudaStream_t stream) {
    if (g.bias != nullptr) throw Error("cuda backend: internal: a bias epilogue on the cuBLAS fallback");
    check_blas(cublasSetStream(blas.get(), stream), "cublasSetStream");
    check_blas(cublasGemmEx_64(blas.get(), g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N, g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                               g.m, g.n, g.k, &alpha, g.a, g.in_type, g.lda, g.b, g.in_type, g.ldb, &beta, g.d, g.d_type,
                               g.ldd, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
  }

  // With the bias as an epilogue when cuBLASLt takes this shape with it; else the product, then the bias.
  template <typename T>
  void product_with_bias(Gemm g, const T* bias, T* y, int64_t rows, int64_t out, cudaStream_t stream) {
    if (bias != nullptr && alignment(bias) >= 16) {
      g.bias = bias;
      auto it = plans.find(key_of(g));
      if (it == plans.end()) it = plans.emplace(key_of(g), make_plan(g)).first;
      if (it->second.found) return run(g, stream);
      g.bias = nullptr;
    }
    run(g, stream);
    if (bias != nullptr) add_bias(y, bias, rows, out, stream);
  }
};

Linear::Linear() : impl_(std::make_unique<Impl>()) {}
Linear::~Linear() = default;

int64_t Linear::workspace_bytes() const { return static_cast<int64_t>(kWorkspaceBytes); }

template <typename T>
void Linear::forward(const T* x, const T* weight, const T* bias, T* y, int64_t n, int64_t in, int64_t out,
                     cudaStream_t stream) {
  if (n < 0 || in <= 0 || out <= 0) throw_usage("linear_forward", "bad shape");
  if (n == 0) return;
  Gemm g;
  g.trans_a = true;
  g.m = out, g.n = n, g.k = in;
  g.a = weight, g.lda = in;
  g.b = x, g.ldb = in;
  g.d = y, g.ldd = out;
  g.in_type = g.d_type = data_type<T>();
  impl_->product_with_bias(g, bias, y, n, out, stream);
}

template <typename T>
void Linear::backward(const T* dy, const T* x, const T* weight, T* dx, float* dweight, float* dbias, const T* ones,
                      int64_t n, int64_t in, int64_t out, cudaStream_t stream) {
  if (n < 0 || in <= 0 || out <= 0) throw_usage("linear_backward", "bad shape");
  if (n == 0) return;
  if (dbias != nullptr && ones == nullptr) throw_usage("linear_backward", "dbias needs the ones vector");
  if (dx != nullptr) {
    Gemm g;
    g.m = in, g.n = n, g.k = out;
    g.a = weight, g.lda = in;
    g.b = dy, g.ldb = out;
    g.d = dx, g.ldd = in;
    g.in_type = g.d_type = data_type<T>();
    impl_->run(g, stream);
  }
  if (dweight != nullptr) {
    Gemm w;
    w.trans_b = true;
    w.m = in, w.n = out, w.k = n;
    w.a = x, w.lda = in;
    w.b = dy, w.ldb = out;
    w.d = dweight, w.ldd = in;
    w.in_type = data_type<T>();
    w.d_type = CUDA_R_32F;
    w.accumulate = true;
    impl_->run(w, stream);
  }
  if (dbias == nullptr) return;
  Gemm b;
  b.m = out, b.n = 1, b.k = n;
  b.a = dy, b.lda = out;
  b.b = ones, b.ldb = n;
  b.d = dbias, b.ldd = out;
  b.in_type = data_type<T>();
  b.d_type = CUDA_R_32F;
  b.accumulate = true;
  impl_->run(b, stream);
}

#define PD2BW_INSTANTIATE(T)                                                                                   \
  template void Linear::forward<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t, cudaStream_t); \
  template void Linear::backward<T>(const T*, const T*, const T*, T*, float*, float*, const T*, int64_t, int64_t, \
                                    int64_t, cudaStream_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(bf16_t)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cuda

// The emulated cuBLASLt (cublasLt.h): handles, descriptors, layouts, preferences, the heuristic and the
// matmul, which checks its arguments and queues blas_core's GEMM on the caller's stream.
#include <cublasLt.h>

#include <algorithm>
#include <cstring>

#include "blas_core.hpp"

struct cublasLtContext {
  int unused = 0;
};

struct cublasLtMatmulDescOpaque_t {
  cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
  cudaDataType_t scale = CUDA_R_32F;
  int32_t transa = CUBLAS_OP_N, transb = CUBLAS_OP_N;
  uint32_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
  const void* bias = nullptr;
  int32_t bias_type = -1;  // -1: D's type
};

struct cublasLtMatrixLayoutOpaque_t {
  cudaDataType_t type = CUDA_R_32F;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};

struct cublasLtMatmulPreferenceOpaque_t {
  uint32_t search_mode = 0;
  uint64_t max_workspace = 0;                // any limit fits: the emulation's one algorithm needs no workspace
  uint32_t align[4] = {256, 256, 256, 256};  // promised alignment of A, B, C, D in bytes
};

namespace {

using namespace pd2bw_emu::blas;

Registry handles, descs, layouts, prefs;

constexpr uint64_t kAlgoTag = 0x5044324257454d55ull;  // marks an algo the heuristic made

// The problem a descriptor and four layouts describe, as far as the layouts say (pointers come later).
struct Problem {
  Gemm g;
  const cublasLtMatrixLayoutOpaque_t *a, *b, *c, *d;
  bool bias = false;
};

bool valid_op(int32_t op) {
  return op == CUBLAS_OP_N || op == CUBLAS_OP_T || op == CUBLAS_OP_C;
}

// ld >= rows and ld >= 1 (C may also have ld 0, out of place: every column of C is then its first, the
// documented column broadcast), and the matrix's bytes fit an int64.
bool valid_layout(const cublasLtMatrixLayoutOpaque_t& x, bool broadcast_ok) {
  const bool ld_ok = (broadcast_ok && x.ld == 0) || (x.ld >= 1 && static_cast<uint64_t>(x.ld) >= x.rows);
  return ld_ok && span_bytes(x.rows, x.cols, static_cast<uint64_t>(x.ld), element_bytes(x.type)).has_value();
}

// Derives the GEMM from the descriptor and layouts: INVALID_VALUE for a conflict, NOT_SUPPORTED for types
// or an epilogue the emulation does not have. cdesc may be null (then it is ddesc).
cublasStatus_t derive(const cublasLtMatmulDescOpaque_t& op, const cublasLtMatrixLayoutOpaque_t& a,
                      const cublasLtMatrixLayoutOpaque_t& b, const cublasLtMatrixLayoutOpaque_t& c,
                      const cublasLtMatrixLayoutOpaque_t& d, Problem* out) {
  if (!valid_op(op.transa) || !valid_op(op.transb)) return CUBLAS_STATUS_INVALID_VALUE;
  const bool ta = op.transa != CUBLAS_OP_N, tb = op.transb != CUBLAS_OP_N;
  const uint64_t m = ta ? a.cols : a.rows, k = ta ? a.rows : a.cols;
  const uint64_t kb = tb ? b.cols : b.rows, n = tb ? b.rows : b.cols;
  if (k != kb || d.rows != m || d.cols != n || c.rows != m || c.cols != n || c.type != d.type)
    return CUBLAS_STATUS_INVALID_VALUE;
  if (op.epilogue != CUBLASLT_EPILOGUE_DEFAULT && op.epilogue != CUBLASLT_EPILOGUE_BIAS)
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const bool bias = op.epilogue == CUBLASLT_EPILOGUE_BIAS;
  const int32_t bias_type = op.bias_type == -1 ? static_cast<int32_t>(d.type) : op.bias_type;
  if (!supported_compute(op.compute, op.scale) || a.type != b.type || !supported_types(a.type, d.type) ||
      (bias && bias_type != static_cast<int32_t>(d.type)))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  if (!valid_layout(a, false) || !valid_layout(b, false) || !valid_layout(c, true) || !valid_layout(d, false))
    return CUBLAS_STATUS_INVALID_VALUE;
  Gemm& g = out->g;
  g.m = static_cast<int64_t>(m);
  g.n = static_cast<int64_t>(n);
  g.k = static_cast<int64_t>(k);
  g.trans_a = ta;
  g.trans_b = tb;
  g.a = {nullptr, a.type, a.ld};
  g.b = {nullptr, b.type, b.ld};
  g.c = {nullptr, c.type, c.ld};
  g.d_type = d.type;
  g.ldd = d.ld;
  g.bias_type = d.type;
  out->a = &a;
  out->b = &b;
  out->c = &c;
  out->d = &d;
  out->bias = bias;
  return CUBLAS_STATUS_SUCCESS;
}

// derive() on the handles, after checking that they are live.
cublasStatus_t derive(cublasLtMatmulDesc_t op, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                      cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d, Problem* out) {
  if (c == nullptr) c = d;
  if (!descs.live(op) || !layouts.live(a) || !layouts.live(b) || !layouts.live(c) || !layouts.live(d))
    return CUBLAS_STATUS_INVALID_VALUE;
  return derive(*op, *a, *b, *c, *d, out);
}

// The types and epilogue an algo is made for (B's and C's types are A's and D's, the bias's D's).
uint64_t fingerprint(const cublasLtMatmulDescOpaque_t& op, const Problem& p) {
  return static_cast<uint64_t>(p.a->type) | static_cast<uint64_t>(p.d->type) << 8 |
         static_cast<uint64_t>(op.epilogue) << 16 | static_cast<uint64_t>(op.compute) << 24 |
         static_cast<uint64_t>(op.scale) << 40;
}

// An algo: a tag, the fingerprint, and the alignments (bytes) of A, B, C, D and the bias it may assume.
cublasLtMatmulAlgo_t make_algo(const cublasLtMatmulDescOpaque_t& op, const Problem& p, const uint32_t align[4]) {
  cublasLtMatmulAlgo_t algo{};
  algo.data[0] = kAlgoTag;
  algo.data[1] = fingerprint(op, p);
  for (int i = 0; i < 4; ++i) algo.data[2 + i] = alignment_of(align[i]);
  // The bias pointer set now tells the heuristic how aligned the bias will be (null: fully).
  algo.data[6] = p.bias ? alignment_of(reinterpret_cast<uintptr_t>(op.bias)) : 0;
  return algo;
}

// Whether each promised alignment is a positive multiple of its matrix's element size.
bool alignments_possible(const Problem& p, const uint32_t align[4]) {
  const cublasLtMatrixLayoutOpaque_t* x[4] = {p.a, p.b, p.c, p.d};
  for (int i = 0; i < 4; ++i)
    if (align[i] == 0 || align[i] % element_bytes(x[i]->type) != 0) return false;
  return true;
}

template <class T>
cublasStatus_t read_value(const void* buf, size_t size, T* out) {
  if (buf == nullptr || size != sizeof(T)) return CUBLAS_STATUS_INVALID_VALUE;
  std::memcpy(out, buf, sizeof(T));
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace

cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *lightHandle = new cublasLtContext;
  handles.add(*lightHandle);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle) {
  if (lightHandle == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  if (!handles.remove(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  (void)cudaDeviceSynchronize();  // releasing the library's resources synchronizes the device
  delete lightHandle;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasLtGetStatusName(cublasStatus_t status) {
  return status_name(status);
}
const char* cublasLtGetStatusString(cublasStatus_t status) {
  return status_string(status);
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType) {
  if (matmulDesc == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *matmulDesc = new cublasLtMatmulDescOpaque_t;
  (*matmulDesc)->compute = computeType;
  (*matmulDesc)->scale = scaleType;
  descs.add(*matmulDesc);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc) {
  if (matmulDesc == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (!descs.remove(matmulDesc)) return CUBLAS_STATUS_INVALID_VALUE;
  delete matmulDesc;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes) {
  if (!descs.live(matmulDesc)) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_DESC_TRANSA:
      return read_value(buf, sizeInBytes, &matmulDesc->transa);
    case CUBLASLT_MATMUL_DESC_TRANSB:
      return read_value(buf, sizeInBytes, &matmulDesc->transb);
    case CUBLASLT_MATMUL_DESC_EPILOGUE:
      return read_value(buf, sizeInBytes, &matmulDesc->epilogue);
    case CUBLASLT_MATMUL_DESC_BIAS_POINTER:
      return read_value(buf, sizeInBytes, &matmulDesc->bias);
    case CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE:
      return read_value(buf, sizeInBytes, &matmulDesc->bias_type);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld) {
  if (matLayout == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *matLayout = new cublasLtMatrixLayoutOpaque_t{type, rows, cols, ld};
  layouts.add(*matLayout);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout) {
  if (matLayout == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (!layouts.remove(matLayout)) return CUBLAS_STATUS_INVALID_VALUE;
  delete matLayout;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref) {
  if (pref == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  *pref = new cublasLtMatmulPreferenceOpaque_t;
  prefs.add(*pref);
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref) {
  if (pref == nullptr) return CUBLAS_STATUS_SUCCESS;
  if (!prefs.remove(pref)) return CUBLAS_STATUS_INVALID_VALUE;
  delete pref;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes) {
  if (!prefs.live(pref)) return CUBLAS_STATUS_INVALID_VALUE;
  switch (attr) {
    case CUBLASLT_MATMUL_PREF_SEARCH_MODE:
      return read_value(buf, sizeInBytes, &pref->search_mode);
    case CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES:
      return read_value(buf, sizeInBytes, &pref->max_workspace);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES:
      return read_value(buf, sizeInBytes, &pref->align[0]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES:
      return read_value(buf, sizeInBytes, &pref->align[1]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES:
      return read_value(buf, sizeInBytes, &pref->align[2]);
    case CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES:
      return read_value(buf, sizeInBytes, &pref->align[3]);
  }
  return CUBLAS_STATUS_INVALID_VALUE;
}

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount) {
  if (!handles.live(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  if (requestedAlgoCount <= 0 || heuristicResultsArray == nullptr || returnAlgoCount == nullptr ||
      !prefs.live(preference))
    return CUBLAS_STATUS_INVALID_VALUE;
  *returnAlgoCount = 0;
  Problem p{};
  const cublasStatus_t rc = derive(operationDesc, Adesc, Bdesc, Cdesc, Ddesc, &p);
  if (rc != CUBLAS_STATUS_SUCCESS) return rc;
  if (preference->search_mode != 0 || !alignments_possible(p, preference->align)) return CUBLAS_STATUS_NOT_SUPPORTED;
  heuristicResultsArray[0] = cublasLtMatmulHeuristicResult_t{};
  heuristicResultsArray[0].algo = make_algo(*operationDesc, p, preference->align);
  heuristicResultsArray[0].workspaceSize = 0;
  heuristicResultsArray[0].state = CUBLAS_STATUS_SUCCESS;
  heuristicResultsArray[0].wavesCount = 1.0f;
  *returnAlgoCount = 1;
  return CUBLAS_STATUS_SUCCESS;
}

namespace {

// The alignments (A, B, C, D, bias) `algo` lets the matmul assume: INVALID_VALUE for an algo the
// heuristic did not make, or made for other types or another epilogue. A null algo is the heuristic's
// answer for default preferences (256-byte alignments) and the bias pointer set now.
cublasStatus_t algo_alignments(const cublasLtMatmulAlgo_t* algo, const cublasLtMatmulDescOpaque_t& op, const Problem& p,
                               uint64_t align[5]) {
  if (algo == nullptr) {
    const cublasLtMatmulPreferenceOpaque_t defaults;
    const cublasLtMatmulAlgo_t implicit = make_algo(op, p, defaults.align);
    return algo_alignments(&implicit, op, p, align);
  }
  if (algo->data[0] != kAlgoTag || algo->data[1] != fingerprint(op, p)) return CUBLAS_STATUS_INVALID_VALUE;
  for (int i = 0; i < 5; ++i) align[i] = algo->data[2 + i];
  return CUBLAS_STATUS_SUCCESS;
}

bool same_layout(const cublasLtMatrixLayoutOpaque_t& x, const cublasLtMatrixLayoutOpaque_t& y) {
  return x.type == y.type && x.rows == y.rows && x.cols == y.cols && x.ld == y.ld;
}

// Checks g's pointers (and the workspace) against the layouts and the algo's alignments: each matrix
// the GEMM reads or writes must be device memory over the bytes it spans. False (with a message for a
// memory fault) when one is not.
bool check_operands(const Problem& p, const Gemm& g, const void* workspace, size_t workspace_bytes,
                    const uint64_t align[5]) {
  const char* api = "cublasLtMatmul";
  if (g.c.data != nullptr && g.c.data == g.d && !same_layout(*p.c, *p.d)) return false;  // in place: Cdesc == Ddesc
  if (p.bias && g.bias == nullptr) return false;
  if (g.beta != 0.0f && g.c.data == nullptr) return false;
  if (workspace_bytes > 0 && (workspace == nullptr || !check_span(api, "workspace", workspace, workspace_bytes, 256)))
    return false;
  if (g.m == 0 || g.n == 0) return true;
  const auto ld = [](const cublasLtMatrixLayoutOpaque_t* x) { return static_cast<uint64_t>(x->ld); };
  if (g.alpha != 0.0f && g.k > 0 &&
      (!check_matrix(api, "matrix A", g.a.data, p.a->rows, p.a->cols, ld(p.a), p.a->type, align[0]) ||
       !check_matrix(api, "matrix B", g.b.data, p.b->rows, p.b->cols, ld(p.b), p.b->type, align[1])))
    return false;
  if (g.beta != 0.0f && !check_matrix(api, "matrix C", g.c.data, p.c->rows, p.c->cols, ld(p.c), p.c->type, align[2]))
    return false;
  if (!check_matrix(api, "matrix D", g.d, p.d->rows, p.d->cols, ld(p.d), p.d->type, align[3])) return false;
  const uint64_t bias_align = std::max<uint64_t>(align[4], element_bytes(g.bias_type));
  return !p.bias || check_matrix(api, "bias", g.bias, p.d->rows, 1, p.d->rows, g.bias_type, bias_align);
}

}  // namespace

cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream) {
  if (!handles.live(lightHandle)) return CUBLAS_STATUS_NOT_INITIALIZED;
  Problem p{};
  cublasStatus_t rc = derive(computeDesc, Adesc, Bdesc, Cdesc, Ddesc, &p);
  if (rc != CUBLAS_STATUS_SUCCESS) return rc;
  if (alpha == nullptr || beta == nullptr) return CUBLAS_STATUS_INVALID_VALUE;
  uint64_t align[5] = {};
  rc = algo_alignments(algo, *computeDesc, p, align);
  if (rc != CUBLAS_STATUS_SUCCESS) return rc;
  Gemm g = p.g;
  std::memcpy(&g.alpha, alpha, sizeof g.alpha);  // scale type CUDA_R_32F: host floats, read now
  std::memcpy(&g.beta, beta, sizeof g.beta);
  g.a.data = A;
  g.b.data = B;
  g.c.data = C;
  g.d = D;
  g.bias = p.bias ? computeDesc->bias : nullptr;
  if (!check_operands(p, g, workspace, workspaceSizeInBytes, align)) return CUBLAS_STATUS_INVALID_VALUE;
  if (g.m == 0 || g.n == 0) return CUBLAS_STATUS_SUCCESS;
  return queue(stream, g);
}

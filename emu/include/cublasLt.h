// The emulated device's cuBLASLt: the matmul subset pd2bw uses, computed on the CPU as NVIDIA's cuBLASLt
// documentation defines it.
//
// cublasLtMatmul computes D = epilogue(alpha * op(A) * op(B) + beta * C) with column-major matrices
// described by layouts (type, rows, cols, ld: element (i, j) is at X[i + j * ld], ld >= rows). op(A) is
// m x k, op(B) k x n, C and D m x n: A's layout is m x k (TRANSA = N) or k x m (T), B's k x n (N) or
// n x k (T), and C's and D's m x n with the same type (their lds may differ; C == D is in place and then
// needs the same ld). The epilogue is nothing (DEFAULT) or BIAS: bias[i] (a packed vector of m elements,
// of D's type) added to every column, i.e. to row i of D.
//
// Supported (compute type CUBLAS_COMPUTE_32F or _32F_PEDANTIC, scale type CUDA_R_32F, so alpha and beta
// are floats): A = B = C = D = CUDA_R_32F; A = B = CUDA_R_16BF with C = D = CUDA_R_16BF or CUDA_R_32F.
//
// Arithmetic, fixed so results are the same on every run: each D(i, j) is
//   acc = 0; for p = 0 .. k-1 in increasing order: acc = fma(opA(i, p), opB(p, j), acc)   (float)
//   t = alpha * acc                      (t = 0 when alpha == 0 or k == 0: A and B are then not read)
//   t = fma(beta, C(i, j), t)            (only when beta != 0: C is not read when beta == 0)
//   t = t + bias[i]                      (BIAS only)
//   D(i, j) = t rounded to D's type      (bf16: to nearest, ties to even; NaN -> 0x7fff)
// with every input element widened exactly to float first.
#pragma once

#include <cuda_runtime.h>
#include <library_types.h>

#include <cstddef>
#include <cstdint>

#include "cublas_api.h"

struct cublasLtContext;
struct cublasLtMatmulDescOpaque_t;
struct cublasLtMatrixLayoutOpaque_t;
struct cublasLtMatmulPreferenceOpaque_t;
using cublasLtHandle_t = cublasLtContext*;
using cublasLtMatmulDesc_t = cublasLtMatmulDescOpaque_t*;
using cublasLtMatrixLayout_t = cublasLtMatrixLayoutOpaque_t*;
using cublasLtMatmulPreference_t = cublasLtMatmulPreferenceOpaque_t*;

// An algorithm chosen by cublasLtMatmulAlgoGetHeuristic, to pass to cublasLtMatmul unchanged. The
// emulation records in it the problem's types and the alignments the preference promised.
typedef struct {
  uint64_t data[8];
} cublasLtMatmulAlgo_t;

// One heuristic answer: the algorithm, the workspace it needs (always 0 here), its state (SUCCESS) and
// its estimated waves (1).
typedef struct {
  cublasLtMatmulAlgo_t algo;
  size_t workspaceSize;
  cublasStatus_t state;
  float wavesCount;
  int reserved[4];
} cublasLtMatmulHeuristicResult_t;

// What runs after the product; values as NVIDIA's.
typedef enum {
  CUBLASLT_EPILOGUE_DEFAULT = 1,
  CUBLASLT_EPILOGUE_BIAS = 4,
} cublasLtEpilogue_t;

// The matmul descriptor's attributes the emulation implements, with the size of each value:
// TRANSA/TRANSB int32_t (cublasOperation_t, default N), EPILOGUE uint32_t (default DEFAULT), BIAS_POINTER
// a device pointer (const void*, default null), BIAS_DATA_TYPE int32_t (cudaDataType_t, or -1 = D's
// type, the default).
typedef enum {
  CUBLASLT_MATMUL_DESC_TRANSA = 3,
  CUBLASLT_MATMUL_DESC_TRANSB = 4,
  CUBLASLT_MATMUL_DESC_EPILOGUE = 7,
  CUBLASLT_MATMUL_DESC_BIAS_POINTER = 8,
  CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE = 26,
} cublasLtMatmulDescAttributes_t;

// The heuristic preferences the emulation implements: SEARCH_MODE uint32_t (only 0, best fit),
// MAX_WORKSPACE_BYTES uint64_t (default 0), MIN_ALIGNMENT_{A,B,C,D}_BYTES uint32_t (default 256): the
// alignment the caller promises for that matrix's pointer in every later cublasLtMatmul with the algo.
typedef enum {
  CUBLASLT_MATMUL_PREF_SEARCH_MODE = 0,
  CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES = 1,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES = 5,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES = 6,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES = 7,
  CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES = 8,
} cublasLtMatmulPreferenceAttributes_t;

// A handle in *lightHandle; INVALID_VALUE when lightHandle is null.
cublasStatus_t cublasLtCreate(cublasLtHandle_t* lightHandle);
// Destroys a handle after synchronizing the device: NOT_INITIALIZED when it is not a live one,
// INVALID_VALUE when null.
cublasStatus_t cublasLtDestroy(cublasLtHandle_t lightHandle);
// The enumerator's name, and a one-line description, of `status` (static strings).
const char* cublasLtGetStatusName(cublasStatus_t status);
const char* cublasLtGetStatusString(cublasStatus_t status);

// A matmul descriptor (TRANSA = TRANSB = N, no epilogue) for `computeType` and `scaleType` (the type of
// alpha and beta). Unsupported types are accepted here and refused by the heuristic and the matmul.
// INVALID_VALUE when matmulDesc is null.
cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t* matmulDesc, cublasComputeType_t computeType,
                                        cudaDataType_t scaleType);
// Destroys a descriptor (null: nothing to do); INVALID_VALUE for a pointer that is not a live one.
cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t matmulDesc);
// Sets `attr` from the sizeInBytes bytes at buf. INVALID_VALUE when the descriptor is not live, buf is
// null, sizeInBytes is not the attribute's size, or the attribute is not one listed above (nothing is
// silently ignored). Values are checked when the descriptor is used.
cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t matmulDesc, cublasLtMatmulDescAttributes_t attr,
                                              const void* buf, size_t sizeInBytes);

// A column-major layout of a rows x cols matrix of `type` with leading dimension `ld` (elements between
// the starts of two columns). Checked when used (ld >= rows, ld >= 1). INVALID_VALUE when matLayout is null.
cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t* matLayout, cudaDataType type, uint64_t rows,
                                          uint64_t cols, int64_t ld);
cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t matLayout);

// Heuristic preferences with the defaults above; destroy and set as for the matmul descriptor.
cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t* pref);
cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t pref);
cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t pref,
                                                    cublasLtMatmulPreferenceAttributes_t attr, const void* buf,
                                                    size_t sizeInBytes);

// Finds algorithms for the problem the descriptor and layouts describe (Cdesc null: Ddesc). On SUCCESS,
// *returnAlgoCount = 1 and heuristicResultsArray[0] holds the one algorithm (state SUCCESS, workspaceSize
// 0). The algorithm may assume the preference's min alignments for A, B, C and D, and for the bias the
// alignment of the bias pointer set now (a null one: 256 bytes), as NVIDIA documents. Returns
//   NOT_INITIALIZED  a bad handle;
//   INVALID_VALUE    requestedAlgoCount <= 0, a null or dead descriptor/layout/preference/output, or a
//                    problem in conflict (shapes that do not chain, C's type or shape not D's, an ld below
//                    max(1, rows) -- C may have ld 0 -- or an op other than N/T/C);
//   NOT_SUPPORTED    (*returnAlgoCount = 0) no algorithm: a type combination, compute or scale type,
//                    bias type or epilogue outside the supported set, a search mode other than 0, or a
//                    min alignment that is not a positive multiple of its matrix's element size.
cublasStatus_t cublasLtMatmulAlgoGetHeuristic(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t operationDesc,
                                              cublasLtMatrixLayout_t Adesc, cublasLtMatrixLayout_t Bdesc,
                                              cublasLtMatrixLayout_t Cdesc, cublasLtMatrixLayout_t Ddesc,
                                              cublasLtMatmulPreference_t preference, int requestedAlgoCount,
                                              cublasLtMatmulHeuristicResult_t heuristicResultsArray[],
                                              int* returnAlgoCount);

// Queues D = epilogue(alpha * op(A) * op(B) + beta * C) on `stream` (see the top of this file). alpha and
// beta are host pointers to floats, read now. algo comes from the heuristic for the same types and
// epilogue (null: the heuristic with default preferences, i.e. 256-byte alignments). C may be null when
// beta == 0; Cdesc may be null (then it is Ddesc); C with ld 0 gives every column of D C's first column
// (the documented broadcast). Returns the heuristic's statuses for the same conditions, and also
//   INVALID_VALUE    alpha or beta null; an algo not made by the heuristic, or for other types or
//                    epilogue; BIAS with a null bias pointer; C == D with C's layout not D's;
//                    workspaceSizeInBytes > 0 with a workspace that is null, not 256-byte aligned or not
//                    that many bytes of device memory; or a pointer the work would use that is less
//                    aligned than the algo may assume (see the heuristic; at least its element) or whose
//                    bytes, as sizes and ld say, are not all device memory (A and B unless alpha == 0 or
//                    k == 0, C unless beta == 0, D, the bias): these print the reason to stderr and catch
//                    a wrong size, ld or offset at the call site;
//   EXECUTION_FAILED the work could not be queued (sticky device error, destroyed stream).
cublasStatus_t cublasLtMatmul(cublasLtHandle_t lightHandle, cublasLtMatmulDesc_t computeDesc, const void* alpha,
                              const void* A, cublasLtMatrixLayout_t Adesc, const void* B, cublasLtMatrixLayout_t Bdesc,
                              const void* beta, const void* C, cublasLtMatrixLayout_t Cdesc, void* D,
                              cublasLtMatrixLayout_t Ddesc, const cublasLtMatmulAlgo_t* algo, void* workspace,
                              size_t workspaceSizeInBytes, cudaStream_t stream);

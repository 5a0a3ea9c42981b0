// The emulated cuBLAS/cuBLASLt's core, shared by blas_lt.cpp (cuBLASLt) and blas.cpp (cuBLAS): the GEMM
// itself (pure: no streams, no checks; tests call it directly), the argument checks both APIs make, the
// status strings and the registry of live handles and descriptors. Private to emu/src.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime.h>
#include <library_types.h>

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <optional>
#include <unordered_set>

namespace pd2bw_emu::blas {

// Bytes per element of `type`: 4 for CUDA_R_32F, 2 for CUDA_R_16BF, 0 for every type the emulation does
// not compute with.
size_t element_bytes(cudaDataType_t type);

// Whether the emulation computes A and B of type `ab` into C/D of type `cd` (A and B of one type): 32F
// into 32F, 16BF into 16BF or 32F.
bool supported_types(cudaDataType_t ab, cudaDataType_t cd);

// Whether compute type and scale (alpha/beta) type are ones the emulation implements: 32F (or
// 32F_PEDANTIC, the same here) with float scalars.
bool supported_compute(cublasComputeType_t compute, cudaDataType_t scale);

// The bytes a column-major rows x cols matrix with leading dimension ld spans from its first element,
// ((cols - 1) * ld + rows) * element, or 0 when rows or cols is 0; nullopt when that overflows int64.
std::optional<uint64_t> span_bytes(uint64_t rows, uint64_t cols, uint64_t ld, size_t element);

// A matrix in device memory: element (r, c) is at data[r + c * ld], of `type`.
struct Operand {
  const void* data = nullptr;
  cudaDataType_t type = CUDA_R_32F;
  int64_t ld = 0;
};

// One GEMM, every argument already checked: D = alpha * op(A) * op(B) + beta * C (+ bias[i] on row i).
// op(A) is m x k (A is k x m when trans_a), op(B) k x n (B is n x k when trans_b); C and D are m x n.
// c.data may be null when beta == 0; bias is null (no epilogue) or m elements of bias_type.
struct Gemm {
  int64_t m = 0, n = 0, k = 0;
  bool trans_a = false, trans_b = false;
  float alpha = 1.0f, beta = 0.0f;
  Operand a, b, c;
  void* d = nullptr;
  cudaDataType_t d_type = CUDA_R_32F;
  int64_t ldd = 0;
  const void* bias = nullptr;
  cudaDataType_t bias_type = CUDA_R_32F;
};

// Computes g on the calling thread with the arithmetic cublasLt.h fixes: per element of D, products
// accumulated by fma in float over increasing k, then alpha * acc, then fma(beta, C, .), then + bias, then
// one rounding to D's type. Reads A and B only when alpha != 0 and k > 0, C only when beta != 0; writes
// exactly the m x n elements of D (padding rows between m and ldd are untouched).
void compute(const Gemm& g);

// Checks that `bytes` bytes from p (none: passes) are aligned to `align` bytes (a power of two) and are
// all device memory (pd2bw_emu::device_accessible). On failure prints "pd2bw-emu: <api>: <what> ..." with
// the reason to stderr and returns false.
bool check_span(const char* api, const char* what, const void* p, uint64_t bytes, uint64_t align);

// check_span over the bytes a rows x cols matrix of `type` (one the emulation computes with) with
// leading dimension ld spans from p (span_bytes).
bool check_matrix(const char* api, const char* what, const void* p, uint64_t rows, uint64_t cols, uint64_t ld,
                  cudaDataType_t type, uint64_t align);

// Queues compute(g) on `stream` (pd2bw_emu::enqueue). SUCCESS, or EXECUTION_FAILED when the stream
// refuses work (sticky device error, destroyed stream; the CUDA error stays for cudaGetLastError).
cublasStatus_t queue(cudaStream_t stream, const Gemm& g);

// The largest power of two dividing both `value` and 256, i.e. the alignment a promise or an address of
// `value` guarantees, capped at 256 bytes; 256 for 0.
uint64_t alignment_of(uint64_t value);

// NVIDIA's enumerator name, and a one-line description, of a status.
const char* status_name(cublasStatus_t status);
const char* status_string(cublasStatus_t status);

// The set of live objects of one kind (handles, descriptors), so that a destroyed or made-up one is
// refused instead of used. Thread-safe.
class Registry {
 public:
  void add(const void* p);
  bool remove(const void* p);  // false when p was not live
  bool live(const void* p) const;

 private:
  mutable std::mutex mu_;
  std::unordered_set<const void*> live_;
};

}  // namespace pd2bw_emu::blas

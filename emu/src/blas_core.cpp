// The emulated cuBLAS/cuBLASLt's core: the GEMM, the argument checks, the status strings and the
// registry of live objects (see blas_core.hpp).
#include "blas_core.hpp"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "pd2bw_emu/stream.hpp"

static_assert(sizeof(size_t) == sizeof(uint64_t), "span_bytes keeps byte counts within int64, which size_t holds");

namespace pd2bw_emu::blas {

size_t element_bytes(cudaDataType_t type) {
  switch (type) {
    case CUDA_R_32F:
      return 4;
    case CUDA_R_16BF:
      return 2;
    default:
      return 0;
  }
}

bool supported_types(cudaDataType_t ab, cudaDataType_t cd) {
  if (ab == CUDA_R_32F) return cd == CUDA_R_32F;
  if (ab == CUDA_R_16BF) return cd == CUDA_R_16BF || cd == CUDA_R_32F;
  return false;
}

bool supported_compute(cublasComputeType_t compute, cudaDataType_t scale) {
  return (compute == CUBLAS_COMPUTE_32F || compute == CUBLAS_COMPUTE_32F_PEDANTIC) && scale == CUDA_R_32F;
}

std::optional<uint64_t> span_bytes(uint64_t rows, uint64_t cols, uint64_t ld, size_t element) {
  if (rows == 0 || cols == 0) return uint64_t{0};
  uint64_t elements = 0, bytes = 0;
  if (__builtin_mul_overflow(cols - 1, ld, &elements) || __builtin_add_overflow(elements, rows, &elements) ||
      __builtin_mul_overflow(elements, static_cast<uint64_t>(element), &bytes) ||
      bytes > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
    return std::nullopt;
  return bytes;
}

namespace {

// Element `index` of `data` (of `type`, one the emulation computes with), widened exactly to float.
inline float load(const void* data, cudaDataType_t type, size_t index) {
  if (type == CUDA_R_16BF) return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[index]);
  return static_cast<const float*>(data)[index];
}

inline void store(void* data, cudaDataType_t type, size_t index, float value) {
  if (type == CUDA_R_16BF)
    static_cast<__nv_bfloat16*>(data)[index] = __float2bfloat16_rn(value);
  else
    static_cast<float*>(data)[index] = value;
}

// Widens x into out, outer x inner floats with out[o * inner + q] = X(o, q) when `rows_outer`, else
// X(q, o), where X(r, c) = x.data[r + c * ld]. Reads are sequential in memory in either case.
std::vector<float> pack(const Operand& x, bool rows_outer, int64_t outer, int64_t inner) {
  std::vector<float> out(static_cast<size_t>(outer) * static_cast<size_t>(inner));
  const auto ld = static_cast<size_t>(x.ld);
  const auto no = static_cast<size_t>(outer), ni = static_cast<size_t>(inner);
  if (rows_outer) {
    for (size_t q = 0; q < ni; ++q)
      for (size_t o = 0; o < no; ++o) out[o * ni + q] = load(x.data, x.type, o + q * ld);
  } else {
    for (size_t o = 0; o < no; ++o)
      for (size_t q = 0; q < ni; ++q) out[o * ni + q] = load(x.data, x.type, q + o * ld);
  }
  return out;
}

}  // namespace

void compute(const Gemm& g) {
  if (g.m <= 0 || g.n <= 0) return;
  const auto m = static_cast<size_t>(g.m), n = static_cast<size_t>(g.n), k = static_cast<size_t>(g.k);
  const bool product = g.alpha != 0.0f && g.k > 0;
  // op(A) row i as pa[i * k ...], op(B) column j as pb[j * k ...]: both contiguous along k.
  std::vector<float> pa, pb;
  if (product) {
    pa = pack(g.a, !g.trans_a, g.m, g.k);  // op(A)(i, p) = A(i, p), or A(p, i) when transposed
    pb = pack(g.b, g.trans_b, g.n, g.k);   // op(B)(p, j) = B(p, j), or B(j, p) when transposed
  }
  std::vector<float> bias;
  if (g.bias != nullptr) {
    bias.resize(m);
    for (size_t i = 0; i < m; ++i) bias[i] = load(g.bias, g.bias_type, i);
  }
  const auto ldc = static_cast<size_t>(g.c.ld), ldd = static_cast<size_t>(g.ldd);
  for (size_t j = 0; j < n; ++j) {
    for (size_t i = 0; i < m; ++i) {
      float t = 0.0f;
      if (product) {
        const float* ra = pa.data() + i * k;
        const float* rb = pb.data() + j * k;
        float acc = 0.0f;
        for (size_t p = 0; p < k; ++p) acc = std::fma(ra[p], rb[p], acc);
        const volatile float scaled = g.alpha * acc;  // rounded here: never fused with what follows
        t = scaled;
      }
      if (g.beta != 0.0f) t = std::fma(g.beta, load(g.c.data, g.c.type, i + j * ldc), t);
      if (g.bias != nullptr) t = t + bias[i];
      store(g.d, g.d_type, i + j * ldd, t);
    }
  }
}

bool check_span(const char* api, const char* what, const void* p, uint64_t bytes, uint64_t align) {
  if (bytes == 0) return true;
  const char* why = nullptr;
  if (!pd2bw_emu::device_accessible(p, static_cast<size_t>(bytes)))
    why = "is not device memory over all the bytes it spans";
  else if (reinterpret_cast<uintptr_t>(p) % align != 0)
    why = "is less aligned than promised";
  if (why == nullptr) return true;
  std::fprintf(stderr, "pd2bw-emu: %s: %s (%llu bytes from %p, alignment %llu) %s\n", api, what,
               static_cast<unsigned long long>(bytes), p, static_cast<unsigned long long>(align), why);
  return false;
}

bool check_matrix(const char* api, const char* what, const void* p, uint64_t rows, uint64_t cols, uint64_t ld,
                  cudaDataType_t type, uint64_t align) {
  const std::optional<uint64_t> bytes = span_bytes(rows, cols, ld, element_bytes(type));
  if (!bytes || element_bytes(type) == 0) {
    std::fprintf(stderr, "pd2bw-emu: %s: %s (%llu x %llu, ld %llu) has no size the emulation can address\n", api, what,
                 static_cast<unsigned long long>(rows), static_cast<unsigned long long>(cols),
                 static_cast<unsigned long long>(ld));
    return false;
  }
  return check_span(api, what, p, *bytes, align);
}

cublasStatus_t queue(cudaStream_t stream, const Gemm& g) {
  const cudaError_t rc = pd2bw_emu::enqueue(stream, [g] {
    compute(g);
    return cudaSuccess;
  });
  return rc == cudaSuccess ? CUBLAS_STATUS_SUCCESS : CUBLAS_STATUS_EXECUTION_FAILED;
}

uint64_t alignment_of(uint64_t value) {
  const uint64_t low = value & (~value + 1);  // the lowest set bit
  return (value == 0 || low > 256) ? 256 : low;
}

const char* status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}

const char* status_string(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "the handle is not initialized";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "a resource allocation failed";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an invalid value was passed (null, out of range or in conflict)";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "the device lacks a feature the operation needs";
    case CUBLAS_STATUS_MAPPING_ERROR:
      return "accessing device memory failed";
    case CUBLAS_STATUS_EXECUTION_FAILED:
      return "the operation failed to run on the device";
    case CUBLAS_STATUS_INTERNAL_ERROR:
      return "an internal operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "the operation or configuration is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR:
      return "license error";
  }
  return "unknown status";
}

void Registry::add(const void* p) {
  std::lock_guard lock(mu_);
  live_.insert(p);
}

bool Registry::remove(const void* p) {
  std::lock_guard lock(mu_);
  return live_.erase(p) == 1;
}

bool Registry::live(const void* p) const {
  std::lock_guard lock(mu_);
  return p != nullptr && live_.count(p) == 1;
}

}  // namespace pd2bw_emu::blas

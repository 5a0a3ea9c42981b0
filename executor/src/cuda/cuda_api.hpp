// Private helpers of the CUDA backend: CUDA errors as pd2bw::Error, move-only owners of CUDA
// resources, launch sizes, and the storage <-> float conversions every kernel uses (T is float or
// __nv_bfloat16; arithmetic is always fp32). No fmt here: nvcc cannot compile fmt's C++20
// format-string checks, so messages are built with std::string.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <utility>

#include "pd2bw/error.hpp"

namespace pd2bw::executor::cuda {

using bf16_t = __nv_bfloat16;

// ---- the seams of the emulated device (emu/; the cuda-emu preset compiles this backend as host C++) ---
// Kernel<<<grid, block, shared_bytes, stream>>>(args...); the caller checks the launch (check_launch).
template <auto Kernel, typename... A>
void launch(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, A&&... args) {
#if defined(PD2BW_CUDA_EMULATED)
  (void)::pd2bw_emu::launch<Kernel>(grid, block, shared_bytes, stream, std::forward<A>(args)...);
#else
  Kernel<<<grid, block, shared_bytes, stream>>>(std::forward<A>(args)...);
#endif
}

// A static __shared__ array T name[n] of the block (ALIGNED: with __align__(a)).
#if defined(PD2BW_CUDA_EMULATED)
#define PD2BW_SHARED_ARRAY_ALIGNED(T, name, n, a) \
  static const char name##_site = 0;              \
  T(&name)[n] = *static_cast<T(*)[n]>(::pd2bw_emu::shared_array(&name##_site, sizeof(T[n]), a))
#define PD2BW_SHARED_ARRAY(T, name, n) PD2BW_SHARED_ARRAY_ALIGNED(T, name, n, alignof(T))
#else
#define PD2BW_SHARED_ARRAY_ALIGNED(T, name, n, a) __shared__ __align__(a) T name[n]
#define PD2BW_SHARED_ARRAY(T, name, n) __shared__ T name[n]
#endif

// Throws Error("CUDA error in <what>: <name>: <description>").
[[noreturn]] void throw_cuda(cudaError_t status, const std::string& what);
inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) throw_cuda(status, what);
}
// After a kernel launch: a bad launch configuration, or an error an earlier asynchronous op left.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

// Throws UsageError("cuda backend: <op>: <what>").
[[noreturn]] void throw_usage(const char* op, const std::string& what);

// Blocks for a grid-stride loop over n > 0 elements, at most kMaxBlocks (the loop covers the rest).
inline constexpr int64_t kMaxBlocks = int64_t{1} << 16;
inline unsigned grid_for(int64_t n, int threads) {
  const int64_t blocks = (n + threads - 1) / threads;
  return static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks);
}
// ceil(a / b) for a >= 0, b > 0.
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// ---- move-only owners -------------------------------------------------------------------------------
template <typename H, cudaError_t (*Destroy)(H)>
class Handle {
 public:
  Handle() = default;
  explicit Handle(H h) : h_(h) {}
  Handle(Handle&& o) noexcept : h_(std::exchange(o.h_, H{})) {}
  Handle& operator=(Handle&& o) noexcept {
    if (this != &o) {
      reset();
      h_ = std::exchange(o.h_, H{});
    }
    return *this;
  }
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  ~Handle() { reset(); }
  H get() const { return h_; }
  void reset() {
    if (h_ != H{}) (void)Destroy(h_);  // errors while tearing down cannot be reported; the memory is gone
    h_ = H{};
  }

 private:
  H h_{};
};

using StreamHandle = Handle<cudaStream_t, cudaStreamDestroy>;
using EventHandle = Handle<cudaEvent_t, cudaEventDestroy>;
using DeviceMemory = Handle<void*, cudaFree>;
using PinnedMemory = Handle<void*, cudaFreeHost>;

// A stream that does not synchronise with the legacy default stream (stages on one GPU overlap).
inline StreamHandle make_stream() {
  cudaStream_t s = nullptr;
  check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  return StreamHandle(s);
}
// timing: an event cudaEventElapsedTime can read; otherwise a cheaper one for ordering only.
inline EventHandle make_event(bool timing) {
  cudaEvent_t e = nullptr;
  check(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreateWithFlags");
  return EventHandle(e);
}
inline DeviceMemory device_alloc(size_t bytes, const char* what) {
  void* p = nullptr;
  if (bytes > 0) check(cudaMalloc(&p, bytes), what);
  return DeviceMemory(p);
}

// ---- storage <-> float ------------------------------------------------------------------------------
__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(bf16_t x) { return __bfloat162float(x); }
template <typename T>
__device__ __forceinline__ T from_float(float x);
template <>
__device__ __forceinline__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __forceinline__ bf16_t from_float<bf16_t>(float x) {
  return __float2bfloat16_rn(x);
}

// Sum over the 32 lanes of a warp; every lane gets the same bits (each step adds a pair of equal
// partial sums in swapped order, and fp32 addition commutes). All 32 lanes must call it.
__device__ __forceinline__ float warp_sum(float x) {
  for (int offset = 16; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

}  // namespace pd2bw::executor::cuda

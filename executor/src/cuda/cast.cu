// CUDA casts between float, double and bf16 (cpu reference: the conversions of CpuBackend::copy in
// executor/src/cpu/cpu_backend.cpp): round to nearest even, a double rounded to bf16 once.
#include <type_traits>

#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {
namespace {

constexpr int kThreads = 256;

template <typename From, typename To>
__device__ __forceinline__ To convert(From x) {
  if constexpr (std::is_same_v<To, bf16_t> && std::is_same_v<From, double>) {
    return __double2bfloat16(x);  // one rounding of the double, not two through float
  } else if constexpr (std::is_same_v<To, bf16_t>) {
    return __float2bfloat16_rn(static_cast<float>(x));
  } else if constexpr (std::is_same_v<From, bf16_t>) {
    return static_cast<To>(__bfloat162float(x));
  } else {
    return static_cast<To>(x);
  }
}

// src, dst: (n).
template <typename From, typename To>
static __global__ void cast_kernel(const From* src, To* dst, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    dst[i] = convert<From, To>(src[i]);
}

}  // namespace

template <typename From, typename To>
void cast(const From* src, To* dst, int64_t n, cudaStream_t stream) {
  if (n < 0) throw_usage("cast", "negative length " + std::to_string(n));
  if (n == 0) return;
  launch<cast_kernel<From, To>>(grid_for(n, kThreads), kThreads, 0, stream, src, dst, n);
  check_launch("cast_kernel");
}

#define PD2BW_INSTANTIATE(F, T) template void cast<F, T>(const F*, T*, int64_t, cudaStream_t);
PD2BW_INSTANTIATE(float, bf16_t)
PD2BW_INSTANTIATE(float, double)
PD2BW_INSTANTIATE(double, float)
PD2BW_INSTANTIATE(double, bf16_t)
PD2BW_INSTANTIATE(bf16_t, float)
PD2BW_INSTANTIATE(bf16_t, double)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cuda

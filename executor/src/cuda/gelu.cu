// CUDA GELU (cpu reference: executor/src/cpu/gelu.cpp, same formulas in fp32) in its two forms: the tanh
// approximation of GPT-2, y = 0.5 x (1 + tanh(u)) = x / (1 + exp(-2u)) with u = sqrt(2/pi) (x + 0.044715
// x^3), and the exact form of BERT, y = x Phi(x) = 0.5 x (1 + erf(x / sqrt 2)), with dy/dx = Phi(x) +
// x phi(x); and their derivatives.
#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.70710678118654752440f;    // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // 1 / sqrt(2 pi)

// exp(-2u), u = sqrt(2/pi) (x + 0.044715 x^3), with -2u clamped at 88 (so the grad's e s stays finite).
__device__ __forceinline__ float exp_minus_2u(float x) {
  const float u = kSqrt2OverPi * (x + kCubic * x * x * x);
  return expf(fminf(-2.0f * u, 88.0f));
}

// 0.5 (1 + tanh(u)) as the logistic 1 / (1 + exp(-2u)): the same value without 1 + tanh(u)'s
// cancellation where u is very negative (the cpu backend's float form).
__device__ __forceinline__ float gelu_tanh(float x) { return x / (1.0f + exp_minus_2u(x)); }

// s + 2 x s (1 - s) u', with s = 1 / (1 + e), 1 - s = e s and u' = sqrt(2/pi) (1 + 3a x^2).
__device__ __forceinline__ float gelu_tanh_grad(float x) {
  const float e = exp_minus_2u(x);
  const float s = 1.0f / (1.0f + e);
  const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * x * x);
  return s + 2.0f * x * s * (e * s) * du;
}

__device__ __forceinline__ float gelu_erf(float x) { return 0.5f * x * (1.0f + erff(x * kInvSqrt2)); }

__device__ __forceinline__ float gelu_erf_grad(float x) {
  const float cdf = 0.5f * (1.0f + erff(x * kInvSqrt2));
  const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
  return cdf + x * pdf;
}

// x, y: (n); y may alias x (each element is read before it is written, by the same thread).
template <typename T, GeluKind kKind>
static __global__ void gelu_forward_kernel(const T* x, T* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float xi = to_float(x[i]);
    y[i] = from_float<T>(kKind == GeluKind::erf ? gelu_erf(xi) : gelu_tanh(xi));
  }
}

// dy, x, dx: (n); dx may alias dy.
template <typename T, GeluKind kKind>
static __global__ void gelu_backward_kernel(const T* dy, const T* x, T* dx, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float xi = to_float(x[i]);
    const float grad = kKind == GeluKind::erf ? gelu_erf_grad(xi) : gelu_tanh_grad(xi);
    dx[i] = from_float<T>(grad * to_float(dy[i]));
  }
}

}  // namespace

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, GeluKind kind, cudaStream_t stream) {
  if (n < 0) throw_usage("gelu_forward", "negative length");
  if (n == 0) return;
  if (kind == GeluKind::erf)
    launch<gelu_forward_kernel<T, GeluKind::erf>>(grid_for(n, kThreads), kThreads, 0, stream, x, y, n);
  else
    launch<gelu_forward_kernel<T, GeluKind::tanh>>(grid_for(n, kThreads), kThreads, 0, stream, x, y, n);
  check_launch("gelu_forward_kernel");
}

template <typename T>
void gelu_backward(const T* dy, const T* x, T* dx, int64_t n, GeluKind kind, cudaStream_t stream) {
  if (n < 0) throw_usage("gelu_backward", "negative length");
  if (n == 0) return;
  if (kind == GeluKind::erf)
    launch<gelu_backward_kernel<T, GeluKind::erf>>(grid_for(n, kThreads), kThreads, 0, stream, dy, x, dx, n);
  else
    launch<gelu_backward_kernel<T, GeluKind::tanh>>(grid_for(n, kThreads), kThreads, 0, stream, dy, x, dx, n);
  check_launch("gelu_backward_kernel");
}

template void gelu_forward<float>(const float*, float*, int64_t, GeluKind, cudaStream_t);
template void gelu_forward<bf16_t>(const bf16_t*, bf16_t*, int64_t, GeluKind, cudaStream_t);
template void gelu_backward<float>(const float*, const float*, float*, int64_t, GeluKind, cudaStream_t);
template void gelu_backward<bf16_t>(const bf16_t*, const bf16_t*, bf16_t*, int64_t, GeluKind, cudaStream_t);

}  // namespace pd2bw::executor::cuda

// CUDA GELU, tanh approximation as GPT-2 (cpu reference: executor/src/cpu/gelu.cpp, same formula in
// fp32): y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) and its derivative.
#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {
namespace {

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.79788456080286535588f;
constexpr float kCubic = 0.044715f;

// x, y: (n); y may alias x (each element is read before it is written, by the same thread).
template <typename T>
static __global__ void gelu_forward_kernel(const T* x, T* y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float xi = to_float(x[i]);
    const float u = kSqrt2OverPi * (xi + kCubic * xi * xi * xi);
    y[i] = from_float<T>(0.5f * xi * (1.0f + tanhf(u)));
  }
}

// dy, x, dx: (n); dx may alias dy.
template <typename T>
static __global__ void gelu_backward_kernel(const T* dy, const T* x, T* dx, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float xi = to_float(x[i]);
    const float th = tanhf(kSqrt2OverPi * (xi + kCubic * xi * xi * xi));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kCubic * xi * xi);
    const float grad = 0.5f * (1.0f + th) + 0.5f * xi * (1.0f - th * th) * du;
    dx[i] = from_float<T>(grad * to_float(dy[i]));
  }
}

}  // namespace

template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, cudaStream_t stream) {
  if (n < 0) throw_usage("gelu_forward", "negative length");
  if (n == 0) return;
  launch<gelu_forward_kernel<T>>(grid_for(n, kThreads), kThreads, 0, stream, x, y, n);
  check_launch("gelu_forward_kernel");
}

template <typename T>
void gelu_backward(const T* dy, const T* x, T* dx, int64_t n, cudaStream_t stream) {
  if (n < 0) throw_usage("gelu_backward", "negative length");
  if (n == 0) return;
  launch<gelu_backward_kernel<T>>(grid_for(n, kThreads), kThreads, 0, stream, dy, x, dx, n);
  check_launch("gelu_backward_kernel");
}

template void gelu_forward<float>(const float*, float*, int64_t, cudaStream_t);
template void gelu_forward<bf16_t>(const bf16_t*, bf16_t*, int64_t, cudaStream_t);
template void gelu_backward<float>(const float*, const float*, float*, int64_t, cudaStream_t);
template void gelu_backward<bf16_t>(const bf16_t*, const bf16_t*, bf16_t*, int64_t, cudaStream_t);

}  // namespace pd2bw::executor::cuda

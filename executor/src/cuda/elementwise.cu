// CUDA elementwise helpers (cpu reference: executor/src/cpu/elementwise.cpp): residual adds, gradient
// sums, the bias added after a GEMM that could not take it as an epilogue, and a vector of ones.
#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {
namespace {

constexpr int kThreads = 256;

// a, b, out: (n).
template <typename T>
static __global__ void add_kernel(const T* a, const T* b, T* out, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    out[i] = from_float<T>(to_float(a[i]) + to_float(b[i]));
}

// acc, x: (n).
template <typename T>
static __global__ void accumulate_kernel(T* acc, const T* x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    acc[i] = from_float<T>(to_float(acc[i]) + to_float(x[i]));
}

// y: (N, Out) as rows * out elements, bias: (Out).
template <typename T>
static __global__ void add_bias_kernel(T* y, const T* bias, int64_t total, int64_t out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    y[i] = from_float<T>(to_float(y[i]) + to_float(bias[i % out]));
}

template <typename T>
static __global__ void fill_ones_kernel(T* x, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    x[i] = from_float<T>(1.0f);
}

void check_n(const char* op, int64_t n) {
  if (n < 0) throw_usage(op, "negative length " + std::to_string(n));
}

}  // namespace

template <typename T>
void add(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream) {
  check_n("add", n);
  if (n == 0) return;
  launch<add_kernel<T>>(grid_for(n, kThreads), kThreads, 0, stream, a, b, out, n);
  check_launch("add_kernel");
}

template <typename T>
void accumulate(T* acc, const T* x, int64_t n, cudaStream_t stream) {
  check_n("accumulate", n);
  if (n == 0) return;
  launch<accumulate_kernel<T>>(grid_for(n, kThreads), kThreads, 0, stream, acc, x, n);
  check_launch("accumulate_kernel");
}

template <typename T>
void add_bias(T* y, const T* bias, int64_t n, int64_t out, cudaStream_t stream) {
  if (n < 0 || out <= 0) throw_usage("add_bias", "bad shape");
  if (n == 0) return;
  launch<add_bias_kernel<T>>(grid_for(n * out, kThreads), kThreads, 0, stream, y, bias, n * out, out);
  check_launch("add_bias_kernel");
}

template <typename T>
void fill_ones(T* x, int64_t n, cudaStream_t stream) {
  check_n("fill_ones", n);
  if (n == 0) return;
  launch<fill_ones_kernel<T>>(grid_for(n, kThreads), kThreads, 0, stream, x, n);
  check_launch("fill_ones_kernel");
}

#define PD2BW_INSTANTIATE(T)                                                        \
  template void add<T>(const T*, const T*, T*, int64_t, cudaStream_t);              \
  template void accumulate<T>(T*, const T*, int64_t, cudaStream_t);                 \
  template void add_bias<T>(T*, const T*, int64_t, int64_t, cudaStream_t);          \
  template void fill_ones<T>(T*, int64_t, cudaStream_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(bf16_t)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cuda

// CUDA sum of squares of an fp32 buffer, in double (cpu reference: sum_of_squares in
// executor/src/optimizer.cpp): per-block partial sums over a grid whose size depends only on n, then one
// block adds them in block order, so the result repeats bit for bit.
#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {
namespace {

constexpr int kThreads = 256;     // a power of two
constexpr int64_t kBlocks = 1024;  // partial sums at most

__device__ double block_sum(double* shared, double mine) {
  shared[threadIdx.x] = mine;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) shared[threadIdx.x] += shared[threadIdx.x + half];
    __syncthreads();
  }
  return shared[0];
}

// x: (n); partial: (gridDim.x).
static __global__ void __launch_bounds__(kThreads) squares_partial_kernel(const float* x, int64_t n, double* partial) {
  PD2BW_SHARED_ARRAY(double, shared, kThreads);
  double s = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < n; i += stride) {
    const double xi = static_cast<double>(x[i]);
    s += xi * xi;
  }
  s = block_sum(shared, s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// out[0] = the sum of partial: (count).
static __global__ void __launch_bounds__(kThreads) squares_final_kernel(const double* partial, int64_t count, double* out) {
  PD2BW_SHARED_ARRAY(double, shared, kThreads);
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < count; i += kThreads) s += partial[i];
  s = block_sum(shared, s);
  if (threadIdx.x == 0) out[0] = s;
}

int64_t blocks_for(int64_t n) {
  const int64_t b = ceil_div(n, kThreads * 4);
  return b < 1 ? 1 : (b < kBlocks ? b : kBlocks);
}

}  // namespace

int64_t sum_of_squares_scratch(int64_t n) { return blocks_for(n); }

void sum_of_squares(const float* x, int64_t n, double* scratch, double* out, cudaStream_t stream) {
  if (n < 0) throw_usage("sum_of_squares", "negative length");
  const int64_t blocks = blocks_for(n);
  launch<squares_partial_kernel>(static_cast<unsigned>(blocks), kThreads, 0, stream, x, n, scratch);
  check_launch("squares_partial_kernel");
  launch<squares_final_kernel>(1, kThreads, 0, stream, scratch, blocks, out);
  check_launch("squares_final_kernel");
}

}  // namespace pd2bw::executor::cuda

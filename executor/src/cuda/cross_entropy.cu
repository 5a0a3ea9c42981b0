// CUDA softmax cross-entropy (cpu reference: executor/src/cpu/cross_entropy.cpp): one block per row for
// the log-sum-exp and the row's loss, one block for their mean over the K counted rows (in double, row
// order; rows whose target is kIgnoredTarget count for nothing), and an elementwise gradient that may
// overwrite the logits in place, so the head's backward needs no second (N, V) buffer. The backward
// first counts K into a device scalar with one block (integer sums: exact in any order).
#include <climits>
#include <cmath>

#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {
namespace {

constexpr int kThreads = 256;  // a power of two: the tree reductions halve it

// The block's values in shared[0, kThreads) reduced to shared[0] by a fixed tree (max or sum).
template <typename R, bool kMax>
__device__ R block_reduce(R* shared, R mine) {
  shared[threadIdx.x] = mine;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      const R other = shared[threadIdx.x + half];
      shared[threadIdx.x] = kMax ? (other > shared[threadIdx.x] ? other : shared[threadIdx.x]) : shared[threadIdx.x] + other;
    }
    __syncthreads();
  }
  const R result = shared[0];
  __syncthreads();  // shared may be reused after
  return result;
}

// Row `blockIdx.x` of logits: (N, V). lse: (N); row_loss: (N) = lse - logit[target], 0 for an ignored or
// a bad target.
template <typename T>
static __global__ void __launch_bounds__(kThreads)
    cross_entropy_row_kernel(const T* logits, const int32_t* targets, float* lse, double* row_loss, int64_t v,
                             unsigned long long* bad) {
  PD2BW_SHARED_ARRAY(float, shared, kThreads);
  const int64_t row = blockIdx.x;
  const T* x = logits + row * v;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < v; j += kThreads) mx = fmaxf(mx, to_float(x[j]));
  mx = block_reduce<float, true>(shared, mx);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < v; j += kThreads) sum += expf(to_float(x[j]) - mx);
  sum = block_reduce<float, false>(shared, sum);
  if (threadIdx.x != 0) return;
  const float l = mx + logf(sum);
  lse[row] = l;
  const int32_t tgt = targets[row];
  if (tgt == kIgnoredTarget) {
    row_loss[row] = 0.0;
    return;
  }
  if (tgt < 0 || tgt >= v) {
    atomicMin(bad, (static_cast<unsigned long long>(row) << 32) | static_cast<uint32_t>(tgt));
    row_loss[row] = 0.0;
    return;
  }
  row_loss[row] = static_cast<double>(l) - static_cast<double>(to_float(x[tgt]));
}

// The number of targets: (n) that are not kIgnoredTarget, on every thread of the block (the block's
// kThreads threads all call it; shared: kThreads ints).
__device__ int counted_rows(int* shared, const int32_t* targets, int64_t n) {
  int k = 0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) k += targets[i] != kIgnoredTarget ? 1 : 0;
  return block_reduce<int, false>(shared, k);
}

// loss[0] = the mean of row_loss: (n) over the rows whose target is counted, summed by one block in a
// fixed order; 0 when no row counts.
static __global__ void __launch_bounds__(kThreads)
    mean_kernel(const double* row_loss, const int32_t* targets, double* loss, int64_t n) {
  PD2BW_SHARED_ARRAY(double, shared, kThreads);
  PD2BW_SHARED_ARRAY(int, counts, kThreads);
  double s = 0.0;
  for (int64_t i = threadIdx.x; i < n; i += kThreads) s += row_loss[i];
  s = block_reduce<double, false>(shared, s);
  const int k = counted_rows(counts, targets, n);
  if (threadIdx.x == 0) loss[0] = k == 0 ? 0.0 : s / static_cast<double>(k);
}

// count[0] = the number of counted targets: (n), by one block.
static __global__ void __launch_bounds__(kThreads) count_kernel(const int32_t* targets, int32_t* count, int64_t n) {
  PD2BW_SHARED_ARRAY(int, counts, kThreads);
  const int k = counted_rows(counts, targets, n);
  if (threadIdx.x == 0) count[0] = k;
}

// dlogits[i][j] = (exp(logit - lse[i]) - [j == target]) * loss_scale / K, 0 on an ignored row; may
// overwrite logits (each element is read, then written, by the same thread). count: (1) = K.
template <typename T>
static __global__ void cross_entropy_backward_kernel(const T* logits, const int32_t* targets, const float* lse,
                                                     T* dlogits, int64_t n, int64_t v, double loss_scale,
                                                     const int32_t* count) {
  const int k = *count;
  const float scale = k == 0 ? 0.0f : static_cast<float>(loss_scale / static_cast<double>(k));
  const int64_t total = n * v;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t row = e / v, j = e % v;
    const int32_t tgt = targets[row];
    if (tgt == kIgnoredTarget) {
      dlogits[e] = from_float<T>(0.0f);
      continue;
    }
    const float p = expf(to_float(logits[e]) - lse[row]);
    dlogits[e] = from_float<T>((p - (j == tgt ? 1.0f : 0.0f)) * scale);
  }
}

}  // namespace

int64_t cross_entropy_scratch(int64_t n) { return n; }

template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, float* lse, double* loss, int64_t n, int64_t v,
                           double* scratch, unsigned long long* bad, cudaStream_t stream) {
  if (n <= 0 || v <= 0 || n > INT_MAX || v > INT_MAX) throw_usage("cross_entropy_forward", "bad shape");
  launch<cross_entropy_row_kernel<T>>(static_cast<unsigned>(n), kThreads, 0, stream,
         logits, targets, lse, scratch, v, bad);
  check_launch("cross_entropy_row_kernel");
  launch<mean_kernel>(1, kThreads, 0, stream, scratch, targets, loss, n);
  check_launch("mean_kernel");
}

template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const float* lse, T* dlogits, int64_t n, int64_t v,
                            double loss_scale, int32_t* count, cudaStream_t stream) {
  if (n <= 0 || v <= 0 || n > INT_MAX) throw_usage("cross_entropy_backward", "bad shape");
  launch<count_kernel>(1, kThreads, 0, stream, targets, count, n);
  check_launch("count_kernel");
  launch<cross_entropy_backward_kernel<T>>(grid_for(n * v, kThreads), kThreads, 0, stream, logits, targets, lse,
                                           dlogits, n, v, loss_scale, count);
  check_launch("cross_entropy_backward_kernel");
}

#define PD2BW_INSTANTIATE(T)                                                                                   \
  template void cross_entropy_forward<T>(const T*, const int32_t*, float*, double*, int64_t, int64_t, double*, \
                                         unsigned long long*, cudaStream_t);                                    \
  template void cross_entropy_backward<T>(const T*, const int32_t*, const float*, T*, int64_t, int64_t, double, \
                                          int32_t*, cudaStream_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(bf16_t)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cuda

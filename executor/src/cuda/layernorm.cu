// CUDA layer norm over the last dimension with gamma/beta (cpu reference: executor/src/cpu/layernorm.cpp):
// one warp per row for the statistics, y and dx; dgamma and dbeta as per-chunk column sums added in
// chunk order, so every sum has a fixed order.
#include <climits>

#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;   // rows per block of the row kernels
constexpr int kRowThreads = 32 * kWarpsPerBlock;
constexpr int kRowsPerChunk = 64;   // rows of one partial column sum
constexpr int kColThreads = 256;
constexpr float kEps = 1e-5f;       // as kLayerNormEps of the cpu ops

// One warp per row; the warp leaves together (row is the same on its lanes).
// x, y: (N, C), gamma, beta: (C), mean, rstd: (N).
template <typename T>
static __global__ void layernorm_forward_kernel(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd,
                                                int64_t n, int c) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= n) return;
  const T* xr = x + row * c;
  float sum = 0.0f;
  for (int j = lane; j < c; j += 32) sum += to_float(xr[j]);
  const float mu = warp_sum(sum) / static_cast<float>(c);
  float sq = 0.0f;
  for (int j = lane; j < c; j += 32) {
    const float d = to_float(xr[j]) - mu;
    sq += d * d;
  }
  const float rs = 1.0f / sqrtf(warp_sum(sq) / static_cast<float>(c) + kEps);
  if (lane == 0) {
    mean[row] = mu;
    rstd[row] = rs;
  }
  T* yr = y + row * c;
  for (int j = lane; j < c; j += 32)
    yr[j] = from_float<T>((to_float(xr[j]) - mu) * rs * to_float(gamma[j]) + to_float(beta[j]));
}

// dx = rstd (dxhat - mean(dxhat) - xhat mean(dxhat xhat)), dxhat = dy gamma; one warp per row.
// dy, x, dx: (N, C), gamma: (C), mean, rstd: (N).
template <typename T>
static __global__ void layernorm_backward_dx_kernel(const T* dy, const T* x, const T* gamma, const float* mean,
                                                    const float* rstd, T* dx, int64_t n, int c) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (row >= n) return;
  const T* xr = x + row * c;
  const T* dyr = dy + row * c;
  const float mu = mean[row], rs = rstd[row];
  float s1 = 0.0f, s2 = 0.0f;
  for (int j = lane; j < c; j += 32) {
    const float xhat = (to_float(xr[j]) - mu) * rs;
    const float dxhat = to_float(dyr[j]) * to_float(gamma[j]);
    s1 += dxhat;
    s2 += dxhat * xhat;
  }
  const float m1 = warp_sum(s1) / static_cast<float>(c);
  const float m2 = warp_sum(s2) / static_cast<float>(c);
  T* dxr = dx + row * c;
  for (int j = lane; j < c; j += 32) {
    const float xhat = (to_float(xr[j]) - mu) * rs;
    const float dxhat = to_float(dyr[j]) * to_float(gamma[j]);
    dxr[j] = from_float<T>(rs * (dxhat - m1 - xhat * m2));
  }
}

// Block k sums rows [k * kRowsPerChunk, ...) of each column: partial (chunks, 2, C) holds [k][0][j] =
// sum of dy * xhat and [k][1][j] = sum of dy, rows in order.
template <typename T>
static __global__ void layernorm_param_partial_kernel(const T* dy, const T* x, const float* mean, const float* rstd,
                                                      float* partial, int64_t n, int c) {
  const int64_t chunk = blockIdx.x;
  const int64_t r0 = chunk * kRowsPerChunk;
  const int64_t r1 = r0 + kRowsPerChunk < n ? r0 + kRowsPerChunk : n;
  for (int j = static_cast<int>(threadIdx.x); j < c; j += static_cast<int>(blockDim.x)) {
    float g = 0.0f, b = 0.0f;
    for (int64_t r = r0; r < r1; ++r) {
      const float d = to_float(dy[r * c + j]);
      g += d * ((to_float(x[r * c + j]) - mean[r]) * rstd[r]);
      b += d;
    }
    partial[(chunk * 2) * c + j] = g;
    partial[(chunk * 2 + 1) * c + j] = b;
  }
}

// One thread per column: dgamma[j] += the chunks' sums in chunk order (dbeta likewise).
static __global__ void layernorm_param_reduce_kernel(const float* partial, float* dgamma, float* dbeta, int64_t chunks,
                                                     int c) {
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (j >= c) return;
  float g = 0.0f, b = 0.0f;
  for (int64_t k = 0; k < chunks; ++k) {
    g += partial[(k * 2) * c + j];
    b += partial[(k * 2 + 1) * c + j];
  }
  dgamma[j] += g;
  dbeta[j] += b;
}

void check_shape(const char* op, int64_t n, int64_t c) {
  if (n < 0 || c <= 0 || c > INT_MAX) throw_usage(op, "bad shape (" + std::to_string(n) + ", " + std::to_string(c) + ")");
}

}  // namespace

int64_t layernorm_backward_scratch(int64_t n, int64_t c) { return ceil_div(n, kRowsPerChunk) * 2 * c; }

template <typename T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd, int64_t n, int64_t c,
                       cudaStream_t stream) {
  check_shape("layernorm_forward", n, c);
  if (n == 0) return;
  const auto blocks = static_cast<unsigned>(ceil_div(n, kWarpsPerBlock));
  launch<layernorm_forward_kernel<T>>(blocks, kRowThreads, 0, stream,
         x, gamma, beta, y, mean, rstd, n, static_cast<int>(c));
  check_launch("layernorm_forward_kernel");
}

template <typename T>
void layernorm_backward(const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd, T* dx,
                        float* dgamma, float* dbeta, int64_t n, int64_t c, float* scratch, cudaStream_t stream) {
  check_shape("layernorm_backward", n, c);
  if (n == 0) return;
  const int ci = static_cast<int>(c);
  const auto row_blocks = static_cast<unsigned>(ceil_div(n, kWarpsPerBlock));
  if (dx != nullptr) {  // either half may be skipped (a split backward runs them apart)
    launch<layernorm_backward_dx_kernel<T>>(row_blocks, kRowThreads, 0, stream, dy, x, gamma, mean, rstd, dx, n, ci);
    check_launch("layernorm_backward_dx_kernel");
  }
  if (dgamma == nullptr) return;
  const int64_t chunks = ceil_div(n, kRowsPerChunk);
  launch<layernorm_param_partial_kernel<T>>(static_cast<unsigned>(chunks), kColThreads, 0, stream,
         dy, x, mean, rstd, scratch,
                                                                                              n, ci);
  check_launch("layernorm_param_partial_kernel");
  const auto col_blocks = static_cast<unsigned>(ceil_div(c, kColThreads));
  launch<layernorm_param_reduce_kernel>(col_blocks, kColThreads, 0, stream, scratch, dgamma, dbeta, chunks, ci);
  check_launch("layernorm_param_reduce_kernel");
}

#define PD2BW_INSTANTIATE(T)                                                                                  \
  template void layernorm_forward<T>(const T*, const T*, const T*, T*, float*, float*, int64_t, int64_t,      \
                                     cudaStream_t);                                                           \
  template void layernorm_backward<T>(const T*, const T*, const T*, const float*, const float*, T*, float*,   \
                                      float*, int64_t, int64_t, float*, cudaStream_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(bf16_t)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cuda

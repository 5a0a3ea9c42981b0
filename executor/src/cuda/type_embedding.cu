// CUDA token-type (segment) embedding, BERT's (cpu reference: type_embedding_forward / _backward in
// executor/src/cpu/embedding.cpp). The forward adds a table row to each row of out; the backward has no
// atomics: one thread per (type, column) walks the rows in order and adds those of its type, so each
// table entry gets the cpu's sum in the cpu's order. The table is small (R = 2 for BERT), so R x C
// threads are plenty.
#include <climits>

#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {
namespace {

constexpr int kThreads = 256;

// types: (N), table: (R, C), out: (N, C) +=; one thread per element of out.
template <typename T>
static __global__ void type_embedding_forward_kernel(const int32_t* types, const T* table, T* out, int64_t n, int c,
                                                     int64_t r, unsigned long long* bad) {
  const int64_t total = n * c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t i = e / c;
    const int j = static_cast<int>(e % c);
    const int32_t ty = types[i];
    if (ty < 0 || ty >= r) {
      if (j == 0) atomicMin(bad, (static_cast<unsigned long long>(i) << 32) | static_cast<uint32_t>(ty));
      continue;
    }
    out[e] = from_float<T>(to_float(out[e]) + to_float(table[static_cast<int64_t>(ty) * c + j]));
  }
}

// types: (N), dout: (N, C), dtable: (R, C) +=; one thread per element of dtable, adding the rows of its
// type in row order.
template <typename T>
static __global__ void type_embedding_backward_kernel(const int32_t* types, const T* dout, float* dtable, int64_t n,
                                                      int c, int64_t r) {
  const int64_t total = r * c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const auto ty = static_cast<int32_t>(e / c);
    const int j = static_cast<int>(e % c);
    float acc = dtable[e];
    for (int64_t i = 0; i < n; ++i)
      if (types[i] == ty) acc += to_float(dout[i * c + j]);
    dtable[e] = acc;
  }
}

// Whether there is work: false for N = 0; throws UsageError for a bad shape.
bool check_shape(const char* op, int64_t n, int64_t c, int64_t r) {
  if (n < 0 || c <= 0 || r <= 0 || c > INT_MAX || r > INT_MAX || n > INT_MAX)
    throw_usage(op,
                "bad shape (N " + std::to_string(n) + ", C " + std::to_string(c) + ", R " + std::to_string(r) + ")");
  return n > 0;
}

}  // namespace

template <typename T>
void type_embedding_forward(const int32_t* types, const T* table, T* out, int64_t n, int64_t c, int64_t r,
                            unsigned long long* bad, cudaStream_t stream) {
  if (!check_shape("type_embedding_forward", n, c, r)) return;
  launch<type_embedding_forward_kernel<T>>(grid_for(n * c, kThreads), kThreads, 0, stream, types, table, out, n,
                                           static_cast<int>(c), r, bad);
  check_launch("type_embedding_forward_kernel");
}

template <typename T>
void type_embedding_backward(const int32_t* types, const T* dout, float* dtable, int64_t n, int64_t c, int64_t r,
                             cudaStream_t stream) {
  if (!check_shape("type_embedding_backward", n, c, r)) return;
  launch<type_embedding_backward_kernel<T>>(grid_for(r * c, kThreads), kThreads, 0, stream, types, dout, dtable, n,
                                            static_cast<int>(c), r);
  check_launch("type_embedding_backward_kernel");
}

#define PD2BW_INSTANTIATE(T)                                                                       \
  template void type_embedding_forward<T>(const int32_t*, const T*, T*, int64_t, int64_t, int64_t, \
                                          unsigned long long*, cudaStream_t);                      \
  template void type_embedding_backward<T>(const int32_t*, const T*, float*, int64_t, int64_t, int64_t, cudaStream_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(bf16_t)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cuda

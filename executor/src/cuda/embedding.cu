// CUDA token + position embedding (cpu reference: executor/src/cpu/embedding.cpp). The backward has no
// atomics: dwpe sums each position over the batch in order, and dwte sorts the positions by token
// (CUB's stable radix sort, so equal tokens keep their position order) and lets the block at the start
// of each token's run add the run's rows in that order.
#include <cub/cub.cuh>

#include <climits>

#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kRunThreads = 128;

// tokens: (B, T), wte: (V, C), wpe: (>= T, C), out: (B, T, C); one thread per output element.
template <typename T>
static __global__ void embedding_forward_kernel(const int32_t* tokens, const T* wte, const T* wpe, T* out, int64_t n,
                                                int t, int c, int64_t v, unsigned long long* bad) {
  const int64_t total = n * c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const int64_t i = e / c;
    const int j = static_cast<int>(e % c);
    const int32_t tok = tokens[i];
    if (tok < 0 || tok >= v) {
      if (j == 0) atomicMin(bad, (static_cast<unsigned long long>(i) << 32) | static_cast<uint32_t>(tok));
      out[e] = from_float<T>(0.0f);
      continue;
    }
    out[e] = from_float<T>(to_float(wte[static_cast<int64_t>(tok) * c + j]) + to_float(wpe[(i % t) * c + j]));
  }
}

// dwpe[p][j] += sum over the batch, in batch order, of dout[b][p][j]; one thread per (p, j).
template <typename T>
static __global__ void embedding_dwpe_kernel(const T* dout, float* dwpe, int b, int t, int c) {
  const int64_t total = static_cast<int64_t>(t) * c;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    float s = 0.0f;
    for (int bi = 0; bi < b; ++bi) s += to_float(dout[static_cast<int64_t>(bi) * total + e]);
    dwpe[e] += s;
  }
}

// positions: (n) = 0, 1, ..., n - 1.
static __global__ void iota_kernel(uint32_t* positions, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    positions[i] = static_cast<uint32_t>(i);
}

// Block s: when sorted index s starts a run of one token, adds dout's rows of the run (in position
// order) into that token's row of dwte. keys, positions: (n) sorted by token; dout: (n, C); dwte: (V, C).
template <typename T>
static __global__ void embedding_dwte_kernel(const uint32_t* keys, const uint32_t* positions, const T* dout, float* dwte,
                                             int64_t n, int c, int64_t v) {
  const int64_t s = blockIdx.x;
  const uint32_t tok = keys[s];
  if ((s > 0 && keys[s - 1] == tok) || tok >= v) return;  // not a run start, or an id the forward refused
  int64_t end = s + 1;
  while (end < n && keys[end] == tok) ++end;
  for (int j = static_cast<int>(threadIdx.x); j < c; j += static_cast<int>(blockDim.x)) {
    float acc = 0.0f;
    for (int64_t r = s; r < end; ++r) acc += to_float(dout[static_cast<int64_t>(positions[r]) * c + j]);
    dwte[static_cast<int64_t>(tok) * c + j] += acc;
  }
}

// The scratch of the backward: sorted keys, positions in and out, then CUB's temporary storage.
struct SortScratch {
  uint32_t* keys_out;
  uint32_t* positions_in;
  uint32_t* positions_out;
  void* temp;
  size_t temp_bytes;
};

int64_t aligned(int64_t bytes) { return (bytes + 255) / 256 * 256; }

size_t sort_temp_bytes(int64_t n) {
  size_t bytes = 0;
  check(cub::DeviceRadixSort::SortPairs(nullptr, bytes, static_cast<const uint32_t*>(nullptr),
                                        static_cast<uint32_t*>(nullptr), static_cast<const uint32_t*>(nullptr),
                                        static_cast<uint32_t*>(nullptr), static_cast<int>(n)),
        "cub::DeviceRadixSort::SortPairs (size)");
  return bytes;
}

SortScratch carve(void* scratch, int64_t n) {
  auto* base = static_cast<char*>(scratch);
  const int64_t words = aligned(n * static_cast<int64_t>(sizeof(uint32_t)));
  return {reinterpret_cast<uint32_t*>(base), reinterpret_cast<uint32_t*>(base + words),
          reinterpret_cast<uint32_t*>(base + 2 * words), base + 3 * words, sort_temp_bytes(n)};
}

}  // namespace

int64_t embedding_backward_scratch(int64_t n) {
  if (n <= 0 || n > INT_MAX) return 0;
  return 3 * aligned(n * static_cast<int64_t>(sizeof(uint32_t))) + static_cast<int64_t>(sort_temp_bytes(n));
}

template <typename T>
void embedding_forward(const int32_t* tokens, const T* wte, const T* wpe, T* out, int64_t b, int64_t t, int64_t c,
                       int64_t v, unsigned long long* bad, cudaStream_t stream) {
  if (b <= 0 || t <= 0 || c <= 0 || v <= 0 || t > INT_MAX || c > INT_MAX) throw_usage("embedding_forward", "bad shape");
  const int64_t n = b * t;
  launch<embedding_forward_kernel<T>>(grid_for(n * c, kThreads), kThreads, 0, stream, 
      tokens, wte, wpe, out, n, static_cast<int>(t), static_cast<int>(c), v, bad);
  check_launch("embedding_forward_kernel");
}

template <typename T>
void embedding_backward(const int32_t* tokens, const T* dout, float* dwte, float* dwpe, int64_t b, int64_t t, int64_t c,
                        int64_t v, void* scratch, int64_t scratch_bytes, cudaStream_t stream) {
  const int64_t n = b * t;
  if (b <= 0 || t <= 0 || c <= 0 || v <= 0 || n > INT_MAX || c > INT_MAX || b > INT_MAX)
    throw_usage("embedding_backward", "bad shape");
  if (scratch_bytes < embedding_backward_scratch(n)) throw_usage("embedding_backward", "scratch too small");
  launch<embedding_dwpe_kernel<T>>(grid_for(t * c, kThreads), kThreads, 0, stream, 
      dout, dwpe, static_cast<int>(b), static_cast<int>(t), static_cast<int>(c));
  check_launch("embedding_dwpe_kernel");
  SortScratch s = carve(scratch, n);
  launch<iota_kernel>(grid_for(n, kThreads), kThreads, 0, stream, s.positions_in, n);
  check_launch("iota_kernel");
  // Ids as unsigned: a negative one sorts last and is skipped like any id >= V.
  check(cub::DeviceRadixSort::SortPairs(s.temp, s.temp_bytes, reinterpret_cast<const uint32_t*>(tokens), s.keys_out,
                                        s.positions_in, s.positions_out, static_cast<int>(n), 0, 32, stream),
        "cub::DeviceRadixSort::SortPairs");
  launch<embedding_dwte_kernel<T>>(static_cast<unsigned>(n), kRunThreads, 0, stream, s.keys_out, s.positions_out, dout,
                                                                                 dwte, n, static_cast<int>(c), v);
  check_launch("embedding_dwte_kernel");
}

#define PD2BW_INSTANTIATE(T)                                                                                   \
  template void embedding_forward<T>(const int32_t*, const T*, const T*, T*, int64_t, int64_t, int64_t, int64_t, \
                                     unsigned long long*, cudaStream_t);                                        \
  template void embedding_backward<T>(const int32_t*, const T*, float*, float*, int64_t, int64_t, int64_t,      \
                                      int64_t, void*, int64_t, cudaStream_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(bf16_t)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cuda

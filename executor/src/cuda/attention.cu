// CUDA multi-head self-attention (cpu reference: executor/src/cpu/attention.cpp), causal (GPT) or
// bidirectional with an optional key padding mask (BERT: keys at or past the sequence's length get no
// weight), fused in the manner of FlashAttention: the forward streams key/value tiles through shared
// memory with an online softmax and keeps only each row's log-sum-exp (B, H, T) for the backward, never
// the (T, T) scores. The backward recomputes the probabilities from it in two kernels that each own what
// they write, so no sum needs atomics: one per key row block (dK, dV over the queries that see it), one
// per query row block (dQ over its keys); D = rowsum(dO * O) comes first.
//
// Threads: a row (a query, or a key in the dK/dV kernel) belongs to TPR adjacent lanes of one warp,
// each holding kDpt = 32 of its head dimensions in registers (TPR = 1, 2, 4 for head dims up to 32,
// 64, 128); their partial dot products are summed with warp shuffles that every lane executes.
// Arithmetic is fp32 (expf, not the fast approximation); bf16 inputs are widened on load.
//
// The mask is a template parameter (kCausal), so the causal kernels are the same code as before the
// bidirectional ones were added; a bidirectional block reads its sequence's length once (all of its
// threads, the same value) and visits only the key tiles below it.
#include <climits>
#include <cmath>
#include <type_traits>

#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {
namespace {

constexpr int kDpt = 32;   // head dimensions per thread
constexpr int kRows = 64;  // rows per block
constexpr int kTile = 32;  // rows per shared-memory tile
constexpr int kSeg = 36;   // floats per 32-dim segment of a tile row: 4 of padding, so that the TPR lanes
                           // of a row read different banks while rows stay 16-byte aligned

// A tile holds kTile rows of a head slice as float: element (row, d) at row * TPR * kSeg +
// (d / kDpt) * kSeg + d % kDpt.
template <int TPR>
constexpr int kTileFloats = kTile * TPR * kSeg;

// Sum over the TPR lanes of a row; all of them get the same bits (see warp_sum). Every lane calls it.
template <int TPR>
__device__ __forceinline__ float group_sum(float x) {
  for (int offset = TPR / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Rows [row0, row0 + kTile) of a head slice (row r at src + r * ld, dims [0, hd)) into a tile; zero
// outside [0, t) x [0, hd). Called by the whole block.
template <typename T, int TPR>
__device__ void load_tile(float* tile, const T* src, int64_t ld, int row0, int t, int hd) {
  constexpr int hdm = kDpt * TPR;
  for (int e = static_cast<int>(threadIdx.x); e < kTile * hdm; e += static_cast<int>(blockDim.x)) {
    const int rr = e / hdm, d = e % hdm;
    const int row = row0 + rr;
    float value = 0.0f;
    if (row < t && d < hd) value = to_float(src[static_cast<int64_t>(row) * ld + d]);
    tile[rr * TPR * kSeg + (d / kDpt) * kSeg + d % kDpt] = value;
  }
}

// This thread's dims [d0, d0 + kDpt) of row `row` of a head slice; zero outside [0, t) x [0, hd).
template <typename T>
__device__ __forceinline__ void load_row(float (&v)[kDpt], const T* src, int64_t ld, int row, int t, int d0, int hd) {
#pragma unroll
  for (int dd = 0; dd < kDpt; ++dd) {
    const int d = d0 + dd;
    v[dd] = (row < t && d < hd) ? to_float(src[static_cast<int64_t>(row) * ld + d]) : 0.0f;
  }
}

// Partial dot product of v with this lane's segment of tile row `row`.
template <int TPR>
__device__ __forceinline__ float dot_tile(const float (&v)[kDpt], const float* tile, int row, int sub) {
  const float4* p = reinterpret_cast<const float4*>(tile + row * TPR * kSeg + sub * kSeg);
  float s = 0.0f;
#pragma unroll
  for (int q = 0; q < kDpt / 4; ++q) {
    const float4 k = p[q];
    s += v[4 * q] * k.x + v[4 * q + 1] * k.y + v[4 * q + 2] * k.z + v[4 * q + 3] * k.w;
  }
  return s;
}

// acc += a * (this lane's segment of tile row `row`).
template <int TPR>
__device__ __forceinline__ void axpy_tile(float (&acc)[kDpt], float a, const float* tile, int row, int sub) {
  const float4* p = reinterpret_cast<const float4*>(tile + row * TPR * kSeg + sub * kSeg);
#pragma unroll
  for (int q = 0; q < kDpt / 4; ++q) {
    const float4 k = p[q];
    acc[4 * q] += a * k.x;
    acc[4 * q + 1] += a * k.y;
    acc[4 * q + 2] += a * k.z;
    acc[4 * q + 3] += a * k.w;
  }
}

// Writes this lane's dims of a row, scaled, into a (.., ld) head slice (rows < t only).
template <typename T>
__device__ __forceinline__ void store_row(T* dst, int64_t ld, int row, int t, int d0, int hd, const float (&v)[kDpt],
                                          float scale) {
  if (row >= t) return;
#pragma unroll
  for (int dd = 0; dd < kDpt; ++dd)
    if (d0 + dd < hd) dst[static_cast<int64_t>(row) * ld + d0 + dd] = from_float<T>(v[dd] * scale);
}

// Whether key j is visible from query i: j <= i (causal), else j < len (the sequence's length).
template <bool kCausal>
__device__ __forceinline__ bool visible(int i, int j, int len) {
  return kCausal ? j <= i : j < len;
}

// The length of sequence b: lengths[b], or t without lengths. A length outside [1, t] is taken as the
// nearest of 1 and t (every row keeps a visible key) and, when `report`, lowers *bad to (b << 32 | len).
__device__ __forceinline__ int sequence_length(const int32_t* lengths, unsigned long long* bad, int b, int t,
                                               bool report) {
  if (lengths == nullptr) return t;
  const int32_t len = lengths[b];
  if (len >= 1 && len <= t) return len;
  if (report) atomicMin(bad, (static_cast<unsigned long long>(b) << 32) | static_cast<uint32_t>(len));
  return len < 1 ? 1 : t;
}

// Where this thread's row sits. Block (x, y) holds rows [x * kRows, ...) of (batch, head) =
// (y / h, y % h); its threads are the rows' TPR-lane groups. qkv and dqkv rows are 3C apart, out and
// dout rows C; the head's columns start at head * hd in each.
struct Place {
  int b, head, sub, row;
  int64_t ld;           // 3C
  int64_t qkv_offset;   // of (batch b, row 0, head) in qkv / dqkv
  int64_t out_offset;   // of (batch b, row 0, head) in out / dout
};

// The keys the rows of a block see: [0, end) with end = the block's last query row + 1 (causal) or the
// sequence's length (bidirectional; the first block of the sequence's first head reports a bad one).
template <bool kCausal>
__device__ __forceinline__ int keys_end(const Place& at, const int32_t* lengths, unsigned long long* bad, int t,
                                        int* len) {
  *len = kCausal ? t : sequence_length(lengths, bad, at.b, t, threadIdx.x == 0 && blockIdx.x == 0 && at.head == 0);
  return kCausal ? min(static_cast<int>(blockIdx.x) * kRows + kRows, t) : *len;
}

template <int TPR>
__device__ __forceinline__ Place place(int t, int c, int h, int hd) {
  Place p;
  p.b = static_cast<int>(blockIdx.y) / h;
  p.head = static_cast<int>(blockIdx.y) % h;
  p.sub = static_cast<int>(threadIdx.x) % TPR;
  p.row = static_cast<int>(blockIdx.x) * kRows + static_cast<int>(threadIdx.x) / TPR;
  p.ld = 3 * static_cast<int64_t>(c);
  p.qkv_offset = static_cast<int64_t>(p.b) * t * p.ld + static_cast<int64_t>(p.head) * hd;
  p.out_offset = static_cast<int64_t>(p.b) * t * c + static_cast<int64_t>(p.head) * hd;
  return p;
}

// Query rows of one (batch, head); see Place.
// qkv: (B, T, 3C), out: (B, T, C), lse: (B, H, T).
template <typename T, int TPR, bool kCausal>
static __global__ void __launch_bounds__(kRows * TPR)
    attention_forward_kernel(const T* qkv, T* out, float* lse, const int32_t* lengths, unsigned long long* bad, int t,
                             int c, int h, int hd, float scale) {
  PD2BW_SHARED_ARRAY_ALIGNED(float, ks, kTileFloats<TPR>, 16);
  PD2BW_SHARED_ARRAY_ALIGNED(float, vs, kTileFloats<TPR>, 16);
  const Place at = place<TPR>(t, c, h, hd);
  const int sub = at.sub, i = at.row;
  const int64_t ld = at.ld;
  const T* q_base = qkv + at.qkv_offset;
  float q[kDpt], o[kDpt];
  load_row(q, q_base, ld, i, t, sub * kDpt, hd);
#pragma unroll
  for (int dd = 0; dd < kDpt; ++dd) o[dd] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  int len = t;
  const int last = keys_end<kCausal>(at, lengths, bad, t, &len) - 1;  // the last key the block's rows see
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    load_tile<T, TPR>(ks, q_base + c, ld, j0, t, hd);
    load_tile<T, TPR>(vs, q_base + 2 * c, ld, j0, t, hd);
    __syncthreads();
    float s[kTile];
#pragma unroll
    for (int jj = 0; jj < kTile; ++jj) s[jj] = group_sum<TPR>(dot_tile<TPR>(q, ks, jj, sub));
    float tile_max = -INFINITY;
#pragma unroll
    for (int jj = 0; jj < kTile; ++jj) {
      s[jj] = (i < t && visible<kCausal>(i, j0 + jj, len)) ? s[jj] * scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[jj]);
    }
    if (tile_max == -INFINITY) continue;  // no key of this tile is visible from row i
    const float m_new = fmaxf(m, tile_max);
    const float correction = expf(m - m_new);  // 0 on the first visible tile (m = -inf)
    l *= correction;
#pragma unroll
    for (int dd = 0; dd < kDpt; ++dd) o[dd] *= correction;
#pragma unroll
    for (int jj = 0; jj < kTile; ++jj) {
      const float p = s[jj] == -INFINITY ? 0.0f : expf(s[jj] - m_new);
      l += p;
      axpy_tile<TPR>(o, p, vs, jj, sub);
    }
    m = m_new;
  }
  if (i >= t) return;
  store_row(out + at.out_offset, c, i, t, sub * kDpt, hd, o, 1.0f / l);
  if (sub == 0) lse[(static_cast<int64_t>(at.b) * h + at.head) * t + i] = m + logf(l);
}

// One warp per row of (B, H, T): dsum = sum over the head's dims of dout * out.
template <typename T>
static __global__ void attention_dsum_kernel(const T* dout, const T* out, float* dsum, int64_t rows, int t, int c, int h,
                                             int hd) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  if (row >= rows) return;  // the same on the warp's lanes
  const int i = static_cast<int>(row % t);
  const int64_t bh = row / t;
  const int head = static_cast<int>(bh % h);
  const int64_t b = bh / h;
  const int64_t offset = (b * t + i) * c + static_cast<int64_t>(head) * hd;
  float s = 0.0f;
  for (int d = lane; d < hd; d += 32) s += to_float(dout[offset + d]) * to_float(out[offset + d]);
  s = warp_sum(s);
  if (lane == 0) dsum[row] = s;
}

// dQ of query rows [x * kRows, ...): dq = scale * sum_j p_ij (dp_ij - D_i) k_j over the visible keys.
template <typename T, int TPR, bool kCausal>
static __global__ void __launch_bounds__(kRows * TPR)
    attention_backward_dq_kernel(const T* qkv, const T* dout, const float* lse, const float* dsum, T* dqkv,
                                 const int32_t* lengths, unsigned long long* bad, int t, int c, int h, int hd,
                                 float scale) {
  PD2BW_SHARED_ARRAY_ALIGNED(float, ks, kTileFloats<TPR>, 16);
  PD2BW_SHARED_ARRAY_ALIGNED(float, vs, kTileFloats<TPR>, 16);
  const Place at = place<TPR>(t, c, h, hd);
  const int sub = at.sub, i = at.row;
  const int64_t ld = at.ld;
  const T* q_base = qkv + at.qkv_offset;
  const T* do_base = dout + at.out_offset;
  float q[kDpt], dov[kDpt], dq[kDpt];
  load_row(q, q_base, ld, i, t, sub * kDpt, hd);
  load_row(dov, do_base, c, i, t, sub * kDpt, hd);
#pragma unroll
  for (int dd = 0; dd < kDpt; ++dd) dq[dd] = 0.0f;
  const int64_t stat = (static_cast<int64_t>(at.b) * h + at.head) * t + i;
  const float lse_i = i < t ? lse[stat] : 0.0f, d_i = i < t ? dsum[stat] : 0.0f;
  int len = t;
  const int last = keys_end<kCausal>(at, lengths, bad, t, &len) - 1;
  for (int j0 = 0; j0 <= last; j0 += kTile) {
    __syncthreads();
    load_tile<T, TPR>(ks, q_base + c, ld, j0, t, hd);
    load_tile<T, TPR>(vs, q_base + 2 * c, ld, j0, t, hd);
    __syncthreads();
#pragma unroll 4
    for (int jj = 0; jj < kTile; ++jj) {
      const float s = group_sum<TPR>(dot_tile<TPR>(q, ks, jj, sub));
      const float dp = group_sum<TPR>(dot_tile<TPR>(dov, vs, jj, sub));
      const float p = (i < t && visible<kCausal>(i, j0 + jj, len)) ? expf(s * scale - lse_i) : 0.0f;
      axpy_tile<TPR>(dq, p * (dp - d_i), ks, jj, sub);
    }
  }
  store_row(dqkv + at.qkv_offset, ld, i, t, sub * kDpt, hd, dq, scale);
}

// dK and dV of key rows [x * kRows, ...) over the queries that see them (causal: i >= j; bidirectional:
// every query when j < len, none otherwise): dv = sum_i p_ij dO_i, dk = scale * sum_i p_ij (dp_ij - D_i) q_i.
template <typename T, int TPR, bool kCausal>
static __global__ void __launch_bounds__(kRows * TPR)
    attention_backward_dkdv_kernel(const T* qkv, const T* dout, const float* lse, const float* dsum, T* dqkv,
                                   const int32_t* lengths, unsigned long long* bad, int t, int c, int h, int hd,
                                   float scale) {
  PD2BW_SHARED_ARRAY_ALIGNED(float, qs, kTileFloats<TPR>, 16);
  PD2BW_SHARED_ARRAY_ALIGNED(float, dos, kTileFloats<TPR>, 16);
  PD2BW_SHARED_ARRAY(float, lse_s, kTile);
  PD2BW_SHARED_ARRAY(float, d_s, kTile);
  const Place at = place<TPR>(t, c, h, hd);  // at.row: this thread's key
  const int sub = at.sub, j = at.row;
  const int first_key = static_cast<int>(blockIdx.x) * kRows;
  const int64_t ld = at.ld;
  const T* q_base = qkv + at.qkv_offset;
  const T* do_base = dout + at.out_offset;
  const int64_t stat_base = (static_cast<int64_t>(at.b) * h + at.head) * t;
  float k[kDpt], v[kDpt], dk[kDpt], dv[kDpt];
  load_row(k, q_base + c, ld, j, t, sub * kDpt, hd);
  load_row(v, q_base + 2 * c, ld, j, t, sub * kDpt, hd);
#pragma unroll
  for (int dd = 0; dd < kDpt; ++dd) dk[dd] = dv[dd] = 0.0f;
  int len = t;
  const int keys = keys_end<kCausal>(at, lengths, bad, t, &len);
  // The first query tile that sees a key of the block: causal, the one of the first key; bidirectional,
  // the first, or none (t) when every key of the block is padding.
  const int first_query = kCausal ? first_key / kTile * kTile : (first_key < keys ? 0 : t);
  for (int i0 = first_query; i0 < t; i0 += kTile) {
    __syncthreads();
    load_tile<T, TPR>(qs, q_base, ld, i0, t, hd);
    load_tile<T, TPR>(dos, do_base, c, i0, t, hd);
    if (threadIdx.x < kTile) {
      const int i = i0 + static_cast<int>(threadIdx.x);
      lse_s[threadIdx.x] = i < t ? lse[stat_base + i] : 0.0f;
      d_s[threadIdx.x] = i < t ? dsum[stat_base + i] : 0.0f;
    }
    __syncthreads();
#pragma unroll 2
    for (int ii = 0; ii < kTile; ++ii) {
      const float s = group_sum<TPR>(dot_tile<TPR>(k, qs, ii, sub));
      const float dp = group_sum<TPR>(dot_tile<TPR>(v, dos, ii, sub));
      const int i = i0 + ii;
      const float p = (j < t && i < t && visible<kCausal>(i, j, len)) ? expf(s * scale - lse_s[ii]) : 0.0f;
      axpy_tile<TPR>(dv, p, dos, ii, sub);
      axpy_tile<TPR>(dk, p * (dp - d_s[ii]), qs, ii, sub);
    }
  }
  T* dq_base = dqkv + at.qkv_offset;
  store_row(dq_base + c, ld, j, t, sub * kDpt, hd, dk, scale);
  store_row(dq_base + 2 * c, ld, j, t, sub * kDpt, hd, dv, 1.0f);
}

struct Shape {
  int t, c, h, hd;
  dim3 grid;
  float scale;
};

Shape check_shape(const char* op, int64_t b, int64_t t, int64_t c, int64_t h) {
  if (b <= 0 || t <= 0 || c <= 0 || h <= 0 || c % h != 0)
    throw_usage(op, "bad shape (B " + std::to_string(b) + ", T " + std::to_string(t) + ", C " + std::to_string(c) +
                        ", H " + std::to_string(h) + ")");
  if (c / h > kMaxHeadDim)
    throw_usage(op, "head dimension " + std::to_string(c / h) + " is above the kernels' " + std::to_string(kMaxHeadDim));
  if (b * h > 65535 || t > INT_MAX / 2 || 3 * c > INT_MAX)
    throw_usage(op, "too large: B x H must be <= 65535 and T, 3C must fit int");
  const int hd = static_cast<int>(c / h);
  const dim3 grid(static_cast<unsigned>(ceil_div(t, kRows)), static_cast<unsigned>(b * h));
  return {static_cast<int>(t), static_cast<int>(c), static_cast<int>(h), hd, grid,
          static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)))};
}

// Calls f(TPR, kCausal) as integral constants: TPR lanes per row for head dimension hd (1, 2, 4 for up to
// 32, 64, 128), and the mask.
template <typename F>
void dispatch(int hd, bool causal, F&& f) {
  const auto with = [&](auto tpr) {
    if (causal)
      f(tpr, std::true_type{});
    else
      f(tpr, std::false_type{});
  };
  if (hd <= 32)
    with(std::integral_constant<int, 1>{});
  else if (hd <= 64)
    with(std::integral_constant<int, 2>{});
  else
    with(std::integral_constant<int, 4>{});
}

// The mask's arguments as the kernels take them: causal kernels read no lengths.
AttentionKeys device_keys(const char* op, const AttentionKeys& keys) {
  if (keys.causal) return {true, nullptr, nullptr};
  if (keys.lengths != nullptr && keys.bad == nullptr) throw_usage(op, "lengths without an error flag");
  return keys;
}

}  // namespace

int64_t attention_backward_scratch(int64_t b, int64_t t, int64_t h) { return b * h * t; }

template <typename T>
void attention_forward(const T* qkv, T* out, float* lse, int64_t b, int64_t t, int64_t c, int64_t h,
                       const AttentionKeys& keys, cudaStream_t stream) {
  const Shape s = check_shape("attention_forward", b, t, c, h);
  const AttentionKeys k = device_keys("attention_forward", keys);
  dispatch(s.hd, k.causal, [&](auto tpr, auto causal) {
    constexpr int kTpr = decltype(tpr)::value;
    launch<attention_forward_kernel<T, kTpr, decltype(causal)::value>>(s.grid, kRows * kTpr, 0, stream, qkv, out, lse,
                                                                       k.lengths, k.bad, s.t, s.c, s.h, s.hd, s.scale);
  });
  check_launch("attention_forward_kernel");
}

template <typename T>
void attention_backward(const T* dout, const T* qkv, const T* out, const float* lse, T* dqkv, int64_t b, int64_t t,
                        int64_t c, int64_t h, const AttentionKeys& keys, float* scratch, cudaStream_t stream) {
  const Shape s = check_shape("attention_backward", b, t, c, h);
  const AttentionKeys k = device_keys("attention_backward", keys);
  const int64_t rows = b * h * t;
  constexpr int kThreads = 256;
  launch<attention_dsum_kernel<T>>(static_cast<unsigned>(ceil_div(rows * 32, kThreads)), kThreads, 0, stream, dout, out,
                                   scratch, rows, s.t, s.c, s.h, s.hd);
  check_launch("attention_dsum_kernel");
  const float* dsum = scratch;
  dispatch(s.hd, k.causal, [&](auto tpr, auto causal) {
    constexpr int kTpr = decltype(tpr)::value;
    constexpr bool kCausal = decltype(causal)::value;
    launch<attention_backward_dq_kernel<T, kTpr, kCausal>>(s.grid, kRows * kTpr, 0, stream, qkv, dout, lse, dsum, dqkv,
                                                           k.lengths, k.bad, s.t, s.c, s.h, s.hd, s.scale);
    check_launch("attention_backward_dq_kernel");
    launch<attention_backward_dkdv_kernel<T, kTpr, kCausal>>(s.grid, kRows * kTpr, 0, stream, qkv, dout, lse, dsum,
                                                             dqkv, k.lengths, k.bad, s.t, s.c, s.h, s.hd, s.scale);
    check_launch("attention_backward_dkdv_kernel");
  });
}

#define PD2BW_INSTANTIATE(T)                                                                                 \
  template void attention_forward<T>(const T*, T*, float*, int64_t, int64_t, int64_t, int64_t, const AttentionKeys&, \
                                     cudaStream_t);                                                                 \
  template void attention_backward<T>(const T*, const T*, const T*, const float*, T*, int64_t, int64_t, int64_t,     \
                                      int64_t, const AttentionKeys&, float*, cudaStream_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(bf16_t)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cuda

// CPU multi-head self-attention core: softmax(q k^T / sqrt(hd) + mask) v per (batch, head), with a causal
// mask (GPT) or a key padding mask (BERT).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/gemm.hpp"
#include "cpu/rows.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/ops.hpp"

namespace pd2bw::executor::cpu {
namespace {

using detail::KeyRange;

// One (batch, head) slice: row strides of the packed (T, 3C) input and the (T, C) output.
struct HeadSlice {
  int64_t q_offset;    // of q's first element in qkv / dqkv; k and v follow at +C and +2C
  int64_t out_offset;  // of the first element in out / dout
  int64_t probs_offset;
};

HeadSlice slice(int64_t bi, int64_t hi, int64_t t, int64_t c, int64_t h) {
  const int64_t hd = c / h;
  return {bi * t * 3 * c + hi * hd, bi * t * c + hi * hd, (bi * h + hi) * t * t};
}

KeyRange key_range(int64_t bi, int64_t t, bool causal, const int32_t* lengths) {
  if (causal || lengths == nullptr) return {causal, t};
  const int32_t len = lengths[bi];
  if (len < 1 || len > t)
    throw Error(fmt::format("attention: sequence {} has length {}, outside [1, {}]", bi, len, t),
                "a key padding mask's lengths count each sequence's real tokens, at least one");
  return {false, len};
}

// Above the baseline level a causal head's products skip the masked triangle in chunks of kChunk
// queries or keys (the last chunk takes the rest: kChunk to 2 kChunk - 1, so no chunk's product is small
// enough for gemm.hpp's loop unless the whole one is). Every entry that is read (on or below the
// diagonal) is summed in the same order as by the whole product; the terms skipped are products with the
// probabilities' zeros.
constexpr int64_t kChunk = 32;

// The length of the chunk starting at i0 of t.
int64_t chunk(int64_t i0, int64_t t) {
  return t - i0 < 2 * kChunk ? t - i0 : kChunk;
}

// S (t, t, row stride t) = A B^T on and below the diagonal: key chunk [s0, s1) for queries r >= s0
// (entries above the diagonal are left unset or hold values nobody reads).
template <typename T>
void causal_abt(int64_t t, int64_t hd, const T* a, int64_t lda, const T* b, int64_t ldb, T* s) {
  for (int64_t s0 = 0; s0 < t; s0 += chunk(s0, t))
    detail::gemm(false, true, t - s0, chunk(s0, t), hd, a + s0 * lda, lda, b + s0 * ldb, ldb, s + s0 * t + s0, t,
                 false);
}

// O (t, hd) = P B for a lower-triangular P (t, t): query chunk [r0, r1) over keys [0, r1).
template <typename T>
void causal_pb(int64_t t, int64_t hd, const T* p, const T* b, int64_t ldb, T* o, int64_t ldo) {
  for (int64_t r0 = 0; r0 < t; r0 += chunk(r0, t)) {
    const int64_t rows = chunk(r0, t);
    detail::gemm(false, false, rows, hd, r0 + rows, p + r0 * t, t, b, ldb, o + r0 * ldo, ldo, false);
  }
}

// O (t, hd) = P^T B for a lower-triangular P (t, t): key chunk [s0, s1) over queries [s0, t).
template <typename T>
void causal_ptb(int64_t t, int64_t hd, const T* p, const T* b, int64_t ldb, T* o, int64_t ldo) {
  for (int64_t s0 = 0; s0 < t; s0 += chunk(s0, t))
    detail::gemm(true, false, chunk(s0, t), hd, t - s0, p + s0 * t + s0, t, b + s0 * ldb, ldb, o + s0 * ldo, ldo,
                 false);
}

}  // namespace

template <typename T>
void attention_forward(const T* qkv, T* out, T* probs, int64_t b, int64_t t, int64_t c, int64_t h, bool causal,
                       const int32_t* lengths) {
  const int64_t hd = c / h;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  const detail::KernelLevel level = detail::kernel_level();
  const bool triangle = causal && level != detail::KernelLevel::baseline;
  std::vector<T> scores(static_cast<size_t>(t * t));
  for (int64_t bi = 0; bi < b; ++bi) {
    const KeyRange keys = key_range(bi, t, causal, lengths);
    for (int64_t hi = 0; hi < h; ++hi) {
      const HeadSlice sl = slice(bi, hi, t, c, h);
      const T* q = qkv + sl.q_offset;
      const T* k = q + c;
      const T* v = q + 2 * c;
      T* p = probs + sl.probs_offset;
      if (triangle) {
        causal_abt(t, hd, q, 3 * c, k, 3 * c, scores.data());
      } else {
        detail::gemm(false, true, t, t, hd, q, 3 * c, k, 3 * c, scores.data(), t, false);
      }
      detail::masked_softmax_at(level, scores.data(), p, t, scale, keys);
      // The zeros of the masked entries make the full product equal the masked one.
      if (triangle) {
        causal_pb(t, hd, p, v, 3 * c, out + sl.out_offset, c);
      } else {
        detail::gemm(false, false, t, hd, t, p, t, v, 3 * c, out + sl.out_offset, c, false);
      }
    }
  }
}

template <typename T>
void attention_backward(const T* dout, const T* qkv, const T* probs, T* dqkv, int64_t b, int64_t t, int64_t c,
                        int64_t h, bool causal, const int32_t* lengths) {
  const int64_t hd = c / h;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  const detail::KernelLevel level = detail::kernel_level();
  const bool triangle = causal && level != detail::KernelLevel::baseline;
  std::vector<T> ds(static_cast<size_t>(t * t));
  for (int64_t bi = 0; bi < b; ++bi) {
    const KeyRange keys = key_range(bi, t, causal, lengths);
    for (int64_t hi = 0; hi < h; ++hi) {
      const HeadSlice sl = slice(bi, hi, t, c, h);
      const T* q = qkv + sl.q_offset;
      const T* k = q + c;
      const T* v = q + 2 * c;
      const T* p = probs + sl.probs_offset;
      const T* dout_h = dout + sl.out_offset;
      T* dq = dqkv + sl.q_offset;
      // dP = dO V^T and dV = P^T dO; softmax backward row by row: dS = P * (dP - sum(P * dP)), scaled for
      // the 1/sqrt(hd) in S; dQ = dS K and dK = dS^T Q.
      if (triangle) {
        causal_abt(t, hd, dout_h, c, v, 3 * c, ds.data());
        causal_ptb(t, hd, p, dout_h, c, dq + 2 * c, 3 * c);
        detail::masked_softmax_backward_at(level, p, ds.data(), t, scale, keys);
        causal_pb(t, hd, ds.data(), k, 3 * c, dq, 3 * c);
        causal_ptb(t, hd, ds.data(), q, 3 * c, dq + c, 3 * c);
        continue;
      }
      detail::gemm(false, true, t, t, hd, dout_h, c, v, 3 * c, ds.data(), t, false);
      detail::gemm(true, false, t, hd, t, p, t, dout_h, c, dq + 2 * c, 3 * c, false);
      detail::masked_softmax_backward_at(level, p, ds.data(), t, scale, keys);
      detail::gemm(false, false, t, hd, t, ds.data(), t, k, 3 * c, dq, 3 * c, false);
      detail::gemm(true, false, t, hd, t, ds.data(), t, q, 3 * c, dq + c, 3 * c, false);
    }
  }
}

#define PD2BW_INSTANTIATE(T)                                                                \
  template void attention_forward<T>(const T*, T*, T*, int64_t, int64_t, int64_t, int64_t, bool, const int32_t*); \
  template void attention_backward<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t, int64_t, bool, \
                                      const int32_t*);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(double)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cpu

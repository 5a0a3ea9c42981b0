// CPU multi-head self-attention core: softmax(q k^T / sqrt(hd) + mask) v per (batch, head), with a causal
// mask (GPT) or a key padding mask (BERT).
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/gemm.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/ops.hpp"

namespace pd2bw::executor::cpu {
namespace {

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

// The keys query row r of sequence bi sees are [0, end(r)): r + 1 of them with a causal mask, else the
// sequence's length (all T without lengths).
struct KeyRange {
  bool causal;
  int64_t length;
  int64_t end(int64_t r) const { return causal ? r + 1 : length; }
};

KeyRange key_range(int64_t bi, int64_t t, bool causal, const int32_t* lengths) {
  if (causal || lengths == nullptr) return {causal, t};
  const int32_t len = lengths[bi];
  if (len < 1 || len > t)
    throw Error(fmt::format("attention: sequence {} has length {}, outside [1, {}]", bi, len, t),
                "a key padding mask's lengths count each sequence's real tokens, at least one");
  return {false, len};
}

// scores: (T, T) raw q k^T; writes the masked softmax of scale * scores into p: (T, T), zero outside
// each row's keys.
template <typename T>
void masked_softmax(const T* scores, T* p, int64_t t, T scale, KeyRange keys) {
  for (int64_t r = 0; r < t; ++r) {
    const T* sr = scores + r * t;
    T* pr = p + r * t;
    const int64_t end = keys.end(r);
    T mx = scale * sr[0];
    for (int64_t s = 1; s < end; ++s) mx = std::max(mx, scale * sr[s]);
    double sum = 0;
    for (int64_t s = 0; s < end; ++s) {
      pr[s] = std::exp(scale * sr[s] - mx);
      sum += pr[s];
    }
    const T inv = static_cast<T>(1.0 / sum);
    for (int64_t s = 0; s < end; ++s) pr[s] *= inv;
    for (int64_t s = end; s < t; ++s) pr[s] = 0;
  }
}

}  // namespace

template <typename T>
void attention_forward(const T* qkv, T* out, T* probs, int64_t b, int64_t t, int64_t c, int64_t h, bool causal,
                       const int32_t* lengths) {
  const int64_t hd = c / h;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  std::vector<T> scores(static_cast<size_t>(t * t));
  for (int64_t bi = 0; bi < b; ++bi) {
    const KeyRange keys = key_range(bi, t, causal, lengths);
    for (int64_t hi = 0; hi < h; ++hi) {
      const HeadSlice sl = slice(bi, hi, t, c, h);
      const T* q = qkv + sl.q_offset;
      const T* k = q + c;
      const T* v = q + 2 * c;
      T* p = probs + sl.probs_offset;
      detail::gemm(false, true, t, t, hd, q, 3 * c, k, 3 * c, scores.data(), t, false);
      masked_softmax(scores.data(), p, t, scale, keys);
      // The zeros of the masked entries make the full product equal the masked one.
      detail::gemm(false, false, t, hd, t, p, t, v, 3 * c, out + sl.out_offset, c, false);
    }
  }
}

template <typename T>
void attention_backward(const T* dout, const T* qkv, const T* probs, T* dqkv, int64_t b, int64_t t, int64_t c,
                        int64_t h, bool causal, const int32_t* lengths) {
  const int64_t hd = c / h;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
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
      // dP = dO V^T and dV = P^T dO.
      detail::gemm(false, true, t, t, hd, dout_h, c, v, 3 * c, ds.data(), t, false);
      detail::gemm(true, false, t, hd, t, p, t, dout_h, c, dq + 2 * c, 3 * c, false);
      // Softmax backward row by row: dS = P * (dP - sum(P * dP)), scaled for the 1/sqrt(hd) in S.
      for (int64_t r = 0; r < t; ++r) {
        const T* pr = p + r * t;
        T* dr = ds.data() + r * t;
        const int64_t end = keys.end(r);
        double dot = 0;
        for (int64_t s = 0; s < end; ++s) dot += static_cast<double>(pr[s]) * dr[s];
        const T dot_t = static_cast<T>(dot);
        for (int64_t s = 0; s < end; ++s) dr[s] = scale * pr[s] * (dr[s] - dot_t);
        for (int64_t s = end; s < t; ++s) dr[s] = 0;
      }
      // dQ = dS K and dK = dS^T Q.
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

// CPU causal multi-head self-attention core: softmax(q k^T / sqrt(hd) + mask) v per (batch, head).
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu/gemm.hpp"
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

// scores: (T, T) raw q k^T; writes the causal softmax of scale * scores into p: (T, T), zero above
// the diagonal.
template <typename T>
void causal_softmax(const T* scores, T* p, int64_t t, T scale) {
  for (int64_t r = 0; r < t; ++r) {
    const T* sr = scores + r * t;
    T* pr = p + r * t;
    T mx = scale * sr[0];
    for (int64_t s = 1; s <= r; ++s) mx = std::max(mx, scale * sr[s]);
    double sum = 0;
    for (int64_t s = 0; s <= r; ++s) {
      pr[s] = std::exp(scale * sr[s] - mx);
      sum += pr[s];
    }
    const T inv = static_cast<T>(1.0 / sum);
    for (int64_t s = 0; s <= r; ++s) pr[s] *= inv;
    for (int64_t s = r + 1; s < t; ++s) pr[s] = 0;
  }
}

}  // namespace

template <typename T>
void attention_forward(const T* qkv, T* out, T* probs, int64_t b, int64_t t, int64_t c, int64_t h) {
  const int64_t hd = c / h;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  std::vector<T> scores(static_cast<size_t>(t * t));
  for (int64_t bi = 0; bi < b; ++bi) {
    for (int64_t hi = 0; hi < h; ++hi) {
      const HeadSlice sl = slice(bi, hi, t, c, h);
      const T* q = qkv + sl.q_offset;
      const T* k = q + c;
      const T* v = q + 2 * c;
      T* p = probs + sl.probs_offset;
      detail::gemm(false, true, t, t, hd, q, 3 * c, k, 3 * c, scores.data(), t, false);
      causal_softmax(scores.data(), p, t, scale);
      // The zeros above the diagonal make the full product equal the causal one.
      detail::gemm(false, false, t, hd, t, p, t, v, 3 * c, out + sl.out_offset, c, false);
    }
  }
}

template <typename T>
void attention_backward(const T* dout, const T* qkv, const T* probs, T* dqkv, int64_t b, int64_t t, int64_t c,
                        int64_t h) {
  const int64_t hd = c / h;
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));
  std::vector<T> ds(static_cast<size_t>(t * t));
  for (int64_t bi = 0; bi < b; ++bi) {
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
        double dot = 0;
        for (int64_t s = 0; s <= r; ++s) dot += static_cast<double>(pr[s]) * dr[s];
        const T dot_t = static_cast<T>(dot);
        for (int64_t s = 0; s <= r; ++s) dr[s] = scale * pr[s] * (dr[s] - dot_t);
        for (int64_t s = r + 1; s < t; ++s) dr[s] = 0;
      }
      // dQ = dS K and dK = dS^T Q.
      detail::gemm(false, false, t, hd, t, ds.data(), t, k, 3 * c, dq, 3 * c, false);
      detail::gemm(true, false, t, hd, t, ds.data(), t, q, 3 * c, dq + c, 3 * c, false);
    }
  }
}

#define PD2BW_INSTANTIATE(T)                                                                \
  template void attention_forward<T>(const T*, T*, T*, int64_t, int64_t, int64_t, int64_t); \
  template void attention_backward<T>(const T*, const T*, const T*, T*, int64_t, int64_t, int64_t, int64_t);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(double)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cpu

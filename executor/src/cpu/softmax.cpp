// The attention's masked softmax and its backward, row by row (rows.hpp): scalar loops for double and
// for float at the baseline level, the AVX2 rows of rows_simd.hpp for float above it.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cpu/rows.hpp"
#include "cpu/rows_simd.hpp"

namespace pd2bw::executor::cpu::detail {

template <typename T>
void masked_softmax_at(KernelLevel level, const T* scores, T* p, int64_t t, T scale, KeyRange keys) {
  if constexpr (std::is_same_v<T, float>) {
    if (level != KernelLevel::baseline) {
      for (int64_t r = 0; r < t; ++r) softmax_row_avx2(scores + r * t, p + r * t, keys.end(r), t, scale);
      return;
    }
  }
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

template <typename T>
void masked_softmax_backward_at(KernelLevel level, const T* p, T* d, int64_t t, T scale, KeyRange keys) {
  if constexpr (std::is_same_v<T, float>) {
    if (level != KernelLevel::baseline) {
      for (int64_t r = 0; r < t; ++r) softmax_backward_row_avx2(p + r * t, d + r * t, keys.end(r), t, scale);
      return;
    }
  }
  for (int64_t r = 0; r < t; ++r) {
    const T* pr = p + r * t;
    T* dr = d + r * t;
    const int64_t end = keys.end(r);
    double dot = 0;
    for (int64_t s = 0; s < end; ++s) dot += static_cast<double>(pr[s]) * dr[s];
    const T dot_t = static_cast<T>(dot);
    for (int64_t s = 0; s < end; ++s) dr[s] = scale * pr[s] * (dr[s] - dot_t);
    for (int64_t s = end; s < t; ++s) dr[s] = 0;
  }
}

#define PD2BW_INSTANTIATE(T)                                                           \
  template void masked_softmax_at<T>(KernelLevel, const T*, T*, int64_t, T, KeyRange); \
  template void masked_softmax_backward_at<T>(KernelLevel, const T*, T*, int64_t, T, KeyRange);
PD2BW_INSTANTIATE(float)
PD2BW_INSTANTIATE(double)
#undef PD2BW_INSTANTIATE

}  // namespace pd2bw::executor::cpu::detail

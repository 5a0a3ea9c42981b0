// Internal: the CPU backend's row operations at a given kernel level (kernel_level.hpp): layer norm and
// the attention's masked softmax. Float above the baseline runs the AVX2 rows of rows_simd.hpp (the
// same bits at avx2 and avx512); double, and float at the baseline, the scalar loops. The public ops
// (ops.hpp) call these with the process's kernel_level(). Not a public header.
#pragma once

#include <cstdint>

#include "cpu/kernel_level.hpp"

namespace pd2bw::executor::cpu::detail {

// As ops.hpp's layernorm_forward and layernorm_backward.
template <typename T>
void layernorm_forward_at(KernelLevel level, const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd,
                          int64_t n, int64_t c);
template <typename T>
void layernorm_backward_at(KernelLevel level, const T* dy, const T* x, const T* gamma, const T* mean, const T* rstd,
                           T* dx, T* dgamma, T* dbeta, int64_t n, int64_t c);

// The keys query row r sees are [0, end(r)): r + 1 of them with a causal mask, else `length` (1..t).
struct KeyRange {
  bool causal;
  int64_t length;
  int64_t end(int64_t r) const { return causal ? r + 1 : length; }
};

// scores: (t, t) raw q k^T; writes the softmax of scale * scores over each row's keys into p (t, t),
// zero past them. Probabilities sum in double.
template <typename T>
void masked_softmax_at(KernelLevel level, const T* scores, T* p, int64_t t, T scale, KeyRange keys);
// In place on d (t, t), with p the forward's probabilities: d = scale * p * (d - sum(p * d)) over each
// row's keys (the sum in double), zero past them.
template <typename T>
void masked_softmax_backward_at(KernelLevel level, const T* p, T* d, int64_t t, T scale, KeyRange keys);

}  // namespace pd2bw::executor::cpu::detail

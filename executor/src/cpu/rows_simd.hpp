// Internal: the float layer norm and attention softmax rows of the avx2 and avx512 kernel levels: 8
// lanes of AVX2 + FMA for both levels, so the two give the same bits. Call only when the CPU has AVX2
// and FMA. Not a public header.
//
// Same contracts as the scalar float code in layernorm.cpp and attention.cpp. Elementwise arithmetic is
// the scalar code's, operation for operation (no fused multiply-adds), so an element differs from the
// scalar result only through a row reduction. Reductions (sums in double, maxima) run over lanes
// j mod 8 of each row from its first element, the lanes are then added in a fixed order and the c mod 8
// tail elements last, one by one: the bits depend on the row length only, never on buffer addresses.
// Sums in double round to the same float statistics as the scalar order but for rare ties, so layer
// norm matches the scalar code to an ulp or two. The softmax's exp is exp_avx2.hpp's (about 1 ulp;
// arguments below -87 give 0 where the scalar expf gives a subnormal), so probabilities and their
// gradients stay within a few float ulps of the scalar ones.
#pragma once

#include <cstdint>

namespace pd2bw::executor::cpu::detail {

void layernorm_forward_avx2(const float* x, const float* gamma, const float* beta, float* y, float* mean, float* rstd,
                            int64_t n, int64_t c);
// dx, or dgamma and dbeta together, may be nullptr (that part is skipped).
void layernorm_backward_avx2(const float* dy, const float* x, const float* gamma, const float* mean, const float* rstd,
                             float* dx, float* dgamma, float* dbeta, int64_t n, int64_t c);

// One attention row of t scores: p[s] = softmax(scale * scores[s]) over s < end, zero for end <= s < t.
void softmax_row_avx2(const float* scores, float* p, int64_t end, int64_t t, float scale);
// One row of the softmax backward in place: d[s] = scale * p[s] * (d[s] - sum_s' p[s'] d[s']) over s < end
// (the sum in double), zero for end <= s < t.
void softmax_backward_row_avx2(const float* p, float* d, int64_t end, int64_t t, float scale);

}  // namespace pd2bw::executor::cpu::detail

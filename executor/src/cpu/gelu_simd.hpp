// Internal: the tanh GELU (float) of the avx2 and avx512 kernel levels: 8 lanes of AVX2 + FMA, and the
// same operations on 16 lanes of AVX-512F, so the two levels give the same bits. Call the avx2 functions
// only when the CPU has AVX2 and FMA, the avx512 ones only when it has AVX-512F. Not a public header.
//
// 0.5 (1 + tanh(u)) is evaluated as the logistic 1 / (1 + exp(-2u)), with exp from a degree-6 polynomial
// on [-ln2/2, ln2/2] (about 1 ulp); the result is within a few float ulps of the baseline's std::tanh
// form. Each element is computed alone (the same bits at any position or alignment); lanes past n run
// through a padded scratch vector (avx2) or are masked off (avx512).
#pragma once

#include <cstdint>

namespace pd2bw::executor::cpu::detail {

// u = kSqrt2OverPi (x + kCubic x^3), in float, for both levels.
inline constexpr float kGeluSqrt2OverPi = 0.79788456080286535588f;
inline constexpr float kGeluCubic = 0.044715f;

void gelu_tanh_forward_avx2(const float* x, float* y, int64_t n);
void gelu_tanh_backward_avx2(const float* dy, const float* x, float* dx, int64_t n);
void gelu_tanh_forward_avx512(const float* x, float* y, int64_t n);
void gelu_tanh_backward_avx512(const float* dy, const float* x, float* dx, int64_t n);

}  // namespace pd2bw::executor::cpu::detail

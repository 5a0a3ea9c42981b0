// Internal: which instruction-set build of the CPU kernels runs (chosen once per process). Not a public header.
#pragma once

#include <string_view>

namespace pd2bw::executor::cpu::detail {

// baseline: the portable build (Eigen's SSE2 GEMM, no FMA, scalar rows; the rounding of releases before
// the SIMD kernels). avx2: packed GEMM with AVX2 + FMA. avx512: packed GEMM with AVX-512F + FMA. Above
// the baseline the float tanh GELU, layer norm and attention softmax are vectorised too (gelu_simd.hpp,
// rows_simd.hpp) and causal attention skips its masked triangle. Each level's results are
// bit-reproducible on its own (independent of buffer addresses and of the caller); avx2 and avx512 give
// the same bits; the baseline rounds differently.
enum class KernelLevel { baseline, avx2, avx512 };

// The best level this CPU (and OS) supports.
KernelLevel best_kernel_level();
// Whether this CPU can run `level`.
bool kernel_level_supported(KernelLevel level);
std::string_view kernel_level_name(KernelLevel level);

// The level every op uses: PD2BW_CPU_KERNELS (auto | baseline | avx2 | avx512) if set, else the best.
// Decided on the first call and kept for the process. Throws pd2bw::UsageError for an unknown value or
// a level this CPU lacks.
KernelLevel kernel_level();

}  // namespace pd2bw::executor::cpu::detail

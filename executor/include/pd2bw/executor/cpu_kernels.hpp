// Which instruction-set build of the cpu backend's kernels this process runs.
#pragma once

#include <string>

namespace pd2bw::executor {

// One line such as "avx512 (best of this CPU)" or "baseline (PD2BW_CPU_KERNELS=baseline)": the level the
// cpu backend's GEMMs use (baseline: portable SSE2 Eigen, no FMA; avx2 or avx512: packed FMA kernels),
// chosen once per process from PD2BW_CPU_KERNELS (auto | baseline | avx2 | avx512; default auto, the
// best this CPU has). Never throws: an unusable PD2BW_CPU_KERNELS is described as such (the backend
// itself then refuses to start with a pd2bw::UsageError).
std::string cpu_kernels_description();

}  // namespace pd2bw::executor

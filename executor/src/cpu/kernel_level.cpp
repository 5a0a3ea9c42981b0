// The CPU kernels' instruction-set level: detected with cpuid (via the compiler's builtin, which also
// checks that the OS saves the wide registers), or forced with PD2BW_CPU_KERNELS.
#include "cpu/kernel_level.hpp"

#include <fmt/format.h>

#include <cstdlib>
#include <string>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/cpu_kernels.hpp"

namespace pd2bw::executor::cpu::detail {
namespace {

constexpr const char* kEnv = "PD2BW_CPU_KERNELS";

KernelLevel decide() {
  const char* env = std::getenv(kEnv);
  const std::string want = env == nullptr ? "auto" : env;
  if (want.empty() || want == "auto") return best_kernel_level();
  for (KernelLevel level : {KernelLevel::baseline, KernelLevel::avx2, KernelLevel::avx512}) {
    if (want != kernel_level_name(level)) continue;
    if (!kernel_level_supported(level))
      throw UsageError(fmt::format("{}={}: this CPU lacks the instructions of that level (its best is {})", kEnv, want,
                                   kernel_level_name(best_kernel_level())),
                       fmt::format("unset {} or choose auto, baseline or a level the CPU has", kEnv));
    return level;
  }
  throw UsageError(fmt::format("{}={} is not a CPU kernel level", kEnv, want),
                   fmt::format("set {} to auto, baseline, avx2 or avx512", kEnv));
}

}  // namespace

bool kernel_level_supported(KernelLevel level) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  switch (level) {
    case KernelLevel::baseline:
      return true;
    case KernelLevel::avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case KernelLevel::avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("fma");
  }
  return false;
#else
  return level == KernelLevel::baseline;
#endif
}

KernelLevel best_kernel_level() {
  if (kernel_level_supported(KernelLevel::avx512)) return KernelLevel::avx512;
  if (kernel_level_supported(KernelLevel::avx2)) return KernelLevel::avx2;
  return KernelLevel::baseline;
}

std::string_view kernel_level_name(KernelLevel level) {
  switch (level) {
    case KernelLevel::avx2:
      return "avx2";
    case KernelLevel::avx512:
      return "avx512";
    case KernelLevel::baseline:
      break;
  }
  return "baseline";
}

KernelLevel kernel_level() {
  static const KernelLevel level = decide();  // a throwing first call leaves it undecided
  return level;
}

}  // namespace pd2bw::executor::cpu::detail

namespace pd2bw::executor {

std::string cpu_kernels_description() {
  using namespace cpu::detail;
  try {
    const KernelLevel level = kernel_level();
    const char* env = std::getenv(kEnv);
    return fmt::format(
        "{} ({})", kernel_level_name(level),
        env != nullptr && *env != '\0' ? fmt::format("{}={}", kEnv, env) : std::string("best of this CPU"));
  } catch (const Error& e) {
    return fmt::format("unusable: {}", e.what());
  }
}

}  // namespace pd2bw::executor

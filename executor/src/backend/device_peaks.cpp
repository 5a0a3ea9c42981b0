// The dense peak rates of known GPUs (vendor datasheets, no sparsity), for MFU. Matched by the device
// name the driver reports, most specific entry first.
#include <array>
#include <string_view>

#include "pd2bw/executor/device.hpp"

namespace pd2bw::executor {

namespace {

struct Peak {
  std::string_view name_part;  // a substring of the reported name
  double bf16_tflops;          // tensor cores, fp32 accumulate
  double fp32_tflops;          // CUDA cores
};

constexpr std::array<Peak, 9> kPeaks = {{
    {"H200 NVL", 835.0, 60.0},
    {"H200", 989.4, 66.9},
    {"GH200", 989.4, 66.9},
    {"H100 NVL", 835.0, 60.0},
    {"H100 PCIe", 756.0, 51.2},
    {"H100", 989.4, 66.9},
    {"A100", 312.0, 19.5},
    {"L40S", 362.1, 91.6},
    {"A10", 125.0, 31.2},
}};

}  // namespace

double peak_tflops(std::string_view device_name, std::string_view dtype) {
  for (const Peak& p : kPeaks)
    if (device_name.find(p.name_part) != std::string_view::npos) return dtype == "bf16" ? p.bf16_tflops : p.fp32_tflops;
  return 0;
}

}  // namespace pd2bw::executor

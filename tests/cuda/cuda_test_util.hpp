// Shared helpers of the GPU tests: one tensor held on both the cpu backend (host memory) and the cuda
// backend (device memory) with the same values, and the relative error the parity tests bound.
//
// Parity metric: max |gpu - cpu| / max |cpu| over a tensor (the max-norm relative error), so that a sum
// that cancels to near zero in one element is judged against the tensor's scale, not its own.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "executor_test_util.hpp"
#include "pd2bw/executor/backend.hpp"

namespace pd2bw::test {

using executor::Backend;
using executor::bf16;
using executor::Buffer;
using executor::ConstView;
using executor::DType;
using executor::View;

// Tolerances of the op parity tables: same dtype on both backends, same inputs.
inline constexpr double kFp32Tolerance = 1e-5;
inline constexpr double kBf16Tolerance = 1e-2;
inline double tolerance(DType t) { return t == DType::bf16 ? kBf16Tolerance : kFp32Tolerance; }

inline double max_norm_error(const std::vector<float>& gpu, const std::vector<float>& cpu) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(gpu.at(i)) - static_cast<double>(cpu[i])));
    scale = std::max(scale, std::abs(static_cast<double>(cpu[i])));
  }
  if (!std::isfinite(diff)) return INFINITY;
  return scale > 0 ? diff / scale : diff;
}

// A tensor of `dtype` (f32, bf16 or i32) with the same contents on both backends. Values are rounded
// to the dtype once, so both backends start from identical bits.
class Twin {
 public:
  Twin(Backend& gpu, DType dtype, const std::vector<float>& values) : gpu_(&gpu), dtype_(dtype) {
    const auto n = static_cast<int64_t>(values.size());
    host_.resize(static_cast<size_t>(n * executor::dtype_bytes(dtype)));
    for (int64_t i = 0; i < n; ++i) {
      const float v = values[static_cast<size_t>(i)];
      if (dtype == DType::bf16) {
        const bf16 h(v);
        std::memcpy(host_.data() + 2 * i, &h, 2);
      } else if (dtype == DType::i32) {
        const auto id = static_cast<int32_t>(v);
        std::memcpy(host_.data() + 4 * i, &id, 4);
      } else {
        std::memcpy(host_.data() + 4 * i, &v, 4);
      }
    }
    device_ = gpu.alloc(dtype, n);
    gpu.from_host(host_.data(), device_.view());
  }
  // n values uniform in [-scale, scale) from the seed (0: zeros).
  static Twin random(Backend& gpu, DType dtype, int64_t n, uint64_t seed, double scale = 1.0) {
    return Twin(gpu, dtype, seed == 0 ? std::vector<float>(static_cast<size_t>(n), 0.0F) : random_values<float>(n, seed, scale));
  }
  static Twin ids(Backend& gpu, const std::vector<int32_t>& ids) {
    return Twin(gpu, DType::i32, std::vector<float>(ids.begin(), ids.end()));
  }
  int64_t numel() const { return device_.numel(); }
  View cpu() { return {host_.data(), dtype_, numel()}; }
  View gpu() { return device_.view(); }
  View cpu_slice(int64_t at, int64_t n) { return cpu().slice(at, n); }
  View gpu_slice(int64_t at, int64_t n) { return gpu().slice(at, n); }
  std::vector<float> cpu_values() const { return widen(host_); }
  std::vector<float> gpu_values() const {
    std::vector<std::byte> bytes(host_.size());
    gpu_->to_host(device_.view(), bytes.data());
    return widen(bytes);
  }
  // max |gpu - cpu| / max |cpu|.
  double error() const { return max_norm_error(gpu_values(), cpu_values()); }

 private:
  std::vector<float> widen(const std::vector<std::byte>& bytes) const {
    std::vector<float> out(static_cast<size_t>(numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      if (dtype_ == DType::bf16) {
        bf16 h;
        std::memcpy(&h, bytes.data() + 2 * i, 2);
        out[i] = static_cast<float>(h);
      } else if (dtype_ == DType::i32) {
        int32_t id = 0;
        std::memcpy(&id, bytes.data() + 4 * i, 4);
        out[i] = static_cast<float>(id);
      } else {
        std::memcpy(&out[i], bytes.data() + 4 * i, 4);
      }
    }
    return out;
  }

  Backend* gpu_;
  DType dtype_;
  std::vector<std::byte> host_;
  Buffer device_;
};

// The error of one output within the dtype's tolerance, with the context in the report.
#define PD2BW_CHECK_PARITY(twin, dtype, what)                                                 \
  do {                                                                                        \
    const double err_ = (twin).error();                                                       \
    INFO(what << ": max-norm relative error " << err_ << " (tolerance " << pd2bw::test::tolerance(dtype) << ")"); \
    CHECK(err_ <= pd2bw::test::tolerance(dtype));                                             \
  } while (0)

}  // namespace pd2bw::test

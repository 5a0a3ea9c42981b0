// How the cpu backend runs an op in a given compute dtype: f64 and f32 buffers are used in place; bf16
// buffers are widened to fp32 on the way in and rounded (nearest even) on the way out, so every bf16 op
// computes and accumulates in fp32 with the fp32 reference code and only storage is 16-bit. Private to
// the cpu backend.
#pragma once

#include <fmt/format.h>

#include <type_traits>
#include <vector>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/backend.hpp"

namespace pd2bw::executor::cpu {

void widen(const bf16* src, float* dst, int64_t n);
void narrow(const float* src, bf16* dst, int64_t n);

// T is the arithmetic type (double for f64, float for f32 and bf16).
template <typename T>
class Staged {
 public:
  explicit Staged(DType compute) : compute_(compute) {}
  Staged(const Staged&) = delete;
  Staged& operator=(const Staged&) = delete;

  // A compute-dtype input (nullptr when empty).
  const T* in(ConstView v) { return v.empty() ? nullptr : stage_in(v, compute_); }
  // A compute-dtype output, written back by commit().
  T* out(View v) { return v.empty() ? nullptr : stage_out(v, compute_, false); }
  // A compute-dtype buffer read and written (accumulate).
  T* inout(View v) { return v.empty() ? nullptr : stage_out(v, compute_, true); }
  // Accumulate-dtype buffers (gradients, statistics): always used in place.
  T* acc(View v) { return v.empty() ? nullptr : direct<T>(v.data, v.dtype, accumulate_dtype(compute_)); }
  const T* acc(ConstView v) { return v.empty() ? nullptr : direct<const T>(v.data, v.dtype, accumulate_dtype(compute_)); }
  static const int32_t* ids(ConstView v) { return direct<const int32_t>(v.data, v.dtype, DType::i32); }
  // Rounds every staged output into its bf16 buffer.
  void commit() {
    for (const auto& [index, view] : outs_) narrow(temps_[index].data(), view.template as<bf16>(), view.numel);
    outs_.clear();
  }

 private:
  template <typename P>
  static P* direct(auto* data, DType have, DType want) {
    if (have != want)
      throw UsageError(fmt::format("cpu backend: a {} buffer where the op needs {}", to_string(have), to_string(want)));
    return static_cast<P*>(data);
  }
  const T* stage_in(ConstView v, DType want) {
    if constexpr (std::is_same_v<T, float>) {
      if (v.dtype == DType::bf16 && want == DType::bf16) {
        auto& t = temps_.emplace_back(static_cast<size_t>(v.numel));
        widen(v.as<bf16>(), t.data(), v.numel);
        return t.data();
      }
    }
    return direct<const T>(v.data, v.dtype, want);
  }
  T* stage_out(View v, DType want, bool read) {
    if constexpr (std::is_same_v<T, float>) {
      if (v.dtype == DType::bf16 && want == DType::bf16) {
        auto& t = temps_.emplace_back(static_cast<size_t>(v.numel));
        if (read) widen(v.as<bf16>(), t.data(), v.numel);
        outs_.emplace_back(temps_.size() - 1, v);
        return t.data();
      }
    }
    return direct<T>(v.data, v.dtype, want);
  }

  DType compute_;
  std::vector<std::vector<float>> temps_;          // moved on growth: their data pointers stay valid
  std::vector<std::pair<size_t, View>> outs_;      // temps_ index -> bf16 destination
};

// Runs f(staged) with the arithmetic type of `compute` and commits its outputs.
template <typename F>
void run_staged(DType compute, F&& f) {
  if (compute == DType::f64) {
    Staged<double> s(compute);
    f(s);
    s.commit();
  } else if (compute == DType::f32 || compute == DType::bf16) {
    Staged<float> s(compute);
    f(s);
    s.commit();
  } else {
    throw UsageError(fmt::format("cpu backend: no op computes in {}", to_string(compute)));
  }
}

}  // namespace pd2bw::executor::cpu

// Element types of the executor's buffers, and bf16 as a plain 16-bit value type.
//
// Precision is a setting of its own: the compute dtype (what activations, stashes and the weight
// versions the layers read are stored in) is separate from the dtype of master weights, gradients and
// optimizer moments. fp32 and double compute keep everything in one type; bf16 compute keeps fp32 for
// the master weights, the gradients, the moments and the small per-row statistics (layer-norm mean and
// rstd, log-sum-exp), and accumulates every reduction in fp32.
#pragma once

#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace pd2bw::executor {

enum class DType { f32, f64, bf16, i32 };

// Bytes per element: 4, 8, 2, 4.
constexpr int64_t dtype_bytes(DType t) {
  switch (t) {
    case DType::f64: return 8;
    case DType::bf16: return 2;
    default: return 4;
  }
}

// "float", "double", "bf16", "int32" (the names `pd2bw train --dtype` takes for the float types).
std::string_view to_string(DType t);
// Parses "float"/"fp32"/"f32", "double"/"fp64"/"f64", "bf16"/"bfloat16". Throws UsageError otherwise.
DType parse_compute_dtype(std::string_view name);

// The dtype reductions, parameter gradients and per-row statistics use for a compute dtype: fp32 for
// bf16, the compute dtype itself otherwise.
constexpr DType accumulate_dtype(DType compute) { return compute == DType::bf16 ? DType::f32 : compute; }

// bfloat16: the upper 16 bits of an IEEE fp32. Conversion from float rounds to nearest, ties to even;
// NaN stays NaN (quiet), infinities and signed zeros are kept.
struct bf16 {
  uint16_t bits = 0;

  constexpr bf16() = default;
  explicit bf16(float f) : bits(round(f)) {}
  explicit operator float() const { return std::bit_cast<float>(static_cast<uint32_t>(bits) << 16); }
  friend bool operator==(bf16 a, bf16 b) { return a.bits == b.bits; }

 private:
  static uint16_t round(float f) {
    const auto u = std::bit_cast<uint32_t>(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0) return static_cast<uint16_t>((u >> 16) | 0x40u);
    const uint32_t lsb = (u >> 16) & 1u;
    return static_cast<uint16_t>((u + 0x7fffu + lsb) >> 16);
  }
};

template <typename T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() { return DType::f32; }
template <>
constexpr DType dtype_of<double>() { return DType::f64; }
template <>
constexpr DType dtype_of<bf16>() { return DType::bf16; }
template <>
constexpr DType dtype_of<int32_t>() { return DType::i32; }

}  // namespace pd2bw::executor

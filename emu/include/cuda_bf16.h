// bfloat16 on the emulated device: the storage type and the conversions pd2bw's kernels use, with the
// device's rounding (to nearest, ties to even; a NaN becomes the canonical quiet NaN 0x7fff).
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  unsigned short __x;
  __nv_bfloat16() = default;
};
using nv_bfloat16 = __nv_bfloat16;

namespace pd2bw_emu {
inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// The upper half of f's bits, rounded to nearest even.
inline unsigned short bf16_bits_rn(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return 0x7fff;
  const uint32_t lsb = (u >> 16) & 1u;
  return static_cast<unsigned short>((u + 0x7fffu + lsb) >> 16);
}
}  // namespace pd2bw_emu

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  __nv_bfloat16 b;
  b.__x = pd2bw_emu::bf16_bits_rn(f);
  return b;
}
inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
inline float __bfloat162float(__nv_bfloat16 b) { return pd2bw_emu::bits_float(static_cast<uint32_t>(b.__x) << 16); }
// One rounding of the double: it is first cut to a float with round-to-odd (exact whenever the float
// holds it, else the truncation with its lowest bit set), which carries enough bits for the rounding to
// bf16 to be the one a direct rounding gives.
inline __nv_bfloat16 __double2bfloat16(double d) {
  if (d != d) return __float2bfloat16_rn(static_cast<float>(d));
  float f = static_cast<float>(d);  // to nearest
  if (static_cast<double>(f) != d) {
    uint32_t u = pd2bw_emu::float_bits(f);
    const bool beyond = (d < 0) ? static_cast<double>(f) < d : static_cast<double>(f) > d;
    if (beyond) u -= 1;  // one step toward zero: the truncation (from an overflow to inf this gives FLT_MAX)
    u |= 1u;
    f = pd2bw_emu::bits_float(u);
  }
  return __float2bfloat16_rn(f);
}

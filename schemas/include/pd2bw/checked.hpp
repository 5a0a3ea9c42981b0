// Overflow-safe integer arithmetic for sizes, counts and bytes, shared by every pd2bw library. Two
// flavours: checked_* throws UsageError naming what overflowed (for totals built from user input, where
// a clear error is the answer), saturating_* clamps to INT64_MAX (for hot loops that only compare the
// result against a limit: a size that does not fit in 64 bits does not fit in any device either).
#pragma once

#include <bit>
#include <cstdint>
#include <string>
#include <string_view>

#include "pd2bw/error.hpp"

namespace pd2bw {

namespace detail {
[[noreturn]] inline void throw_overflow(std::string_view what, char op, int64_t a, int64_t b) {
  throw UsageError(std::string(what) + " overflows int64 (" + std::to_string(a) + " " + op + " " +
                       std::to_string(b) + ")",
                   "check the sizes and counts in the input files and flags; no device holds 2^63 bytes");
}
}  // namespace detail

// a + b. Throws UsageError("<what> overflows int64 (a + b)") when the sum does not fit.
inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out)) detail::throw_overflow(what, '+', a, b);
  return out;
}

// a * b. Throws UsageError("<what> overflows int64 (a x b)") when the product does not fit.
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out)) detail::throw_overflow(what, 'x', a, b);
  return out;
}

// a + b for a, b >= 0, clamped to INT64_MAX.
constexpr int64_t saturating_add(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_add_overflow(a, b, &out) ? INT64_MAX : out;
}

// a * b for a, b >= 0, clamped to INT64_MAX.
constexpr int64_t saturating_mul(int64_t a, int64_t b) {
  int64_t out = 0;
  return __builtin_mul_overflow(a, b, &out) ? INT64_MAX : out;
}

// log2(n) when n is a power of two, else -1: a hot loop divides by such an n with a shift (n >> k is
// n / 2^k for n >= 0).
constexpr int exact_log2(uint64_t n) { return std::has_single_bit(n) ? std::countr_zero(n) : -1; }

}  // namespace pd2bw

// Overflow-safe arithmetic on sizes, counts and bytes: every product or sum of values that come from
// files or flags goes through these, so a hostile input gives a clear error instead of a wrapped
// (negative) number or undefined behaviour.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "pd2bw/error.hpp"

namespace pd2bw {

// a * b, or throws UsageError("<what> overflows int64 ...") when the exact product does not fit.
inline int64_t checked_mul(int64_t a, int64_t b, std::string_view what) {
  int64_t out = 0;
  if (__builtin_mul_overflow(a, b, &out))
    throw UsageError(std::string(what) + " overflows int64 (" + std::to_string(a) + " x " + std::to_string(b) + ")",
                     "the sizes in the input are too large; check the file or the flags");
  return out;
}

// a + b, or throws UsageError("<what> overflows int64 ...") when the exact sum does not fit.
inline int64_t checked_add(int64_t a, int64_t b, std::string_view what) {
  int64_t out = 0;
  if (__builtin_add_overflow(a, b, &out))
    throw UsageError(std::string(what) + " overflows int64 (" + std::to_string(a) + " + " + std::to_string(b) + ")",
                     "the sizes in the input are too large; check the file or the flags");
  return out;
}

}  // namespace pd2bw

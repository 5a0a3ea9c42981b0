// Helpers shared by the planner's tests: comparing objectives and step times that the planner and a
// reference compute with the same terms in another order.
#pragma once

#include <algorithm>
#include <cmath>

namespace pd2bw::testing {

// The relative tolerance of such comparisons: sums of the same terms in another order round differently.
inline constexpr double kRelTol = 1e-9;

// Whether a and b agree within kRelTol of the larger magnitude (exactly equal infinities included).
inline bool close_rel(double a, double b) {
  if (a == b) return true;
  return std::abs(a - b) <= kRelTol * std::max(std::abs(a), std::abs(b));
}

}  // namespace pd2bw::testing

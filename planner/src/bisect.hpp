// Private helper of pd2bw_planner: the one integer bisection of the planner, written so that no
// intermediate overflows (an earlier `lo + (hi - lo + 1) / 2` overflowed at hi = INT64_MAX and looped).
#pragma once

#include <concepts>
#include <type_traits>

namespace pd2bw::planner::detail {

// The largest x in [lo, hi] with ok(x), given ok(lo) and that ok holds on a prefix of the range (true,
// then false). Requires lo <= hi. Each probe is the upper midpoint hi - (hi - lo) / 2, which never
// leaves [lo, hi] for any lo <= hi of a signed or unsigned type (hi - lo is taken in the unsigned type,
// so even lo < 0 < hi cannot overflow).
template <std::integral I, class Ok>
I last_true(I lo, I hi, Ok&& ok) {
  using U = std::make_unsigned_t<I>;
  while (lo < hi) {
    const I mid = static_cast<I>(hi - static_cast<I>((static_cast<U>(hi) - static_cast<U>(lo)) / 2));
    if (ok(mid))
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

}  // namespace pd2bw::planner::detail

// Private helper of pd2bw_planner: the one integer bisection of the planner, and its galloping forms,
// written so that no intermediate overflows (an earlier `lo + (hi - lo + 1) / 2` overflowed at
// hi = INT64_MAX and looped).
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

// The largest x in [lo, hi] with ok(x), given ok(lo) (never asked) and that ok holds on a prefix:
// galloping up from lo (lo + 1, lo + 3, lo + 7, ... capped at hi), then last_true between the last true
// probe and the first false one, so O(log(x - lo)) probes. Requires lo <= hi.
template <std::integral I, class Ok>
I gallop(I lo, I hi, Ok&& ok) {
  using U = std::make_unsigned_t<I>;
  I good = lo;
  U step = 1;
  while (good < hi) {
    const I probe =
        static_cast<U>(hi) - static_cast<U>(good) <= step ? hi : static_cast<I>(good + static_cast<I>(step));
    if (!ok(probe)) return last_true(good, static_cast<I>(probe - 1), [&](I x) { return x == good || ok(x); });
    good = probe;
    step *= 2;
  }
  return good;
}

// The same searched from a guess in [lo, hi]: galloping up from it when ok(guess), else down from it
// (guess - 1, guess - 3, guess - 7, ... floored at lo) and then last_true, so O(log |x - guess|) probes.
template <std::integral I, class Ok>
I gallop_from(I lo, I hi, I guess, Ok&& ok) {
  if (guess <= lo) return gallop(lo, hi, ok);
  if (ok(guess)) return gallop(guess, hi, ok);
  using U = std::make_unsigned_t<I>;
  I bad = guess;  // not ok(bad)
  U step = 1;
  while (true) {
    const I probe = static_cast<U>(bad) - static_cast<U>(lo) <= step ? lo : static_cast<I>(bad - static_cast<I>(step));
    if (probe == lo || ok(probe))
      return last_true(probe, static_cast<I>(bad - 1), [&](I x) { return x == probe || ok(x); });
    bad = probe;
    step *= 2;
  }
}

}  // namespace pd2bw::planner::detail

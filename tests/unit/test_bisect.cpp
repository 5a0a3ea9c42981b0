// The planner's integer searches (planner/src/bisect.hpp): last_true, gallop and gallop_from find the
// last true point of every prefix predicate, from every guess, probe only inside their range (gallop never
// asks its lower end), and stay exact at the ends of int64_t.
#include <doctest/doctest.h>

#include <cstdint>
#include <initializer_list>
#include <limits>

#include "bisect.hpp"

namespace {

using pd2bw::planner::detail::gallop;
using pd2bw::planner::detail::gallop_from;
using pd2bw::planner::detail::last_true;

// ok(x) = x <= answer, checking that every probe lies in [lo, hi] and (for the gallops) is not lo.
struct Prefix {
  int64_t lo, hi, answer;
  bool lo_allowed;
  int64_t probes = 0;
  bool operator()(int64_t x) {
    ++probes;
    REQUIRE(x >= lo);
    REQUIRE(x <= hi);
    if (!lo_allowed) REQUIRE(x != lo);
    return x <= answer;
  }
};

}  // namespace

TEST_CASE("every search finds the last true point of every prefix in small ranges, from every guess") {
  for (int64_t lo = -3; lo <= 3; ++lo)
    for (int64_t hi = lo; hi <= lo + 40; ++hi)
      for (int64_t answer = lo; answer <= hi; ++answer) {
        Prefix a{lo, hi, answer, true};
        CHECK(last_true(lo, hi, [&](int64_t x) { return a(x); }) == answer);
        Prefix g{lo, hi, answer, false};
        CHECK(gallop(lo, hi, [&](int64_t x) { return g(x); }) == answer);
        for (int64_t guess = lo; guess <= hi; ++guess) {
          Prefix f{lo, hi, answer, false};
          CHECK(gallop_from(lo, hi, guess, [&](int64_t x) { return f(x); }) == answer);
          // O(log |answer - guess|) probes: at most 2 log2(distance + 2) + 3.
          int64_t bits = 0;
          for (int64_t span = (answer > guess ? answer - guess : guess - answer) + 2; span > 1; span /= 2) ++bits;
          CHECK(f.probes <= 2 * bits + 3);
        }
      }
}

TEST_CASE("the searches stay exact at the ends of int64_t") {
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min(), kMax = std::numeric_limits<int64_t>::max();
  for (const int64_t answer : {kMin, kMin + 1, int64_t{-1}, int64_t{0}, int64_t{1} << 40, kMax - 1, kMax}) {
    Prefix a{kMin, kMax, answer, true};
    CHECK(last_true(kMin, kMax, [&](int64_t x) { return a(x); }) == answer);
    Prefix g{kMin, kMax, answer, false};
    CHECK(gallop(kMin, kMax, [&](int64_t x) { return g(x); }) == answer);
    CHECK(g.probes <= 130);
    for (const int64_t guess : {kMin, int64_t{0}, kMax}) {
      Prefix f{kMin, kMax, answer, false};
      CHECK(gallop_from(kMin, kMax, guess, [&](int64_t x) { return f(x); }) == answer);
      CHECK(f.probes <= 130);
    }
  }
}

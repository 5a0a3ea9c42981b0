// The overflow-safe helpers of pd2bw/checked.hpp: exact results in range, a UsageError naming the quantity
// when checked arithmetic overflows, and a clamp to INT64_MAX when saturating arithmetic does.
#include <doctest/doctest.h>

#include <cstdint>
#include <limits>
#include <string>

#include "pd2bw/checked.hpp"

namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();

std::string overflow_message(int64_t a, int64_t b, bool mul) {
  try {
    (void)(mul ? pd2bw::checked_mul(a, b, "stage weights") : pd2bw::checked_add(a, b, "stage weights"));
  } catch (const pd2bw::UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("checked arithmetic is exact in range and names what overflowed") {
  CHECK(pd2bw::checked_add(kMax - 1, 1, "x") == kMax);
  CHECK(pd2bw::checked_mul(int64_t{1} << 31, int64_t{1} << 31, "x") == int64_t{1} << 62);
  CHECK(pd2bw::checked_mul(-3, 4, "x") == -12);
  const std::string add = overflow_message(kMax, 1, false);
  CHECK(add.find("stage weights overflows int64") == 0);
  CHECK(add.find(std::to_string(kMax) + " + 1") != std::string::npos);
  const std::string mul = overflow_message(int64_t{1} << 32, int64_t{1} << 31, true);
  CHECK(mul.find("stage weights overflows") == 0);
  CHECK(mul.find("x 2147483648") != std::string::npos);
  CHECK_THROWS_AS(pd2bw::checked_mul(kMax, 2, "x"), pd2bw::UsageError);
}

TEST_CASE("saturating arithmetic clamps to INT64_MAX") {
  static_assert(pd2bw::saturating_add(2, 3) == 5);
  static_assert(pd2bw::saturating_mul(6, 7) == 42);
  CHECK(pd2bw::saturating_add(kMax, 1) == kMax);
  CHECK(pd2bw::saturating_add(kMax - 5, 5) == kMax);
  CHECK(pd2bw::saturating_mul(kMax / 2 + 1, 2) == kMax);
  CHECK(pd2bw::saturating_mul(int64_t{1} << 40, int64_t{1} << 40) == kMax);
  CHECK(pd2bw::saturating_mul(0, kMax) == 0);
}

// The replay search's store (planner/src/replays.hpp): a replay set is read back, a reset one is gone from
// both the look-up and the list the ranking reads (so a candidate whose split changed is not ranked by its
// old split's replay), setting it again brings the new replay back once, a reset of a candidate never
// replayed changes nothing, and each replay keeps the bounds of the split it started from.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "replays.hpp"

using pd2bw::planner::Evaluated;
using pd2bw::planner::detail::Replays;

namespace {

Evaluated replay_of(double step_ms) {
  Evaluated e;
  e.step_ms = step_ms;
  return e;
}

std::vector<size_t> sorted(std::vector<size_t> v) {
  std::sort(v.begin(), v.end());
  return v;
}

}  // namespace

TEST_CASE("replays: set, reset and set again, each step checked") {
  Replays r(10);
  CHECK(r[3] == nullptr);
  CHECK(r.indices().empty());
  r.reset(3);  // never set: nothing to drop
  CHECK(r.indices().empty());

  r.set(3, replay_of(30.0), {0, 3, 9});
  r.set(7, replay_of(70.0), {0, 7, 9});
  REQUIRE(r[3] != nullptr);
  CHECK(r[3]->step_ms == 30.0);
  CHECK(r[7]->step_ms == 70.0);
  CHECK(r.from(3) == std::vector<int64_t>{0, 3, 9});
  CHECK(sorted(r.indices()) == std::vector<size_t>{3, 7});

  r.reset(3);
  CHECK(r[3] == nullptr);
  REQUIRE(r[7] != nullptr);
  CHECK(r[7]->step_ms == 70.0);
  CHECK(r.indices() == std::vector<size_t>{7});
  r.reset(3);  // twice: still gone, the other kept
  CHECK(r.indices() == std::vector<size_t>{7});

  r.set(3, replay_of(31.0), {0, 4, 9});  // the candidate's new split, replayed
  REQUIRE(r[3] != nullptr);
  CHECK(r[3]->step_ms == 31.0);
  CHECK(r.from(3) == std::vector<int64_t>{0, 4, 9});        // the split it started from, the new one's
  CHECK(sorted(r.indices()) == std::vector<size_t>{3, 7});  // listed once

  r.set(7, replay_of(71.0), {0, 6, 9});  // replaced in place
  CHECK(r[7]->step_ms == 71.0);
  CHECK(r.from(7) == std::vector<int64_t>{0, 6, 9});
  CHECK(sorted(r.indices()) == std::vector<size_t>{3, 7});
  CHECK(r[0] == nullptr);
  CHECK(r[9] == nullptr);
}

// 2bw's steady cycles (objective.hpp's TwoBwCycleFold; replay.cpp replays the split it picks and counts
// its objective in the proven gap). On small random instances, for every split of every 2bw candidate:
// the replay is never below the cycle bound written out here from its definition (every pair of stages
// s < k with k - s <= m - 2), the bound is above the lanes on many splits and equals the replay on many
// of those; and two_bw_cycle_split's objective is the least of the bound (with tau = bound / m, or the
// lower charge where t_s is below it, in place of t_s per stage between) over the splits whose lanes fit
// the bound, found here by enumeration.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <vector>

#include "brute_force.hpp"
#include "partition_internal.hpp"
#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/search.hpp"
#include "random_instances.hpp"
#include "search_internal.hpp"

namespace {

using pd2bw::planner::Candidate;
using pd2bw::planner::CostModel;
using pd2bw::planner::Evaluated;
using pd2bw::planner::Split;
using pd2bw::planner::StageCost;
using pd2bw::schemas::Schedule;

// Stage j's t on the fastest links, added in the program's order (so the busiest stage meets its charge).
double t_of(const std::vector<StageCost>& st, int64_t j) {
  const StageCost& x = st[static_cast<size_t>(j)];
  return (x.in_ms + x.forward_ms + x.out_ms) + (x.out_ms + x.backward_ms + x.in_ms);
}

// The largest cycle through stages s < k (k - s <= m - 2): (m - 1 - (k - s)) t_s + sum_{s<j<k} u_j
// + 2 t_k - 2 p_k + h_k, with t = f + b + 2 p + 2 q and u = f + b + 2 q on the fastest links. With
// `tau` > 0 each stage from s to k - 1 is charged tau instead of t_s (tau_low where t_s <= tau_low), and
// s is a cycle's first stage only when every k is within m - 2 of it (the program's rule); -infinity
// when no pair qualifies.
double cycle_bound(const std::vector<StageCost>& st, double m, double tau = 0.0, double tau_low = 0.0) {
  const auto d = static_cast<int64_t>(st.size());
  auto t = [&](int64_t j) { return t_of(st, j); };
  double most = -std::numeric_limits<double>::infinity();
  for (int64_t s = 0; s < d; ++s) {
    if (tau > 0 && static_cast<double>(d - 1 - s) > m - 2.0) continue;
    for (int64_t k = s + 1; k < d && static_cast<double>(k - s) <= m - 2.0; ++k) {
      const StageCost& sk = st[static_cast<size_t>(k)];
      const double per = tau <= 0 ? t(s) : t(s) <= tau_low ? tau_low : tau;
      double w = (m - 1.0) * t(s) - static_cast<double>(k - s) * per;
      for (int64_t j = s + 1; j < k; ++j) w += t(j) - 2.0 * st[static_cast<size_t>(j)].in_ms;
      w += 2.0 * t(k) - 2.0 * sk.in_ms + sk.allreduce_ms + sk.update_ms;
      most = std::max(most, w);
    }
  }
  return most;
}

double lanes(const std::vector<StageCost>& st) {
  double most = 0.0;
  for (const auto& x : st) most = std::max(most, x.step_ms);
  return most;
}

}  // namespace

TEST_CASE("2bw: no split replays below its steady cycles, which the lanes miss and the replay often meets") {
  int64_t splits = 0, above = 0, tight = 0, programs = 0, raised = 0;
  for (uint64_t seed = 1; seed <= 3000; ++seed) {
    const auto inst = pd2bw::testing::make_random_instance(seed);
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    pd2bw::testing::for_each_candidate(model, [&](const Candidate& c) {
      if (c.schedule != Schedule::two_bw || c.depth < 2) return;
      CAPTURE(inst.describe());
      CAPTURE(c.depth);
      CAPTURE(c.microbatches);
      const double m = static_cast<double>(c.microbatches);
      double most_lanes = 0.0, least_replay = std::numeric_limits<double>::infinity(), busiest = 0.0;
      std::vector<std::vector<int64_t>> all;
      pd2bw::testing::for_each_split(model, c,
                                     [&](const std::vector<int64_t>& bounds, const std::vector<StageCost>& st) {
                                       Split s;
                                       s.bounds = bounds;
                                       Evaluated e = pd2bw::planner::evaluate_split(model, c, s);
                                       pd2bw::planner::detail::replay_into(model, e);
                                       const double cycles = cycle_bound(st, m), lane = lanes(st);
                                       CHECK(e.step_ms >= std::max(lane, cycles) * (1.0 - 1e-9));
                                       ++splits;
                                       if (cycles > lane * (1.0 + 1e-9)) {
                                         ++above;
                                         tight += e.step_ms <= cycles * (1.0 + 1e-9) ? 1 : 0;
                                       }
                                       most_lanes = std::max(most_lanes, lane);
                                       if (e.step_ms < least_replay) {  // the lower charge: the busiest t of the best
                                                                        // replay's split
                                         least_replay = e.step_ms;
                                         busiest = 0.0;
                                         for (int64_t j = 0; j < c.depth; ++j) busiest = std::max(busiest, t_of(st, j));
                                       }
                                       all.push_back(bounds);
                                     });
      if (all.empty()) return;
      // The program against the enumeration, at the best replay (as the search asks) and at a bound every
      // split's lanes fit.
      for (const double bound : {least_replay, most_lanes * 1.01}) {
        const double tau = bound / m;
        double least = std::numeric_limits<double>::infinity(), least_lanes = least;
        pd2bw::testing::for_each_split(model, c, [&](const std::vector<int64_t>&, const std::vector<StageCost>& st) {
          if (lanes(st) > bound) return;
          least = std::min(least, std::max(lanes(st), cycle_bound(st, m, tau, std::min(tau, busiest))));
          least_lanes = std::min(least_lanes, lanes(st));
        });
        raised += least > least_lanes * (1.0 + 1e-9) ? 1 : 0;
        const Split found = pd2bw::planner::detail::two_bw_cycle_split(model, c, bound, busiest, INT64_MAX);
        CHECK_FALSE(found.exhausted);
        if (found.feasible())
          CHECK(found.step_ms == doctest::Approx(least).epsilon(1e-9));
        else
          CHECK(least > bound);
        ++programs;
      }
    });
  }
  MESSAGE(splits << " splits, " << above << " with a cycle above their lanes, " << tight << " of which replay at it; "
                 << programs << " programs, " << raised << " of whose least objective the cycles raise");
  CHECK(above > 200);
  CHECK(tight > 150);
  CHECK(raised > 100);
}

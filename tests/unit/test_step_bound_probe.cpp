// StepLowerBound's probe (step_bound.hpp): refined() asks lanes_reach and rules_out of one candidate at
// many limits through one Probe, which narrows each walk between the walks it has made and answers from
// the intervals they decided. Its answers must be exactly those of fresh calls at every limit, in any
// order of limits, or the search's bounds (and so its plans) would change.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/partition.hpp"
#include "pd2bw/planner/search.hpp"
#include "random_instances.hpp"
#include "search_internal.hpp"
#include "step_bound_links.hpp"
#include "step_bound_order.hpp"

namespace pd2bw::planner {

struct StepLowerBoundProbeTest {
  int64_t asked = 0, decided = 0;  // limits asked; of them, answered by an interval without a walk

  static std::shared_ptr<const StepLowerBound::PlacementLevels> levels(const StepLowerBound& b, const Candidate& c) {
    return b.placement_levels(c);
  }

  // least_busy at t with and without rules_out's early stop, and flush_redo_rules_out at each.
  struct Busy {
    double early, full;
    bool redo_early, redo_full;
  };
  static Busy busy_both(const StepLowerBound& b, const Candidate& c, double t) {
    StepLowerBound::Probe p(b, c);
    b.prepare_rules(p);
    Busy out{b.least_busy(p, t, true), b.least_busy(p, t, false), false, false};
    out.redo_early = b.flush_redo_rules_out(p, t, out.early);
    out.redo_full = b.flush_redo_rules_out(p, t, out.full);
    return out;
  }

  // The limits a bisection toward the candidate's threshold asks (directed by fresh calls), then limits
  // scattered about it: the probe must agree with a fresh call at each.
  void check(StepLowerBound& bound, const Candidate& c, testing::Rng& rng) {
    const double base = bound(c);
    if (!(base > 0.0) || !(base < kInfinity)) return;
    for (const bool rules : {false, true}) {
      if (rules && c.depth < 2) continue;
      auto fresh = [&](double t) { return rules ? bound.rules_out(c, t) : !bound.lanes_reach(c, t); };
      StepLowerBound::Probe p(bound, c);
      auto probed = [&](double t) {
        const bool known = (p.lanes.has_short && t * (rules ? 1.0 + 1e-9 : 1.0) < p.lanes.short_at) ||
                           (!rules && p.lanes.has_reach && t >= p.lanes.reach_at);
        ++asked;
        if (known) ++decided;
        return rules ? bound.rules_out(p, t) : !bound.lanes_reach(p, t);
      };
      double lo = 0.5 * base, hi = 4.0 * base;
      std::vector<double> limits;
      for (int i = 0; i < 40; ++i) {
        const double mid = 0.5 * (lo + hi);
        limits.push_back(mid);
        (fresh(mid) ? lo : hi) = mid;
      }
      for (int i = 0; i < 30; ++i) limits.push_back(lo * rng.uniform(0.98, 1.02));
      for (int i = 0; i < 10; ++i) limits.push_back(base * rng.log_uniform(0.25, 8.0));
      limits.push_back(kInfinity);
      for (double t : limits) {
        INFO((rules ? "rules_out" : "lanes_reach") << " at " << t);
        CHECK(probed(t) == fresh(t));
      }
    }
  }
};

}  // namespace pd2bw::planner

namespace {

// Medium random instances (seeds first..last, at most 12 stages, a split backward with the given chance):
// visit(model, bound, rng) for each, with the instance in the failure messages.
template <class Visit>
void for_each_medium_instance(uint64_t first, uint64_t last, double split_backward_p, Visit&& visit) {
  pd2bw::testing::RandomInstanceOptions opt = pd2bw::testing::medium_instance_options();
  opt.split_backward_p = split_backward_p;
  for (uint64_t seed = first; seed <= last; ++seed) {
    pd2bw::testing::RandomInstance inst = pd2bw::testing::make_random_instance(seed, opt);
    inst.constraints.max_depth = 12;
    INFO(inst.describe());
    const pd2bw::planner::CostModel model(inst.profile, inst.cluster, inst.constraints);
    pd2bw::planner::StepLowerBound bound(model);
    pd2bw::testing::Rng rng(seed);
    visit(model, bound, rng);
  }
}

}  // namespace

TEST_CASE("a probe answers lanes_reach and rules_out as fresh calls do, at every limit") {
  pd2bw::planner::StepLowerBoundProbeTest test;
  int64_t candidates = 0;
  for_each_medium_instance(6001, 6040, 0.7, [&](const auto& model, auto& bound, auto& rng) {
    for (const auto& c : pd2bw::planner::enumerate_candidates(model)) {
      if (c.chunks > 1) continue;
      INFO(pd2bw::testing::schedule_name(c.schedule) << " b=" << c.microbatch << " d=" << c.depth << " w=" << c.width
                                                     << " m=" << c.microbatches);
      test.check(bound, c, rng);
      ++candidates;
    }
  });
  MESSAGE("candidates " << candidates << ", limits asked " << test.asked << ", answered by an interval " << test.decided);
  CHECK(candidates >= 500);
  // The intervals must carry weight, or this checks only the walks.
  CHECK(test.decided >= test.asked / 10);
}

// The search bounds its left-out candidates by least_refined_bound, which refines them in the order of
// their cheap bounds and stops once none can lower the least: it must equal the least refined bound of
// all of them, on any number of threads.
TEST_CASE("least_refined_bound is the least refined bound of all the candidates, whatever the threads") {
  int64_t lifted = 0;  // cases where the least refined bound is above the least cheap one
  for_each_medium_instance(6101, 6130, 0.5, [&](const auto& model, auto& bound, auto&) {
    const auto cands = pd2bw::planner::enumerate_candidates(model);
    std::vector<double> cheap;
    for (const auto& c : cands)
      if (const double v = bound(c); v < pd2bw::planner::kInfinity) cheap.push_back(v);
    if (cheap.empty()) return;
    std::sort(cheap.begin(), cheap.end());
    for (const double ceiling : {pd2bw::planner::kInfinity, 1.2 * cheap[cheap.size() / 2]}) {
      for (const double floor : {0.0, cheap[cheap.size() / 4]}) {
        double want = pd2bw::planner::kInfinity, least_cheap = pd2bw::planner::kInfinity;
        for (const auto& c : cands) {
          const double from = bound(c);
          least_cheap = std::min(least_cheap, std::max(floor, from));
          want = std::min(want, std::max(floor, pd2bw::planner::detail::refined_below(bound, c, from, ceiling)));
        }
        if (want > least_cheap) ++lifted;
        for (const int64_t threads : {1, 2}) {
          INFO("ceiling " << ceiling << ", floor " << floor << ", threads " << threads);
          CHECK(pd2bw::planner::detail::least_refined_bound(bound, cands, floor, ceiling, threads) == want);
          // Stopped at a value: exact below it, at least it otherwise.
          for (const double stop : {0.5 * want, want, 1.01 * want}) {
            const std::atomic<double> stop_at{stop};
            const double got = pd2bw::planner::detail::least_refined_bound(bound, cands, floor, ceiling, threads, &stop_at);
            INFO("stopped at " << stop);
            if (want < stop) CHECK(got == want);
            else CHECK(got >= stop);
          }
        }
      }
    }
  });
  MESSAGE("cases where refining lifts the least bound: " << lifted);
  CHECK(lifted >= 10);  // or the order and the stop are not exercised
}

// placement_levels looks at replicas up to replica_period only: the replicas past it must cross the same
// levels into and out of every stage as the one a period before, on clusters of one to three levels of
// any sizes (powers of two or not) and shapes that fill them or not, both placements.
TEST_CASE("replicas a replica_period apart cross the same levels at every stage boundary") {
  using pd2bw::planner::Candidate;
  using pd2bw::planner::CostModel;
  int64_t shapes = 0, compared = 0, levels_compared = 0;
  for (uint64_t seed = 6201; seed <= 6230; ++seed) {
    pd2bw::testing::RandomInstance inst = pd2bw::testing::make_random_instance(seed);
    pd2bw::testing::Rng rng(seed);
    const auto proto = inst.cluster.levels.front();
    inst.cluster.levels.clear();
    int64_t devices = 1;
    for (int64_t k = rng.range(1, 3); k > 0; --k) {
      auto level = proto;
      level.size = rng.range(2, 10);
      devices *= level.size;
      inst.cluster.levels.push_back(level);
    }
    INFO(inst.describe());
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    const pd2bw::planner::StepLowerBound bound(model);
    for (int64_t d = 1; d <= devices; ++d)
      for (int64_t w = 1; d * w <= devices; ++w)
        for (const auto placement : {pd2bw::schemas::Placement::replicas_inner, pd2bw::schemas::Placement::stages_inner}) {
          Candidate c;
          c.depth = d;
          c.width = w;
          c.placement = placement;
          const int64_t period = pd2bw::planner::detail::replica_period(model, c);
          REQUIRE(period >= 1);
          ++shapes;
          auto levels = [&](int64_t i, int64_t r) {
            const int64_t rank = CostModel::rank_of(c, i, r);
            return std::make_pair(i > 0 ? model.level_between(CostModel::rank_of(c, i - 1, r), rank) : -1,
                                  i + 1 < d ? model.level_between(rank, CostModel::rank_of(c, i + 1, r)) : -1);
          };
          int64_t differ = 0;
          for (int64_t r = 0; r + period < w; ++r)
            for (int64_t i = 0; i < d; ++i) {
              differ += levels(i, r) == levels(i, r + period) ? 0 : 1;
              ++compared;
            }
          if (differ > 0) {
            INFO("d=" << d << " w=" << w << " period " << period);
            CHECK(differ == 0);
          }
          // placement_levels (which walks one period of replicas and keeps one slot per stage of the first
          // stage_period and the last) against every replica of every stage, in the order of first appearance.
          const auto got = pd2bw::planner::StepLowerBoundProbeTest::levels(bound, c);
          std::vector<std::pair<int, int>> pairs;
          bool same = got->first.size() == got->ar_level.size() + 1 && got->slot(d - 1) + 1 == got->ar_level.size();
          for (int64_t i = 0; i < d && same; ++i) {
            pairs.clear();
            for (int64_t r = 0; r < w; ++r) {
              const auto l = levels(i, r);
              const std::pair<int, int> p{static_cast<int>(l.first), static_cast<int>(l.second)};
              if (std::find(pairs.begin(), pairs.end(), p) == pairs.end()) pairs.push_back(p);
            }
            const size_t slot = got->slot(i);
            same = std::equal(pairs.begin(), pairs.end(),
                              got->pairs.begin() + static_cast<std::ptrdiff_t>(got->first[slot]),
                              got->pairs.begin() + static_cast<std::ptrdiff_t>(got->first[slot + 1])) &&
                   got->ar_level[slot] == model.allreduce_level(c, i);
          }
          if (!same) {
            INFO("placement_levels: d=" << d << " w=" << w << " stage period " << pd2bw::planner::detail::stage_period(model));
            CHECK(same);
          }
          ++levels_compared;
        }
  }
  MESSAGE("shapes " << shapes << ", replica pairs compared " << compared << ", placement levels " << levels_compared);
  CHECK(compared >= 10000);
  CHECK(levels_compared >= 10000);
}

// refined() reports the limits its rules_out tests decided (RuleBracket), and the search seeds its memo of
// rules_out with them: fresh calls must agree at both ends and beyond them.
TEST_CASE("refined()'s bracket holds what fresh rules_out calls answer") {
  int64_t both = 0, checked = 0;
  for_each_medium_instance(6201, 6230, 0.5, [&](const auto& model, auto& bound, auto& rng) {
    for (const auto& c : pd2bw::planner::enumerate_candidates(model)) {
      const double base = bound(c);
      if (c.chunks > 1 || c.depth < 2 || !(base < pd2bw::planner::kInfinity)) continue;
      for (const double ceiling : {pd2bw::planner::kInfinity, base * rng.uniform(1.0, 1.5)}) {
        pd2bw::planner::StepLowerBound::RuleBracket tried;
        bound.refined(c, base, ceiling, &tried);
        INFO("d=" << c.depth << " m=" << c.microbatches << " ceiling " << ceiling << " bracket " << tried.out_to << " "
                  << tried.in_from);
        CHECK(tried.out_to < tried.in_from);
        if (tried.out_to > 0.0) {
          CHECK(bound.rules_out(c, tried.out_to));
          CHECK(bound.rules_out(c, tried.out_to * rng.uniform(0.5, 1.0)));
        }
        if (tried.in_from < pd2bw::planner::kInfinity) {
          CHECK(!bound.rules_out(c, tried.in_from));
          CHECK(!bound.rules_out(c, tried.in_from * rng.uniform(1.0, 2.0)));
        }
        both += tried.out_to > 0.0 && tried.in_from < pd2bw::planner::kInfinity;
        ++checked;
      }
    }
  });
  MESSAGE(checked << " refinements, " << both << " with both ends tested");
  CHECK(both >= 1000);
}

// The search refines each depth series with a guess of the bound (the last ones' lifts, extrapolated):
// tests near the guess decide some of the bisection's midpoints, which must leave its result exactly what
// it is without a guess, whether the guess is close, far, below or above it, and fill the same kind of
// bracket.
TEST_CASE("refined() with a guess returns what it returns without one") {
  int64_t refined = 0;
  for_each_medium_instance(6301, 6330, 0.5, [&](const auto& model, auto& bound, auto& rng) {
    for (const auto& c : pd2bw::planner::enumerate_candidates(model)) {
      const double base = bound(c);
      if (c.chunks > 1 || !(base > 0.0) || !(base < pd2bw::planner::kInfinity)) continue;
      for (const double ceiling : {pd2bw::planner::kInfinity, base * rng.uniform(1.0, 1.5)}) {
        pd2bw::planner::StepLowerBound::RuleBracket plain_bracket;
        const double plain = bound.refined(c, base, ceiling, &plain_bracket);
        if (!(base < plain && plain < ceiling)) continue;  // no bisection
        ++refined;
        for (const double off : {0.0, 1e-6, -1e-6, 3e-5, -3e-5, 1e-3, -1e-3, 0.3, -0.3, rng.uniform(-0.1, 0.1)}) {
          pd2bw::planner::StepLowerBound::RuleBracket guessed_bracket;
          const double guess = plain * (1.0 + off);
          INFO("d=" << c.depth << " m=" << c.microbatches << " ceiling " << ceiling << " bound " << plain << " guess "
                    << guess);
          CHECK(bound.refined(c, base, ceiling, &guessed_bracket, guess) == plain);
          CHECK(guessed_bracket.out_to < guessed_bracket.in_from);
          CHECK(guessed_bracket.out_to >= plain_bracket.out_to * (1.0 - 1e-5));
        }
      }
    }
  });
  MESSAGE(refined << " bisections, each with 10 guesses");
  CHECK(refined >= 300);
}

// The search refines its candidates to a coarse tolerance and narrows the bounds an answer reports with
// sharpened_bound (a bisection between the coarse bound and the bracket's in_from, through ruled_out):
// never below the coarse bound, and within the fine tolerance of the threshold as refined() at the fine
// tolerance is (both end between a limit ruled out and one not, 1e-5 apart, so they differ by at most
// about 2e-5). It fails when the coarse bound is reported as it is (up to 1e-3 below).
TEST_CASE("sharpened_bound narrows a coarse refinement to what a fine one finds") {
  int64_t narrowed = 0, checked = 0;
  for_each_medium_instance(6401, 6430, 0.5, [&](const auto& model, auto& bound, auto&) {
    pd2bw::planner::detail::SearchSpace space;
    space.candidates = pd2bw::planner::enumerate_candidates(model);
    const size_t n = space.candidates.size();
    std::vector<double> cheap(n);
    for (size_t i = 0; i < n; ++i) cheap[i] = bound(space.candidates[i]);
    space.lower_bounds = cheap;
    space.order.resize(n);
    for (size_t i = 0; i < n; ++i) space.order[i] = i;
    std::stable_sort(space.order.begin(), space.order.end(), [&](size_t a, size_t b) { return cheap[a] < cheap[b]; });
    space.tried = std::make_shared<std::vector<pd2bw::planner::StepLowerBound::RuleBracket>>(n);
    pd2bw::planner::detail::refine_lower_bounds(bound, space.candidates, space.lower_bounds, space.order, n,
                                                pd2bw::planner::kInfinity, 1, space.tried.get(),
                                                pd2bw::planner::StepLowerBound::kCoarseTolerance);
    space.ruled_out = [&](size_t idx, double limit) {
      return bound.rules_out(space.candidates[idx], limit, (*space.tried)[idx]);
    };
    space.fine_bounds.assign(n, std::numeric_limits<double>::quiet_NaN());
    for (size_t idx = 0; idx < n; ++idx) {
      const auto& c = space.candidates[idx];
      const double coarse = space.lower_bounds[idx];
      if (!(coarse < pd2bw::planner::kInfinity) || !bound.refinable(c)) continue;
      const double sharp = pd2bw::planner::detail::sharpened_bound(space, idx);
      const double fine = std::max(cheap[idx], bound.refined(c, cheap[idx]));
      INFO("d=" << c.depth << " m=" << c.microbatches << " chunks " << c.chunks << " coarse " << coarse << " sharp "
                << sharp << " fine " << fine);
      CHECK(sharp >= coarse);
      CHECK(pd2bw::planner::detail::sharpened_bound(space, idx) == sharp);  // kept
      CHECK(std::abs(sharp - fine) <= 2.5e-5 * fine);
      narrowed += sharp > coarse;
      ++checked;
    }
  });
  MESSAGE(checked << " bounds sharpened, " << narrowed << " of them narrowed");
  CHECK(narrowed >= 300);
}

namespace {

// Random medium instances (no split backward) of depth at most 32 in half their device memory, so that
// deep stages recompute: body(model, bound) for seeds first..last.
template <class Body>
void for_each_tight_instance(uint64_t first, uint64_t last, Body&& body) {
  pd2bw::testing::RandomInstanceOptions opt = pd2bw::testing::medium_instance_options();
  opt.split_backward_p = 0.0;
  for (uint64_t seed = first; seed <= last; ++seed) {
    pd2bw::testing::RandomInstance inst = pd2bw::testing::make_random_instance(seed, opt);
    inst.constraints.max_depth = 32;
    const int64_t reserve = inst.constraints.reserve_bytes;
    pd2bw::testing::set_device_memory(inst, reserve + (inst.cluster.device.memory_bytes - reserve) / 2);
    INFO(inst.describe());
    const pd2bw::planner::CostModel model(inst.profile, inst.cluster, inst.constraints);
    pd2bw::planner::StepLowerBound bound(model);
    body(model, bound);
  }
}

}  // namespace

// least_busy(c, t) bounds from below the compute with recompute (sum of the stages' times) of every split
// of c whose objective is within t: at the exact optimum it must not pass the optimum split's own. Deep
// pipelines in tight memory, so that stages recompute: a stage over its plain run recomputes all its
// layers, so the stages that take the deficit give up their runs, which lifts the bound toward the
// optimum's (tallied: within 2% of it).
TEST_CASE("least_busy is at most the optimum split's compute with recompute") {
  int64_t checked = 0, close = 0, redone = 0;
  for_each_tight_instance(
      6401, 6440, [&](const pd2bw::planner::CostModel& model, pd2bw::planner::StepLowerBound& bound) {
        for (const auto& c : pd2bw::planner::enumerate_candidates(model)) {
          if (c.chunks > 1 || c.microbatches < 2 ||
              (c.schedule != pd2bw::schemas::Schedule::flush && c.schedule != pd2bw::schemas::Schedule::gpipe))
            continue;
          const pd2bw::planner::Split best = pd2bw::planner::best_split(model, c, pd2bw::planner::kInfinity, INT64_MAX);
          if (!best.feasible() || best.exhausted) continue;
          const auto e = pd2bw::planner::evaluate_split(model, c, best);
          double busy = 0.0;
          bool recomputes = false;
          for (const auto& st : e.stages) {
            busy += st.compute_ms;
            recomputes = recomputes || st.recompute;
          }
          const double least = bound.least_busy(c, best.step_ms);
          INFO(pd2bw::testing::schedule_name(c.schedule)
               << " d=" << c.depth << " m=" << c.microbatches << " optimum " << best.step_ms << " busy " << busy
               << " least_busy " << least);
          CHECK(least <= busy * (1.0 + 1e-9));
          ++checked;
          if (!recomputes) continue;
          ++redone;
          close += least >= 0.98 * busy ? 1 : 0;
        }
      });
  MESSAGE(checked << " optima, " << redone << " of them recompute, least_busy within 2% of " << close);
  CHECK(checked >= 300);
  CHECK(redone >= 50);
}

// rules_out asks least_busy to stop after its first pass where flush_redo_rules_out already passes with
// that lower busy time: the test's answer must be the one the full busy time gives, at limits about the
// candidates' bounds (where both answers occur), and the stop must happen (or this checks nothing).
TEST_CASE("least_busy's early stop leaves flush_redo_rules_out's answer as it was") {
  int64_t asked = 0, stopped = 0, ruled = 0;
  for_each_tight_instance(6451, 6480,
                          [&](const pd2bw::planner::CostModel& model, pd2bw::planner::StepLowerBound& bound) {
                            for (const auto& c : pd2bw::planner::enumerate_candidates(model)) {
                              if (c.chunks > 1 || c.depth < 2 || c.schedule != pd2bw::schemas::Schedule::flush)
                                continue;
                              const double base = bound(c);
                              if (!(base > 0.0) || !(base < pd2bw::planner::kInfinity)) continue;
                              for (const double f : {0.8, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0}) {
                                const auto b = pd2bw::planner::StepLowerBoundProbeTest::busy_both(bound, c, f * base);
                                INFO("d=" << c.depth << " m=" << c.microbatches << " t=" << f * base << " busy "
                                          << b.early << " / " << b.full);
                                CHECK(b.redo_early == b.redo_full);
                                CHECK(b.early <= b.full);
                                if (b.early != b.full) CHECK(b.redo_early);
                                ++asked;
                                stopped += b.early != b.full ? 1 : 0;
                                ruled += b.redo_full ? 1 : 0;
                              }
                            }
                          });
  MESSAGE(asked << " limits, " << ruled << " ruled out by the round trips, " << stopped << " of them after one pass");
  CHECK(asked >= 1000);
  CHECK(stopped >= 20);
  CHECK(ruled > stopped);
}

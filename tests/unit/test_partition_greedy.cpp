// The greedy split's threshold search (GreedyThreshold, partition_greedy.cpp): the DP's first upper bound,
// and the split a candidate keeps when the DP's budget runs out. Each failed greedy run tells the least
// threshold that could change its walk, and each split found its busiest stage, and the search jumps to
// them. Against a brute force of every threshold that can matter (each stage's busy time for every stage,
// start and end), the search must end within its 1e-3 of the least threshold any greedy run finds a split
// at, where every larger threshold finds one too (not always so: a longer stage can leave the later ones
// no room). The split it ends with may be below that threshold: its busiest stage is what it reports.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "partition_internal.hpp"
#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/search.hpp"
#include "prepared.hpp"
#include "random_instances.hpp"

namespace {

using pd2bw::planner::CostModel;
using pd2bw::planner::kInfinity;

struct Thresholds {
  double least = kInfinity;  // the least at which a greedy run finds a split
  bool monotone = true;      // and every larger one finds one too
};

// Every threshold at which a greedy walk can change is some stage's busy time (for a position, start and
// end): the least of them at which greedy_split_at finds a split, and whether all larger ones do.
Thresholds greedy_thresholds(const CostModel& model, const pd2bw::planner::detail::PreparedCandidate& pc,
                             int64_t static_cap) {
  const int64_t L = model.num_layers(), d = pc.candidate.depth;
  std::vector<double> times;
  for (int64_t i = 0; i < d; ++i)
    for (int64_t a = i; a <= L - (d - i); ++a)
      for (int64_t e = a + 1; e <= L - (d - 1 - i); ++e) {
        const auto q = pd2bw::planner::detail::quick_price(pc, i, a, e);
        if (q.feasible) times.push_back(q.step_ms);
      }
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  Thresholds out;
  for (double t : times) {
    const bool found = !pd2bw::planner::detail::greedy_split_at(model, pc, t, static_cap).empty();
    if (found && !(out.least < kInfinity)) out.least = t;
    if (!found && out.least < kInfinity) out.monotone = false;
  }
  return out;
}

// Calls body(model, static_cap, c, seed) for each single-chunk candidate c of the medium random instances
// of seeds first..last (half of them timing the backward in halves).
template <class Body>
void for_each_unchunked(uint64_t first, uint64_t last, Body&& body) {
  pd2bw::testing::RandomInstanceOptions opt = pd2bw::testing::medium_instance_options();
  opt.split_backward_p = 0.5;
  for (uint64_t seed = first; seed <= last; ++seed) {
    const auto inst = pd2bw::testing::make_random_instance(seed, opt);
    INFO(inst.describe());
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
    for (const auto& c : pd2bw::planner::enumerate_candidates(model))
      if (c.chunks == 1) body(model, static_cap, c, seed);
  }
}

}  // namespace

TEST_CASE("the greedy threshold search ends within 1e-3 of the least threshold a greedy run finds a split at") {
  int64_t checked = 0, skipped = 0;
  for_each_unchunked(8501, 8530, [&](const CostModel& model, int64_t static_cap, const auto& c, uint64_t) {
    if (c.depth > 12) return;  // the brute force is O(d L^2) greedy runs
    const auto pc = pd2bw::planner::detail::prepare(model, c);
    const Thresholds brute = greedy_thresholds(model, pc, static_cap);
    // lanes_only: the result's step is the busiest stage of the split the search ended with.
    const double found = pd2bw::planner::detail::greedy_of(model, pc, static_cap, kInfinity, true).step_ms;
    INFO("d=" << c.depth << " m=" << c.microbatches << " least " << brute.least << " found " << found);
    CHECK((found < kInfinity) == (brute.least < kInfinity));
    // Where a larger threshold can lose the split (a longer stage leaves the later ones no room), no
    // search by thresholds is exact: those are counted, not checked.
    if (!(brute.least < kInfinity) || !brute.monotone) {
      ++skipped;
      return;
    }
    CHECK(found <= brute.least * (1.0 + 1e-3) * (1.0 + 1e-12));
    ++checked;
  });
  MESSAGE(checked << " candidates checked, " << skipped << " with no split or one a larger threshold loses");
  CHECK(checked >= 300);
}

TEST_CASE("greedy runs that take their repeating stages from the runs before find the splits of runs from scratch") {
  // A threshold search's sequence (a doubling, then halvings of a bracket) and random thresholds around
  // the least, each run with the trace of all the runs before it: every split the same as without one.
  int64_t runs = 0;
  for_each_unchunked(8531, 8550, [&](const CostModel& model, int64_t static_cap, const auto& c, uint64_t seed) {
    const auto pc = pd2bw::planner::detail::prepare(model, c);
    const double least = pd2bw::planner::detail::greedy_of(model, pc, static_cap, kInfinity, true).step_ms;
    if (!(least < kInfinity)) return;
    std::mt19937_64 rng(seed * 1000 + static_cast<uint64_t>(c.depth));
    std::vector<double> thresholds{kInfinity, least / 4.0, least / 2.0, least};
    for (double lo = least / 2.0, hi = least; hi - lo > 1e-4 * hi;) {
      const double mid = 0.5 * (lo + hi);
      thresholds.push_back(mid);
      (std::uniform_int_distribution<int>(0, 1)(rng) ? lo : hi) = mid;
    }
    std::uniform_real_distribution<double> around(0.9, 1.1);
    for (int k = 0; k < 8; ++k) thresholds.push_back(least * around(rng));
    std::vector<pd2bw::planner::detail::GreedyStage> trace;
    for (double t : thresholds) {
      const auto with = pd2bw::planner::detail::greedy_split_at(model, pc, t, static_cap, &trace);
      const auto fresh = pd2bw::planner::detail::greedy_split_at(model, pc, t, static_cap);
      INFO("d=" << c.depth << " m=" << c.microbatches << " t=" << t);
      CHECK(with == fresh);
      ++runs;
    }
  });
  MESSAGE(runs << " greedy runs with a trace");
  CHECK(runs >= 5000);
}

TEST_CASE("objective_of is step_objective over the model's priced stages, for random splits") {
  // objective_of prices without the memory breakdowns (stage_times): the same value, bit for bit, as the
  // objective of CostModel::stage_cost's stages, feasible or not. With a cutoff at or below the objective
  // it may stop at a floor of the folds (folded_objective), which must lie between the two.
  int64_t splits = 0, infeasible = 0, stopped = 0;
  for_each_unchunked(8551, 8565, [&](const CostModel& model, int64_t, const auto& c, uint64_t seed) {
    const auto pc = pd2bw::planner::detail::prepare(model, c);
    const int64_t L = model.num_layers(), d = c.depth;
    std::mt19937_64 rng(seed * 7919 + static_cast<uint64_t>(d * 131 + c.microbatches));
    for (int k = 0; k < 4; ++k) {
      std::vector<int64_t> cuts(static_cast<size_t>(L - 1));  // d - 1 distinct cuts among 1..L-1
      for (int64_t j = 0; j + 1 < L; ++j) cuts[static_cast<size_t>(j)] = j + 1;
      std::shuffle(cuts.begin(), cuts.end(), rng);
      std::vector<int64_t> bounds{0};
      bounds.insert(bounds.end(), cuts.begin(), cuts.begin() + (d - 1));
      bounds.push_back(L);
      std::sort(bounds.begin(), bounds.end());
      std::vector<pd2bw::planner::StageCost> stages;
      for (int64_t i = 0; i < d; ++i)
        stages.push_back(model.stage_cost(c, i, bounds[static_cast<size_t>(i)], bounds[static_cast<size_t>(i + 1)]));
      const double want = pd2bw::planner::step_objective(c, stages);
      INFO("d=" << d << " m=" << c.microbatches << " schedule " << static_cast<int>(c.schedule));
      CHECK(pd2bw::planner::detail::objective_of(pc, bounds) == want);
      infeasible += want < kInfinity ? 0 : 1;
      ++splits;
      // With a cutoff: the objective bit for bit below it; at or above it, a lower bound at or above it.
      if (!(want < kInfinity)) continue;
      for (const double f : {0.5, 0.9, 0.999, 1.0, 1.001, 2.0}) {
        const double got = pd2bw::planner::detail::objective_of(pc, bounds, f * want);
        INFO("cutoff " << f << " x the objective: " << got);
        if (want < f * want) {
          CHECK(got == want);
        } else {
          CHECK(got >= f * want);
          CHECK(got <= want * (1.0 + 1e-12));
          stopped += got == want ? 0 : 1;
        }
      }
    }
  });
  MESSAGE(splits << " random splits, " << infeasible << " of them infeasible; " << stopped
                 << " objectives with a cutoff below them stopped early");
  CHECK(stopped > 100);
  CHECK(splits >= 1000);
  CHECK(infeasible > 0);
  CHECK(infeasible < splits);
}

TEST_CASE("greedy_step_ms answers from a memo that settled it with what it computes afresh") {
  // A first call settles the candidate's greedy and (flush) tiered splits in the memo; later calls answer
  // from them without pricing anything. All three answers agree, with and without a memo.
  int64_t settled = 0, none = 0;
  for_each_unchunked(8551, 8570, [&](const CostModel& model, int64_t static_cap, const auto& c, uint64_t) {
    const double fresh = pd2bw::planner::greedy_step_ms(model, c);
    pd2bw::planner::GreedyMemo memo;
    {
      const pd2bw::planner::detail::GreedyEntry before(&memo, c, static_cap);
      CHECK_FALSE(before.settled_step_ms().has_value());
    }
    const double first = pd2bw::planner::greedy_step_ms(model, c, &memo);
    {
      const pd2bw::planner::detail::GreedyEntry after(&memo, c, static_cap);
      const auto known = after.settled_step_ms();
      REQUIRE(known.has_value());
      CHECK(*known == first);
    }
    const double again = pd2bw::planner::greedy_step_ms(model, c, &memo);
    CHECK(first == fresh);
    CHECK(again == fresh);
    ++settled;
    none += fresh < kInfinity ? 0 : 1;
  });
  MESSAGE(settled << " candidates, " << none << " with no greedy split");
  CHECK(settled >= 300);
  CHECK(settled - none >= 200);
}

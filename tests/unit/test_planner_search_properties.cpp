// Properties of the planner's searches on random instances: the optimum never gets worse with more
// memory or faster links, and both searches (objective_search, search) are deterministic, whatever the
// thread count; the leaderboard's seeds are upper bounds on distinct candidates' optima; a split's program
// is stopped early (a budget skipped) only where the budget could not have finished it; a greedy memo
// changes no split. Their exactness
// against brute force is tested in test_planner_bruteforce.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/partition.hpp"
#include "pd2bw/planner/search.hpp"
#include "planner_test_util.hpp"
#include "random_instances.hpp"
#include "search_internal.hpp"
#include "step_bound.hpp"

namespace {

using pd2bw::planner::CostModel;
using pd2bw::planner::Evaluated;
using pd2bw::planner::kInfinity;
using pd2bw::planner::SearchResult;
using pd2bw::testing::close_rel;
using pd2bw::testing::make_random_instance;
using pd2bw::testing::RandomInstance;

double optimum(const RandomInstance& inst) {
  const CostModel model(inst.profile, inst.cluster, inst.constraints);
  const SearchResult r = pd2bw::planner::objective_search(model);
  return r.feasible() ? r.ranked[0].step_ms : kInfinity;
}

// Given the work `full` (an unbudgeted program's result under `bound`) spent, a program finds full's split;
// given each of `budgets`, it finds that split or runs out, reporting its budget and one unit (counted in
// ran_out).
void check_budgets(const CostModel& model, const pd2bw::planner::Candidate& c, double bound,
                   const pd2bw::planner::Split& full, std::initializer_list<int64_t> budgets, int64_t& ran_out) {
  const pd2bw::planner::Split enough = pd2bw::planner::best_split(model, c, bound, full.work);
  CHECK_FALSE(enough.exhausted);
  CHECK(enough.bounds == full.bounds);
  for (const int64_t budget : budgets) {
    const pd2bw::planner::Split less = pd2bw::planner::best_split(model, c, bound, std::max<int64_t>(budget, 1));
    if (less.exhausted) {
      CHECK(less.work == std::max<int64_t>(budget, 1) + 1);
      ++ran_out;
    } else {
      CHECK(less.bounds == full.bounds);
    }
  }
}

// Calls f(model, candidate, seed) for every candidate of one chunk per rank of the medium random instances
// (split backward in half of them) of seeds first..last, each with its instance described.
template <class F>
void for_each_one_chunk_candidate(uint64_t first, uint64_t last, F&& f) {
  pd2bw::testing::RandomInstanceOptions opt = pd2bw::testing::medium_instance_options();
  opt.split_backward_p = 0.5;
  for (uint64_t seed = first; seed <= last; ++seed) {
    const RandomInstance inst = make_random_instance(seed, opt);
    INFO(inst.describe());
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    for (const auto& c : pd2bw::planner::enumerate_candidates(model))
      if (c.chunks == 1) f(model, c, seed);
  }
}

}  // namespace

TEST_CASE("more memory or faster links never make the optimum slower") {
  for (uint64_t seed = 1001; seed <= 1300; ++seed) {
    const RandomInstance base = make_random_instance(seed);
    INFO(base.describe());
    const double t0 = optimum(base);
    RandomInstance more_memory = base;
    pd2bw::testing::set_device_memory(more_memory, 2 * base.cluster.device.memory_bytes);
    const double t_mem = optimum(more_memory);
    RandomInstance faster = base;
    pd2bw::testing::scale_bandwidths(faster, 2.0);
    const double t_bw = optimum(faster);
    CAPTURE(t0);
    CAPTURE(t_mem);
    CAPTURE(t_bw);
    if (t0 < kInfinity) {
      CHECK(t_mem < kInfinity);
      CHECK((t_mem <= t0 || close_rel(t_mem, t0)));
      CHECK(t_bw < kInfinity);
      CHECK((t_bw <= t0 || close_rel(t_bw, t0)));
    }
  }
}

namespace {

// The same ranked list, candidate by candidate and bit for bit.
void check_same_ranking(const SearchResult& a, const SearchResult& b) {
  CHECK(a.candidates == b.candidates);
  REQUIRE(a.ranked.size() == b.ranked.size());
  for (size_t i = 0; i < a.ranked.size(); ++i) {
    const Evaluated& x = a.ranked[i];
    const Evaluated& y = b.ranked[i];
    CHECK(x.candidate.schedule == y.candidate.schedule);
    CHECK(x.candidate.microbatch == y.candidate.microbatch);
    CHECK(x.candidate.depth == y.candidate.depth);
    CHECK(x.candidate.width == y.candidate.width);
    CHECK(x.candidate.microbatches == y.candidate.microbatches);
    CHECK(x.candidate.placement == y.candidate.placement);
    CHECK(x.split.bounds == y.split.bounds);
    CHECK(x.step_ms == y.step_ms);  // bitwise: same inputs, same arithmetic
  }
}

}  // namespace

TEST_CASE("both searches are deterministic, whatever the number of worker threads") {
  pd2bw::planner::SearchOptions one, many;
  one.threads = 1;
  many.threads = 4;
  for (uint64_t seed = 2001; seed <= 2100; ++seed) {
    pd2bw::testing::RandomInstanceOptions opt;
    opt.max_layers = seed % 2 == 0 ? 10 : 30;  // larger instances give the workers more to race on
    opt.max_per_node = seed % 2 == 0 ? 4 : 8;
    opt.max_nodes = seed % 2 == 0 ? 2 : 4;
    const RandomInstance inst = make_random_instance(seed, opt);
    INFO(inst.describe());
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    const SearchResult a = pd2bw::planner::objective_search(model, one);
    const SearchResult b = pd2bw::planner::objective_search(model, one);
    CHECK(a.evaluated == b.evaluated);  // one worker: even the pruning is repeatable
    check_same_ranking(a, b);
    check_same_ranking(a, pd2bw::planner::objective_search(model, many));
    const SearchResult r = pd2bw::planner::search(model, one);
    check_same_ranking(r, pd2bw::planner::search(model, many));
    // A model built afresh from the same inputs gives the same winner.
    const CostModel again(inst.profile, inst.cluster, inst.constraints);
    const SearchResult c = pd2bw::planner::search(again);
    REQUIRE(c.ranked.size() == r.ranked.size());
    if (!r.ranked.empty()) {
      CHECK(c.ranked[0].split.bounds == r.ranked[0].split.bounds);
      CHECK(c.ranked[0].step_ms == r.ranked[0].step_ms);
    }
  }
}

namespace {

struct SeedTally {
  int instances = 0, refilled = 0;  // instances; of them, where seeds_that_fit added a finite seed
};

// The k-th least seed is at least the k-th least optimum of the candidates it may stand for (one chunk per
// rank): each seed is a split's objective of its own candidate, none counted twice.
void check_seeds(const RandomInstance& inst, SeedTally& tally) {
  using pd2bw::planner::Candidate;
  const CostModel model(inst.profile, inst.cluster, inst.constraints);
  const std::vector<Candidate> candidates = pd2bw::planner::enumerate_candidates(model);
  pd2bw::planner::StepLowerBound bound(model);
  std::vector<double> lb(candidates.size()), optima;
  for (size_t i = 0; i < candidates.size(); ++i) {
    lb[i] = bound(candidates[i]);
    if (candidates[i].chunks == 1) optima.push_back(pd2bw::planner::best_split(model, candidates[i]).step_ms);
  }
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lb[a] < lb[b]; });
  const auto seeded =
      pd2bw::planner::detail::seed_candidates(candidates, order, lb, inst.constraints.schedule.has_value());
  std::vector<double> seeds = pd2bw::planner::detail::greedy_objectives(model, candidates, seeded, 1);
  const auto finite = [](const std::vector<double>& v) { return std::count_if(v.begin(), v.end(), [](double u) { return u < kInfinity; }); };
  const auto first = finite(seeds);
  const auto more = pd2bw::planner::detail::seeds_that_fit(model, bound, candidates, order, lb, seeded, 6, 2);
  seeds.insert(seeds.end(), more.begin(), more.end());
  ++tally.instances;
  if (finite(seeds) > first) ++tally.refilled;
  std::sort(seeds.begin(), seeds.end());
  std::sort(optima.begin(), optima.end());
  REQUIRE(seeds.size() <= optima.size());
  for (size_t k = 0; k < seeds.size(); ++k) {
    CAPTURE(k);
    CHECK((seeds[k] >= optima[k] || close_rel(seeds[k], optima[k])));
  }
}

}  // namespace

TEST_CASE("the leaderboard's seeds are upper bounds on distinct candidates' optima") {
  SeedTally tally;
  for (uint64_t seed = 4001; seed <= 4300; ++seed) {
    pd2bw::testing::RandomInstanceOptions opt =
        seed % 2 == 0 ? pd2bw::testing::RandomInstanceOptions{} : pd2bw::testing::medium_instance_options();
    opt.pin_schedule_p = 0.5;  // pinned zb-h1 and flush run out of memory first on their least-bounded depths
    const RandomInstance inst = make_random_instance(seed, opt);
    INFO(inst.describe());
    check_seeds(inst, tally);
  }
  MESSAGE("instances " << tally.instances << ", refilled by seeds_that_fit " << tally.refilled);
  CHECK(tally.refilled >= 10);  // the fallback must be exercised, or this proves little of it
}

TEST_CASE("depth ranks count the earlier candidates of the same family, which differ in depth alone") {
  using pd2bw::planner::Candidate;
  namespace detail = pd2bw::planner::detail;
  size_t past_cut = 0;
  for (uint64_t seed = 4401; seed <= 4440; ++seed) {
    const RandomInstance inst = make_random_instance(seed, pd2bw::testing::medium_instance_options());
    INFO(inst.describe());
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    const std::vector<Candidate> candidates = pd2bw::planner::enumerate_candidates(model);
    std::vector<size_t> order(candidates.size());
    std::iota(order.begin(), order.end(), size_t{0});
    std::mt19937_64 rng(seed);
    std::shuffle(order.begin(), order.end(), rng);
    const std::vector<size_t> rank = detail::depth_ranks(candidates, order);
    REQUIRE(rank.size() == candidates.size());
    auto same_family = [](const Candidate& a, const Candidate& b) {
      return a.schedule == b.schedule && a.microbatch_index == b.microbatch_index && a.width == b.width &&
             a.placement == b.placement && a.chunks == b.chunks;
    };
    for (size_t p = 0; p < order.size(); ++p) {
      const Candidate& c = candidates[order[p]];
      size_t before = 0;
      for (size_t q = 0; q < p; ++q) {
        const Candidate& o = candidates[order[q]];
        if (!same_family(c, o)) continue;
        ++before;
        CHECK(o.microbatches == c.microbatches);  // a family differs in depth alone
        CHECK(o.depth != c.depth);
      }
      CHECK(rank[order[p]] == before);
      if (before >= detail::kFullWorkPerFamily) ++past_cut;
    }
  }
  MESSAGE("candidates past the full work of their family: " << past_cut);
  CHECK(past_cut > 0);  // the cut must be reached, or this proves little of it
  CHECK(detail::split_work_at(0, detail::kFullWorkPerFamily - 1) == pd2bw::planner::kSplitWork);
  CHECK(detail::split_work_at(0, detail::kFullWorkPerFamily) < pd2bw::planner::kSplitWork);
}

TEST_CASE("a round's dynamic programs take the shared budget in the search's order") {
  std::mt19937_64 rng(77);
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<int64_t> wants(rng() % 12);
    for (auto& w : wants) w = static_cast<int64_t>(rng() % 1000);
    const auto budget = static_cast<int64_t>(rng() % 4000);
    const std::vector<int64_t> given = pd2bw::planner::detail::round_work(wants, budget);
    REQUIRE(given.size() == wants.size());
    int64_t spent = 0;
    bool short_before = false;  // an earlier candidate got less than it wanted
    for (size_t k = 0; k < wants.size(); ++k) {
      CAPTURE(k);
      CHECK(given[k] >= 0);
      CHECK(given[k] <= wants[k]);
      if (short_before) CHECK(given[k] == 0);  // the budget went to the earlier ones
      if (given[k] < wants[k]) {
        CHECK(spent + given[k] == budget);  // a candidate is cut only by the budget's end
        short_before = true;
      }
      spent += given[k];
    }
    CHECK(spent <= budget);
  }
}

// A dynamic program whose windows hold more starts than its budget is not begun when a split under its
// bound is known (each start costs a unit): it reports running out as one that ran would. So a budget of
// the work an unbudgeted program spent must still find its split (the skip must never fire there), and
// a smaller budget either finds the same split or runs out, reporting the budget and one unit.
TEST_CASE("a split's program given the work an unbudgeted one spent finds the same split") {
  int64_t checked = 0, ran_out = 0;
  for_each_one_chunk_candidate(8101, 8130, [&](const CostModel& model, const pd2bw::planner::Candidate& c, uint64_t) {
    const pd2bw::planner::Split full = pd2bw::planner::best_split(model, c, kInfinity, INT64_MAX);
    if (!full.feasible() || full.exhausted || full.work < 2) return;
    CAPTURE(c.depth);
    CAPTURE(full.work);
    check_budgets(model, c, kInfinity, full, {full.work / 2, full.work / 8, int64_t{1}}, ran_out);
    ++checked;
  });
  MESSAGE("programs checked: " << checked << ", budgets that ran out: " << ran_out);
  CHECK(checked >= 200);
  CHECK(ran_out > 0);
}

// Under a bound with no split known below it (the greedy split is above), a program is not begun when its
// windows hold kProjectedFactor times its budget in starts; it runs out then, as it would have: a program
// that leaves no row empty spends at least a unit per start. So a program given the work an unbudgeted
// one spent under the same bound (one that found a split) is never stopped, and one given less either
// finds that split or runs out.
TEST_CASE("a bounded program is stopped by its starts only where its budget could not have finished it") {
  int64_t checked = 0, ran_out = 0;
  for_each_one_chunk_candidate(8201, 8240, [&](const CostModel& model, const pd2bw::planner::Candidate& c, uint64_t) {
    const pd2bw::planner::Split best = pd2bw::planner::best_split(model, c, kInfinity, INT64_MAX);
    const double greedy = pd2bw::planner::greedy_step_ms(model, c);
    if (!best.feasible() || best.exhausted || !(greedy > best.step_ms * 1.02)) return;
    const double bound = best.step_ms * 1.01;  // a split is under it, the greedy one is not
    const pd2bw::planner::Split full = pd2bw::planner::best_split(model, c, bound, INT64_MAX);
    REQUIRE(full.bounds == best.bounds);
    CAPTURE(c.depth);
    CAPTURE(full.work);
    check_budgets(model, c, bound, full, {full.work / 2, full.work / 8, full.work / 64}, ran_out);
    ++checked;
  });
  MESSAGE("bounded programs checked: " << checked << ", budgets that ran out: " << ran_out);
  CHECK(checked >= 100);
  CHECK(ran_out > 0);
}

// A GreedyMemo keeps each candidate's greedy search between calls, resuming a doubling that stopped at one
// bound for a larger one, and where its dynamic program ran out of work (a bound above the greedy split's
// objective gives the program the same bound): every call must return what a call without the memo
// returns, whatever bounds came before it.
TEST_CASE("best_split with a greedy memo returns what it returns without one, whatever was asked before") {
  int64_t checked = 0, infeasible_then_feasible = 0;
  uint64_t instance = 0;  // a memo per instance (the model it was filled for)
  std::unique_ptr<pd2bw::planner::GreedyMemo> memo;
  std::mt19937_64 rng;
  for_each_one_chunk_candidate(8301, 8315, [&](const CostModel& model, const pd2bw::planner::Candidate& c, uint64_t seed) {
    if (seed != instance) {
      instance = seed;
      memo = std::make_unique<pd2bw::planner::GreedyMemo>();
      rng.seed(seed);
    }
    const double greedy = pd2bw::planner::greedy_step_ms(model, c);
    if (!(greedy < kInfinity)) return;
    CAPTURE(c.depth);
    // Bounds below and above the greedy split's objective, in a random order; small budgets, so that the
    // greedy split is what most calls return.
    std::vector<double> bounds{greedy * 0.5, greedy * 0.9, greedy, greedy * 1.5, kInfinity};
    std::shuffle(bounds.begin(), bounds.end(), rng);
    bool was_infeasible = false;
    for (const double bound : bounds) {
      for (const int64_t work : {int64_t{16}, int64_t{1} << 14}) {
        const pd2bw::planner::Split plain = pd2bw::planner::best_split(model, c, bound, work);
        const pd2bw::planner::Split kept = pd2bw::planner::best_split(model, c, bound, work, memo.get());
        CHECK(kept.bounds == plain.bounds);
        CHECK(kept.exhausted == plain.exhausted);
        CHECK(kept.work == plain.work);  // what a program that ran out under this bound before reports again
        CHECK((kept.step_ms == plain.step_ms || (!kept.feasible() && !plain.feasible())));
        infeasible_then_feasible += was_infeasible && plain.feasible() ? 1 : 0;
        was_infeasible = was_infeasible || !plain.feasible();
      }
    }
    CHECK(pd2bw::planner::greedy_step_ms(model, c, memo.get()) == greedy);
    ++checked;
  });
  MESSAGE("candidates checked: " << checked << ", feasible after an infeasible call: " << infeasible_then_feasible);
  CHECK(checked >= 200);
  CHECK(infeasible_then_feasible > 0);
}

// The greedy split (what best_split returns when its budget runs out) is a real split: each stage fits in
// memory, and its step is the split's objective as evaluate_split prices it from scratch.
TEST_CASE("a greedy split fits in memory and its step is its objective") {
  int64_t checked = 0;
  for_each_one_chunk_candidate(8401, 8430, [&](const CostModel& model, const pd2bw::planner::Candidate& c, uint64_t) {
    const pd2bw::planner::Split greedy = pd2bw::planner::best_split(model, c, kInfinity, 1);
    if (!greedy.exhausted || !greedy.feasible()) return;
    CAPTURE(c.depth);
    const Evaluated e = pd2bw::planner::evaluate_split(model, c, greedy);
    int64_t unfit = 0;
    for (const auto& st : e.stages) unfit += st.feasible ? 0 : 1;
    CHECK(unfit == 0);
    CHECK(e.step_ms == greedy.step_ms);
    CHECK(pd2bw::planner::greedy_step_ms(model, c) == greedy.step_ms);
    ++checked;
  });
  MESSAGE("greedy splits checked: " << checked);
  CHECK(checked >= 300);
}

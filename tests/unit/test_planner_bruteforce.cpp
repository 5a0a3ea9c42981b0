// The planner's objective search against an independent brute force on small random instances
// (brute_force.hpp: its own candidate loops, every composition of the layers, the objective from its
// README definition). Per candidate, the partitioner's optimum and its walk over the splits below a limit
// must match the brute force; over the whole space, objective_search must find the least objective (so
// its lower bounds and pruning are exact). On medium instances (up to 40 layers, 32 devices) an unpruned
// dynamic program with windows of none stands in for the enumeration. The small instances run again
// with measured link curves. The searches' monotonicity and determinism are tested in
// test_planner_search_properties.cpp.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "brute_force.hpp"
#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/partition.hpp"
#include "pd2bw/planner/search.hpp"
#include "planner_test_util.hpp"
#include "random_instances.hpp"

namespace {

using pd2bw::planner::Candidate;
using pd2bw::planner::CostModel;
using pd2bw::planner::Evaluated;
using pd2bw::planner::kInfinity;
using pd2bw::planner::RecomputePolicy;
using pd2bw::planner::SearchResult;
using pd2bw::planner::Split;
using pd2bw::planner::StageCost;
using pd2bw::schemas::Placement;
using pd2bw::schemas::Schedule;
using pd2bw::testing::close_rel;
using pd2bw::testing::device_count;
using pd2bw::testing::for_each_candidate;
using pd2bw::testing::for_each_split;
using pd2bw::testing::kRelTol;
using pd2bw::testing::make_random_instance;
using pd2bw::testing::RandomInstance;
using pd2bw::testing::reference_objective;
using pd2bw::testing::schedule_name;

std::string describe_candidate(const Candidate& c, const std::vector<int64_t>& bounds, double step_ms) {
  std::ostringstream o;
  o.precision(17);
  o << schedule_name(c.schedule) << " b=" << c.microbatch << " (index " << c.microbatch_index << ") d=" << c.depth
    << " w=" << c.width << " m=" << c.microbatches << " placement "
    << (c.placement == Placement::replicas_inner ? "replicas-inner" : "stages-inner") << " bounds [";
  for (size_t i = 0; i < bounds.size(); ++i) o << (i ? "," : "") << bounds[i];
  o << "] step_ms " << step_ms;
  return o.str();
}

// The winner obeys the contract of a plan and its objective is what stage_cost says of its split.
void check_winner(const CostModel& model, const Evaluated& e) {
  const Candidate& c = e.candidate;
  const auto& k = model.constraints();
  const auto& sizes = model.profile().microbatch_sizes;
  REQUIRE(c.depth >= 1);
  REQUIRE(c.width >= 1);
  CHECK(c.width * c.depth <= device_count(model.cluster()));
  REQUIRE(c.microbatch_index >= 0);
  REQUIRE(c.microbatch_index < static_cast<int64_t>(sizes.size()));
  CHECK(c.microbatch == sizes[static_cast<size_t>(c.microbatch_index)]);
  CHECK(c.microbatch * c.microbatches * c.width == k.global_batch);
  if (c.schedule == Schedule::two_bw) CHECK(c.microbatches >= c.depth);
  if (k.schedule) CHECK(c.schedule == *k.schedule);
  if (k.microbatch) CHECK(c.microbatch == *k.microbatch);
  if (k.max_depth > 0) CHECK(c.depth <= k.max_depth);
  if (c.placement == Placement::stages_inner) CHECK((c.width > 1 && c.depth > 1));
  const auto& bounds = e.split.bounds;
  REQUIRE(static_cast<int64_t>(bounds.size()) == c.depth * c.chunks + 1);
  CHECK(bounds.front() == 0);
  CHECK(bounds.back() == model.num_layers());
  std::vector<StageCost> stages;
  const auto chunked = c.chunks > 1 ? pd2bw::planner::evaluate_split(model, c, e.split).stages : std::vector<StageCost>{};
  for (int64_t s = 0; s < c.depth * c.chunks; ++s) {
    REQUIRE(bounds[static_cast<size_t>(s)] < bounds[static_cast<size_t>(s + 1)]);
    stages.push_back(c.chunks > 1 ? chunked[static_cast<size_t>(s)]
                                  : model.stage_cost(c, s, bounds[static_cast<size_t>(s)], bounds[static_cast<size_t>(s + 1)]));
    CHECK(stages.back().feasible);
    if (k.recompute == RecomputePolicy::never) CHECK_FALSE(stages.back().recompute);
    if (k.recompute == RecomputePolicy::always) CHECK(stages.back().recompute);
  }
  CHECK(close_rel(reference_objective(c, stages), e.step_ms));
  CHECK(close_rel(e.split.step_ms, e.step_ms));
}

struct Tally {
  int feasible = 0, infeasible = 0, multi_stage = 0, recompute_winners = 0, stages_inner_winners = 0;
  int64_t candidates = 0, splits = 0, walked = 0, zb_candidates = 0, zb_winners = 0;
  int64_t chunked_candidates = 0, new_winners = 0;  // interleaved and zb-v; winners of those and zb-h2
  int64_t objective_mismatches = 0;  // splits where step_objective and the reference disagree
};

// One candidate: the partitioner's optimum, its independence from the bound it is given, and its walk
// over the splits below a limit, against every composition. Returns the candidate's least objective.
double check_candidate(const CostModel& model, const Candidate& c, uint64_t seed, Tally& tally) {
  struct Seen {
    std::vector<int64_t> bounds;
    double objective;
  };
  std::vector<Seen> all;
  for_each_split(model, c, [&](const std::vector<int64_t>& bounds, const std::vector<StageCost>& stages) {
    const double ref = reference_objective(c, stages);
    if (!close_rel(ref, pd2bw::planner::step_objective(c, stages))) ++tally.objective_mismatches;
    all.push_back({bounds, ref});
  });
  tally.splits += static_cast<int64_t>(all.size());
  double least = kInfinity;
  for (const auto& s : all) least = std::min(least, s.objective);
  const Split split = pd2bw::planner::best_split(model, c);
  CAPTURE(describe_candidate(c, split.bounds, least));
  CHECK(split.feasible() == (least < kInfinity));
  if (!split.feasible() || !(least < kInfinity)) return least;
  CHECK(close_rel(split.step_ms, least));
  // Another bound just above the optimum gives the same split.
  CHECK(pd2bw::planner::best_split(model, c, least * (1.0 + 1e-6)).bounds == split.bounds);
  // The walk visits exactly the splits at or below a limit (those within rounding of it may go either way).
  const std::array<double, 3> slack = {0.0, 0.02, 0.2};
  const double limit = least * (1.0 + slack[seed % slack.size()]) * (1.0 + 1e-12);
  std::set<std::vector<int64_t>> walked;
  const bool complete = pd2bw::planner::for_each_split_within(model, c, limit, INT64_MAX, [&](const Split& s) {
    CHECK(s.step_ms <= limit);
    walked.insert(s.bounds);
    return limit;
  });
  CHECK(complete);
  for (const auto& s : all) {
    if (std::abs(s.objective - limit) <= 1e-9 * limit) continue;
    CHECK((walked.count(s.bounds) == 1) == (s.objective <= limit));
  }
  tally.walked += static_cast<int64_t>(walked.size());
  return least;
}

// With `curves`, the instance's links are measured curves (add_random_curves) instead of scalars.
void compare_one(uint64_t seed, Tally& tally, bool curves = false) {
  RandomInstance inst = make_random_instance(seed);
  if (curves) pd2bw::testing::add_random_curves(inst, seed);
  INFO(inst.describe());
  const CostModel model(inst.profile, inst.cluster, inst.constraints);
  double least = kInfinity;
  int64_t candidates = 0, fewest_devices = 0;
  for_each_candidate(model, [&](const Candidate& c) {
    ++candidates;
    if (c.schedule == Schedule::zb_h1) ++tally.zb_candidates;
    if (c.chunks > 1) ++tally.chunked_candidates;
    const double v = check_candidate(model, c, seed, tally);
    if (v < least) fewest_devices = c.width * c.depth;
    if (v < kInfinity && v == least) fewest_devices = std::min(fewest_devices, c.width * c.depth);
    least = std::min(least, v);
  });
  tally.candidates += candidates;
  const SearchResult result = pd2bw::planner::objective_search(model);
  CHECK(result.candidates == candidates);
  CHECK(result.feasible() == (least < kInfinity));
  if (!result.feasible()) {
    ++tally.infeasible;
    return;
  }
  ++tally.feasible;
  const Evaluated& win = result.ranked[0];
  CAPTURE(describe_candidate(win.candidate, win.split.bounds, win.step_ms));
  CHECK(close_rel(win.step_ms, least));
  if (win.step_ms == least) CHECK(win.candidate.width * win.candidate.depth <= fewest_devices);
  check_winner(model, win);
  for (size_t i = 1; i < result.ranked.size(); ++i) CHECK(result.ranked[i - 1].step_ms <= result.ranked[i].step_ms);
  if (win.candidate.depth > 1) ++tally.multi_stage;
  if (win.candidate.schedule == Schedule::zb_h1) ++tally.zb_winners;
  const Schedule ws = win.candidate.schedule;
  if (ws == Schedule::interleaved || ws == Schedule::zb_h2 || ws == Schedule::zb_v) ++tally.new_winners;
  if (win.candidate.placement == Placement::stages_inner) ++tally.stages_inner_winners;
  for (const auto& st : win.stages)
    if (st.recompute) {
      ++tally.recompute_winners;
      break;
    }
}

}  // namespace

TEST_CASE("the partitioner and the objective search find the brute-force optimum on random small instances") {
  // PD2BW_BRUTEFORCE_INSTANCES=N runs a longer soak by hand; the default keeps the test well under 10 s.
  uint64_t kInstances = 600;
  if (const char* env = std::getenv("PD2BW_BRUTEFORCE_INSTANCES")) kInstances = std::strtoull(env, nullptr, 10);
  Tally tally;
  for (uint64_t seed = 1; seed <= kInstances; ++seed) compare_one(seed, tally);
  MESSAGE("instances " << kInstances << ": feasible " << tally.feasible << ", infeasible " << tally.infeasible
                       << ", winners with >1 stage " << tally.multi_stage << ", with recompute "
                       << tally.recompute_winners << ", stages-inner " << tally.stages_inner_winners << "; "
                       << tally.candidates << " candidates, " << tally.splits << " splits priced, "
                       << tally.walked << " walked; zb-h1: " << tally.zb_candidates << " candidates, "
                       << tally.zb_winners << " winners; chunked: " << tally.chunked_candidates
                       << " candidates; interleaved, zb-h2 or zb-v won " << tally.new_winners);
  CHECK(tally.objective_mismatches == 0);
  // The generator must cover the interesting cases, or the comparison proves little.
  if (kInstances >= 600) {
    CHECK(tally.feasible >= 240);
    CHECK(tally.zb_candidates >= 1000);
    // zb-h2's objective (its lanes) is below zb-h1's on most instances, so zb-h1 seldom wins it now.
    CHECK(tally.zb_winners >= 1);
    CHECK(tally.chunked_candidates >= 1000);
    CHECK(tally.new_winners >= 10);
    CHECK(tally.infeasible >= 30);
    CHECK(tally.multi_stage >= 60);
    CHECK(tally.recompute_winners >= 30);
    CHECK(tally.stages_inner_winners >= 2);
  }
}

TEST_CASE("the same holds when the links are measured curves") {
  // The search's lower bounds may assume only that link time does not fall with size; a curve with a
  // launch floor breaks any bound that also assumes it is affine.
  Tally tally;
  for (uint64_t seed = 1; seed <= 200; ++seed) compare_one(seed, tally, true);
  MESSAGE("curve instances: feasible " << tally.feasible << ", winners with >1 stage " << tally.multi_stage);
  CHECK(tally.objective_mismatches == 0);
  CHECK(tally.feasible >= 70);
  CHECK(tally.multi_stage >= 20);
}

namespace {

// The objective's fold from the last stage to the first, as the README states it, kept for every
// non-dominated state without windows, bounds or floors: an exact reference for instances too big to
// enumerate.
double reference_dp(const CostModel& model, const Candidate& c) {
  using State = std::array<double, 4>;
  const int64_t L = model.num_layers(), d = c.depth;
  const double m = static_cast<double>(c.microbatches), ninf = -kInfinity;
  auto prepend = [&](const State& v, const StageCost& s, int64_t i) {
    const bool h2 = c.schedule == Schedule::zb_h2;  // zb-h1's cycle without the round trips, W's deferred 2 i
    const bool zb = c.schedule == Schedule::zb_h1 || h2;  // flush with B = the backward less its W on the drain
    const double t = s.compute_ms + s.p2p_ms, h = s.allreduce_ms + s.update_ms;
    const double w_ms = zb ? s.weight_ms : 0.0, tail = std::min(static_cast<double>(h2 ? 2 * i + 1 : i + 1), m) * w_ms;
    const double u = s.forward_ms + s.backward_ms - w_ms + 2.0 * s.in_ms;
    const double cf = s.in_ms + s.forward_ms + s.out_ms, cb = s.out_ms + s.backward_ms - w_ms + s.in_ms;
    if (c.schedule == Schedule::flush || zb) {  // v[2]: the u of the later stages
      double part = m * t - tail;
      if (i + 1 < d && !h2) {
        const double w = std::min(static_cast<double>(d - i - 1), m), r = std::max(0.0, m - 1.0 - w);
        part = std::max(part, std::max(m * cf + (1 + r) * cb, (1 + r) * cf + m * cb) + v[2] - 2.0 * s.out_ms);
        if (m >= w + 2) part = std::max(part, 2.0 * (cf + cb + v[2] - 2.0 * s.out_ms) + (m - 2.0 - w) * (t - w_ms));
      }
      const double p = std::max(part, u + v[1]);
      return State{std::max(v[0], h + tail + p), p, v[2] + u, 0};
    }
    if (c.schedule == Schedule::gpipe) {
      const double uu = v[1] + u, f = std::max(v[2], cf), b = std::max(v[3], cb);
      return State{std::max({v[0], s.step_ms, h + uu + (m - 1.0) * (f + b)}), uu, f, b};
    }
    return State{std::max(v[0], s.step_ms), 0, 0, 0};
  };
  auto dominated = [](const State& a, const std::vector<State>& set) {
    for (const auto& b : set)
      if (b[0] <= a[0] && b[1] <= a[1] && b[2] <= a[2] && b[3] <= a[3]) return true;
    return false;
  };
  // states[a]: fold states of stages i..d-1 covering [a, L)
  std::vector<std::vector<State>> states(static_cast<size_t>(L + 1));
  const bool flush_like = c.schedule == Schedule::flush || c.schedule == Schedule::zb_h1 || c.schedule == Schedule::zb_h2;
  states[static_cast<size_t>(L)] = {flush_like ? State{ninf, ninf, 0.0, 0.0}
                                                                   : State{ninf, 0.0, ninf, ninf}};
  for (int64_t i = d - 1; i >= 0; --i) {
    std::vector<std::vector<State>> next(static_cast<size_t>(L + 1));
    for (int64_t a = i; a < L; ++a)
      for (int64_t e = a + 1; e <= L; ++e) {
        if (i == d - 1 && e != L) continue;
        const StageCost sc = model.stage_cost(c, i, a, e);
        if (!sc.feasible) continue;
        for (const auto& v : states[static_cast<size_t>(e)]) {
          const State x = prepend(v, sc, i);
          auto& set = next[static_cast<size_t>(a)];
          if (dominated(x, set)) continue;
          std::erase_if(set, [&](const State& y) {
            return x[0] <= y[0] && x[1] <= y[1] && x[2] <= y[2] && x[3] <= y[3];
          });
          set.push_back(x);
        }
      }
    states = std::move(next);
  }
  double best = kInfinity;
  for (const auto& v : states[0]) best = std::min(best, v[0]);
  return best;
}

}  // namespace

TEST_CASE("the objective search matches an unpruned dynamic program on medium instances") {
  // 11-40 layers on up to 32 devices: past what composition enumeration can afford, and big enough
  // for the partitioner's windows and the search's pruning to cut real work.
  const pd2bw::testing::RandomInstanceOptions opt = pd2bw::testing::medium_instance_options();
  int kMedium = 120;  // PD2BW_BRUTEFORCE_MEDIUM=N for a longer soak
  if (const char* env = std::getenv("PD2BW_BRUTEFORCE_MEDIUM")) kMedium = std::atoi(env);
  int feasible = 0;
  for (uint64_t seed = 3001; seed < 3001 + static_cast<uint64_t>(kMedium); ++seed) {
    RandomInstance inst = make_random_instance(seed, opt);
    inst.constraints.max_depth = std::min<int64_t>(inst.constraints.max_depth ? inst.constraints.max_depth : 8, 8);
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    INFO(inst.describe());
    double least = kInfinity;
    for_each_candidate(model, [&](const Candidate& c) {
      // A chunked candidate's split search is exact only within kChunkedSplitWork (the small instances
      // above check it against every composition); at this size it may keep the equal-compute split.
      if (c.chunks > 1) return;
      const double ref = reference_dp(model, c);
      const Split split = pd2bw::planner::best_split(model, c);
      CHECK(split.feasible() == (ref < kInfinity));
      if (split.feasible() && ref < kInfinity) CHECK(close_rel(split.step_ms, ref));
      least = std::min(least, ref);
    });
    const SearchResult result = pd2bw::planner::objective_search(model);
    if (least < kInfinity) CHECK(result.feasible());  // a chunked candidate may fit where none other does
    if (result.feasible() && least < kInfinity) {
      ++feasible;
      // Over the candidates of one chunk per rank the search is exact; a chunked winner can only be better.
      if (result.ranked[0].candidate.chunks == 1)
        CHECK(close_rel(result.ranked[0].step_ms, least));
      else
        CHECK(result.ranked[0].step_ms <= least * (1.0 + kRelTol));
      check_winner(model, result.ranked[0]);
    }
  }
  MESSAGE("medium instances: " << kMedium << ", feasible " << feasible);
  CHECK(feasible >= kMedium / 3);
}

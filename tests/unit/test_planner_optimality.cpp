// Black-box optimality of `pd2bw plan` against the simulator: on random small instances (<= 10 layers,
// <= 8 devices, one or two levels, every schedule, memory from ample to tight enough to force recompute),
// every split of every configuration is written as a plan and replayed until steady; the planner's choice,
// by default and with each kind of pin, must replay within 0.5% of the best of them, and --top 1 and
// --top 20 must choose the same plan. A pinned configuration that has a fitting split is never refused.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "brute_force.hpp"
#include "pd2bw/planner/search.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "random_instances.hpp"

namespace {

using pd2bw::planner::Candidate;
using pd2bw::planner::Constraints;
using pd2bw::planner::CostModel;
using pd2bw::planner::Evaluated;
using pd2bw::planner::kInfinity;
using pd2bw::planner::RecomputePolicy;
using pd2bw::planner::SearchResult;
using pd2bw::planner::Split;
using pd2bw::planner::StageCost;
using pd2bw::schemas::Schedule;
using pd2bw::testing::RandomInstance;

constexpr double kTolerance = 0.005;  // the bound on how far the planner's choice may be

// The replayed steady step of `e` written as a plan: the plan is built, read back through the plan's
// own model (plan_model), and replayed until steady, the measured step only, as the search replays
// (test_simulator_period checks that replay against longer ones).
double replay_as_plan(const CostModel& model, const RandomInstance& inst, const Evaluated& e) {
  SearchResult one;
  one.ranked = {e};
  const auto plan = pd2bw::planner::build_plan(model, one, std::string(64, '0'), {});
  const auto pm = pd2bw::planner::plan_model(inst.profile, plan);
  return pd2bw::planner::simulate_steady(pd2bw::planner::make_sim_input(
                                             pm.model, pm.candidate, pm.bounds, pm.recompute,
                                             pd2bw::planner::default_sim_steps(pm.candidate.schedule)),
                                         false, true)
      .step_ms;
}

struct Replayed {
  Candidate c;
  std::vector<int64_t> bounds;
  double step_ms;
  bool recompute;
};

// Every split of every configuration of `model`, replayed as a plan (zb-h1 on one stage too, for the
// searches that pin zb-h1).
std::vector<Replayed> replay_everything(const CostModel& model, const RandomInstance& inst) {
  std::vector<Replayed> out;
  pd2bw::testing::for_each_candidate(model, [&](const Candidate& c) {
    pd2bw::testing::for_each_split(model, c, [&](const std::vector<int64_t>& bounds, const std::vector<StageCost>& st) {
      const Evaluated e = pd2bw::planner::evaluate_split(model, c, Split{bounds, 1.0});
      bool recompute = false;
      for (const auto& s : st) recompute = recompute || s.recompute;
      out.push_back({c, bounds, replay_as_plan(model, inst, e), recompute});
    });
  }, true);
  return out;
}

bool matches(const Candidate& c, const Constraints& k) {
  // zb-h1 and zb-h2 on one stage are flush's ops, searched only when pinned.
  if ((c.schedule == Schedule::zb_h1 || c.schedule == Schedule::zb_h2) && c.depth == 1 && !k.schedule) return false;
  return (!k.schedule || c.schedule == *k.schedule) && (!k.microbatch || c.microbatch == *k.microbatch) &&
         (k.depth == 0 || c.depth == k.depth) && (k.width == 0 || c.width == k.width) &&
         (k.chunks == 0 || c.chunks == k.chunks);
}

std::string describe(const Candidate& c, const std::vector<int64_t>& bounds, double ms) {
  std::ostringstream o;
  o.precision(10);
  o << pd2bw::testing::schedule_name(c.schedule) << " b=" << c.microbatch << " d=" << c.depth << " w=" << c.width
    << " m=" << c.microbatches << " v=" << c.chunks << (c.placement == pd2bw::schemas::Placement::stages_inner ? " stages-inner" : "")
    << " [";
  for (size_t i = 0; i < bounds.size(); ++i) o << (i ? "," : "") << bounds[i];
  o << "] " << ms << " ms";
  return o.str();
}

struct Tally {
  int pinned_searches = 0, feasible = 0, recompute_best = 0, exact = 0, zb_winners = 0, new_winners = 0;
  double worst = 1.0;
};

// The planner with `k` against the best replay among `all` that `k` allows.
void check_pinned(const RandomInstance& inst, const Constraints& k, const std::vector<Replayed>& all, Tally& tally) {
  const Replayed* best = nullptr;
  for (const auto& r : all)
    if (matches(r.c, k) && (!best || r.step_ms < best->step_ms)) best = &r;
  const CostModel model(inst.profile, inst.cluster, k);
  pd2bw::planner::SearchOptions top1, top20;
  top1.top_k = 1;
  top20.top_k = 20;
  const SearchResult a = pd2bw::planner::search(model, top1);
  ++tally.pinned_searches;
  CAPTURE(k.depth);
  CAPTURE(k.width);
  CAPTURE(k.microbatch.value_or(0));
  CAPTURE(k.schedule ? pd2bw::testing::schedule_name(*k.schedule) : "any");
  // Pins never refuse a configuration with a fitting split; nothing fits when no split does.
  REQUIRE(a.feasible() == (best != nullptr));
  if (!best) return;
  ++tally.feasible;
  if (best->recompute) ++tally.recompute_best;
  const Evaluated& win = a.ranked.front();
  CAPTURE(describe(best->c, best->bounds, best->step_ms));
  CAPTURE(describe(win.candidate, win.split.bounds, win.step_ms));
  const double replayed = replay_as_plan(model, inst, win);
  CHECK(replayed == win.step_ms);  // the plan's prediction is its replay
  CHECK(replayed <= best->step_ms * (1.0 + kTolerance));
  tally.worst = std::max(tally.worst, replayed / best->step_ms);
  if (replayed <= best->step_ms) ++tally.exact;
  if (win.candidate.schedule == Schedule::zb_h1) ++tally.zb_winners;
  const Schedule ws = win.candidate.schedule;
  if (ws == Schedule::interleaved || ws == Schedule::zb_h2 || ws == Schedule::zb_v) ++tally.new_winners;
  const SearchResult b = pd2bw::planner::search(model, top20);
  CHECK(b.ranked.front().candidate.schedule == win.candidate.schedule);
  CHECK(b.ranked.front().candidate.microbatch == win.candidate.microbatch);
  CHECK(b.ranked.front().candidate.depth == win.candidate.depth);
  CHECK(b.ranked.front().candidate.width == win.candidate.width);
  CHECK(b.ranked.front().candidate.placement == win.candidate.placement);
  CHECK(b.ranked.front().split.bounds == win.split.bounds);
  CHECK(b.ranked.front().step_ms == win.step_ms);
}

// The pins to try on an instance: none, then each kind taken from the best replay's configuration
// (depth, width, microbatch, every schedule: zb-h1 when the profile times the backward in halves), and
// the whole configuration of the best and of the best replay of another schedule.
std::vector<Constraints> pins(const Constraints& base, const std::vector<Replayed>& all, bool split_backward) {
  std::vector<Constraints> out{base};
  const Replayed* best = nullptr;
  for (const auto& r : all)
    if (matches(r.c, base) && (!best || r.step_ms < best->step_ms)) best = &r;
  if (!best) return out;
  auto with = [&](auto&& set) {
    Constraints k = base;
    set(k);
    out.push_back(k);
  };
  with([&](Constraints& k) { k.depth = best->c.depth; });
  with([&](Constraints& k) { k.width = best->c.width; });
  with([&](Constraints& k) { k.microbatch = best->c.microbatch; });
  for (Schedule s : {Schedule::two_bw, Schedule::flush, Schedule::gpipe, Schedule::zb_h1, Schedule::interleaved,
                     Schedule::zb_h2, Schedule::zb_v})
    if ((!base.schedule || *base.schedule == s) && (!pd2bw::schemas::splits_backward(s) || split_backward))
      with([&](Constraints& k) { k.schedule = s; });
  if (best->c.chunks > 1) with([&](Constraints& k) { k.chunks = best->c.chunks; });
  auto whole = [&](const Candidate& c) {
    with([&](Constraints& k) {
      k.schedule = c.schedule;
      k.microbatch = c.microbatch;
      k.depth = c.depth;
      k.width = c.width;
      k.chunks = c.chunks;
    });
  };
  whole(best->c);
  for (const auto& r : all)
    if (matches(r.c, base) && r.c.schedule != best->c.schedule) {
      whole(r.c);
      break;
    }
  return out;
}

}  // namespace

TEST_CASE("the planner's choice replays within 0.5% of the best split of every configuration, pinned or not") {
  int instances = 120;
  if (const char* env = std::getenv("PD2BW_OPTIMALITY_INSTANCES")) instances = std::atoi(env);
  Tally tally;
  int64_t replayed_splits = 0;
  for (uint64_t seed = 1; seed <= static_cast<uint64_t>(instances); ++seed) {
    RandomInstance inst = pd2bw::testing::make_random_instance(seed);
    INFO(inst.describe());
    // The instance's own recompute policy, and --recompute never (a different set of splits fits).
    for (RecomputePolicy policy : {inst.constraints.recompute, RecomputePolicy::never}) {
      Constraints base = inst.constraints;
      base.recompute = policy;
      const CostModel model(inst.profile, inst.cluster, base);
      const auto all = replay_everything(model, inst);
      replayed_splits += static_cast<int64_t>(all.size());
      for (const Constraints& k : pins(base, all, model.split_backward())) check_pinned(inst, k, all, tally);
      if (inst.constraints.recompute == RecomputePolicy::never) break;
    }
  }
  MESSAGE("instances " << instances << ": " << replayed_splits << " splits replayed as plans; " << tally.pinned_searches
                       << " searches (" << tally.feasible << " feasible, " << tally.recompute_best
                       << " whose best split recomputes, " << tally.exact
                       << " at the best replay exactly, " << tally.zb_winners
                       << " won by zb-h1, " << tally.new_winners << " by interleaved, zb-h2 or zb-v); worst planner "
                       << "/ best replay " << tally.worst);
  CHECK(tally.feasible >= instances);
  CHECK(tally.recompute_best >= instances / 10);
  CHECK(tally.zb_winners >= instances / 10);
  CHECK(tally.new_winners >= instances / 4);
}

// The search's lower bounds (planner/src/step_bound.hpp) at their tightest: for every candidate of
// random small and medium instances, the exact optimum of its objective (best_split with no work limit)
// must not be below the candidate's lower bound, its refined bound, and must not be ruled out by
// rules_out at the optimum itself. The search only asks these questions at looser limits, so a bound
// that is a few percent too high can pass the end-to-end tests; here it cannot. The bounds must also
// rule out a share of the candidates just below their optimum, or this proves little. The least recompute
// of a given compute (CostModel::least_redo_ms), which the bounds and the partitioner's floors read, is
// checked against the fractional knapsack it stands for.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/partition.hpp"
#include "pd2bw/planner/search.hpp"
#include "chunk_floor.hpp"
#include "interleaved_floor.hpp"
#include "planner_test_util.hpp"
#include "random_instances.hpp"
#include "step_bound.hpp"

namespace {

using pd2bw::planner::Candidate;
using pd2bw::planner::CostModel;
using pd2bw::planner::kInfinity;
using pd2bw::planner::Split;
using pd2bw::planner::StepLowerBound;
using pd2bw::schemas::Schedule;
using pd2bw::testing::make_random_instance;
using pd2bw::testing::RandomInstance;
using pd2bw::testing::schedule_name;

struct Tally {
  int64_t checked = 0;
  std::array<int64_t, pd2bw::planner::kSchedules> ruled_below{};  // ruled out at 0.99 x the optimum
  std::array<int64_t, pd2bw::planner::kSchedules> per_schedule{};  // with more than one microbatch
  int64_t overages = 0, overage_tight = 0;  // least overages checked; fits_within fails 1% below them
  int64_t one_trip = 0, one_trip_below = 0;  // flush with stages of one round trip (m < d); ruled out 1% below
};

void check_instance(const RandomInstance& inst, Tally& tally) {
  INFO(inst.describe());
  const CostModel model(inst.profile, inst.cluster, inst.constraints);
  StepLowerBound bound(model);
  for (const Candidate& c : pd2bw::planner::enumerate_candidates(model)) {
    // fits_within against the least overage: never below it, and close to it for a share.
    if (const auto o = pd2bw::planner::least_overage_split(model, c); !o.bounds.empty() && c.chunks == 1) {
      CHECK(bound.fits_within(c, o.over_bytes));
      ++tally.overages;
      const int64_t below = o.over_bytes - std::max<int64_t>(1, (o.over_bytes < 0 ? -o.over_bytes : o.over_bytes) / 100);
      if (!bound.fits_within(c, below)) ++tally.overage_tight;
    }
    const Split best = pd2bw::planner::best_split(model, c, kInfinity, INT64_MAX);
    if (!best.feasible() || best.exhausted) continue;
    const double opt = best.step_ms;
    INFO(std::string(schedule_name(c.schedule)) << " b=" << c.microbatch << " d=" << c.depth << " w=" << c.width
                                   << " m=" << c.microbatches << " v=" << c.chunks << " optimum " << opt);
    ++tally.checked;
    const auto s = static_cast<size_t>(c.schedule);
    CHECK(bound(c) <= opt);
    if (bound.refinable(c)) {
      CHECK(bound.refined(c) <= opt);
      CHECK(bound.refined(c, bound(c), 1.5 * opt) <= opt);  // as the search asks, under a ceiling
    }
    CHECK_FALSE(bound.rules_out(c, opt));
    if (c.microbatches == 1) continue;  // the share below counts what the whole-layer tests (m > 1) rule out
    ++tally.per_schedule[s];
    const bool ruled = bound.rules_out(c, 0.99 * opt);
    if (ruled) ++tally.ruled_below[s];
    if (c.schedule == Schedule::flush && c.microbatches < c.depth) {
      ++tally.one_trip;
      if (ruled) ++tally.one_trip_below;
    }
  }
}

}  // namespace

TEST_CASE("lower bounds and rules_out never pass a candidate's exact optimum") {
  Tally tally;
  for (uint64_t seed = 1; seed <= 400; ++seed) check_instance(make_random_instance(seed), tally);
  // more layers and stages: whole-layer effects, round trips
  const pd2bw::testing::RandomInstanceOptions opt = pd2bw::testing::medium_instance_options();
  for (uint64_t seed = 5001; seed <= 5060; ++seed) {
    RandomInstance inst = make_random_instance(seed, opt);
    inst.constraints.max_depth = std::min<int64_t>(inst.constraints.max_depth ? inst.constraints.max_depth : 12, 12);
    check_instance(inst, tally);
  }
  MESSAGE("candidates checked " << tally.checked << "; least overages " << tally.overages
                                  << ", of which fits_within rules out 1% below: " << tally.overage_tight);
  CHECK(tally.checked >= 5000);
  CHECK(tally.overage_tight >= tally.overages / 4);
  // Flush with fewer microbatches than stages: its first d - m + 1 stages have one round trip below them,
  // each capped by (m - 1) max(cf, cb) over the whole model's compute (RuleWalks::one_trip_time). Without
  // those caps 29 of these 514 are ruled out 1% below their optimum, with them 39.
  MESSAGE("flush with m < d: " << tally.one_trip
                               << " candidates, ruled out at 0.99 x optimum: " << tally.one_trip_below);
  CHECK(tally.one_trip_below >= tally.one_trip / 16);
  // The tests must bite: 1% below the optimum the whole-layer lanes rule out a quarter of 2BW's candidates
  // and a fifth of zb-h1's and zb-h2's (their early stages' stashes bind), and with the cycles a tenth of
  // gpipe's and a sixth of flush's (each flush stage's cycles with its own allreduce and update,
  // RuleWalks::own_cycle_end: 335 of these 2,110 without them, 356 with).
  for (Schedule s : {Schedule::two_bw, Schedule::flush, Schedule::gpipe, Schedule::zb_h1, Schedule::zb_h2}) {
    const auto i = static_cast<size_t>(s);
    MESSAGE(std::string(schedule_name(s)) << ": " << tally.per_schedule[i]
                                          << " candidates, ruled out at 0.99 x optimum: " << tally.ruled_below[i]);
    const bool split = s == Schedule::zb_h1 || s == Schedule::zb_h2;
    const int64_t share = s == Schedule::two_bw ? 4 : split ? 5 : s == Schedule::flush ? 6 : 10;
    CHECK(tally.ruled_below[i] >= tally.per_schedule[i] / share);
  }
}

namespace {

// What every chunk of a chunked candidate pays per step at least: the allreduce of the gradients of the
// layer with the fewest parameters over a level whose groups hold its w replicas, and the cheapest
// layer's update.
double least_chunk_held(const CostModel& model, const Candidate& c) {
  int64_t params = INT64_MAX;
  double update = kInfinity;
  for (int64_t l = 0; l < model.num_layers(); ++l) {
    const auto k = static_cast<size_t>(l);
    params = std::min(params, model.param_prefix()[k + 1] - model.param_prefix()[k]);
    update = std::min(update, model.update_prefix()[k + 1] - model.update_prefix()[k]);
  }
  const int64_t grads = model.static_factors(c.schedule).grads(params);
  double a = kInfinity;
  int64_t span = 1;
  const auto& levels = model.cluster().levels;
  for (size_t lv = 0; lv < levels.size(); ++lv) {
    span *= levels[lv].size;
    if (span >= c.width || lv + 1 == levels.size())
      a = std::min(a, model.allreduce_ms(grads, c.width, static_cast<int64_t>(lv)));
  }
  return a + update;
}

// The chunked candidates (interleaved, zb-v) against their exact optima (chunk_split's exhaustive walk),
// on instances whose memory runs from tight to ample: chunked_bound (and refined(), which returns it for
// them) must never pass the optimum, and must come within 3% of it for a share of them where it stands
// above the even share of compute (memory or crowding binds), or it proves little.
struct ChunkedTally {
  int64_t checked = 0, tight = 0, above_share = 0;
  int64_t waits_above_share = 0, waits_tight = 0;          // interleaved: its waits' floor above the even share;
                                                           // within 3% of the optimum
  int64_t redone = 0, redone_binds = 0, redone_tight = 0;  // layers forced onto recomputing ranks; their
                                                          // climb is the bound; within 1% of the optimum
  double closest = 0;
};

void check_chunked(const RandomInstance& inst, ChunkedTally& tally) {
  INFO(inst.describe());
  const CostModel model(inst.profile, inst.cluster, inst.constraints);
  StepLowerBound bound(model);
  for (const Candidate& c : pd2bw::planner::enumerate_candidates(model)) {
    if (c.chunks < 2) continue;
    const Split best = pd2bw::planner::best_split(model, c, kInfinity, INT64_MAX);
    if (!best.feasible() || best.exhausted) continue;
    const double opt = best.step_ms, own = bound.chunked_bound(c);
    INFO(std::string(schedule_name(c.schedule)) << " b=" << c.microbatch << " d=" << c.depth << " w=" << c.width
                                   << " m=" << c.microbatches << " v=" << c.chunks << " optimum " << opt);
    ++tally.checked;
    CHECK(own <= opt);
    CHECK(bound(c) <= opt);
    CHECK(bound.refined(c, bound(c), 1.5 * opt) <= opt);
    const double share = static_cast<double>(c.microbatches) * model.compute_prefix(c.microbatch_index).back() /
                         static_cast<double>(c.depth);
    if (own >= 0.97 * opt) {
      ++tally.tight;
      if (own > 1.02 * share) ++tally.above_share;
    }
    if (c.schedule == Schedule::interleaved) {  // its waits' floor with the compute alone, and rank 0's allreduces
      const double waits =
          pd2bw::planner::detail::interleaved_wait_floor(c.depth, c.chunks, static_cast<double>(c.microbatches),
                                                         model.compute_prefix(c.microbatch_index).back()) +
          static_cast<double>(c.chunks) * least_chunk_held(model, c);
      CHECK(own >= waits * (1.0 - 1e-6));
      if (waits > 1.02 * share) {
        ++tally.waits_above_share;
        if (waits >= 0.97 * opt) ++tally.waits_tight;
      }
    }
    // The climb through the last chunk when the plain options' caps leave layers to recomputing ranks: the
    // whole model (B for zb-v), the least recompute of that many layers, m - 1 more of the last layer, and
    // rank 0's v allreduces.
    const int64_t L = model.num_layers();
    int64_t plain = 0;
    for (const auto& cap : pd2bw::planner::detail::chunked_rank_capacities(model, c))
      if (cap.plain >= c.chunks && model.constraints().recompute != pd2bw::planner::RecomputePolicy::always)
        plain += std::min(cap.plain, L);
    if (plain > 0 && plain < L) {
      const auto& cp = model.compute_prefix(c.microbatch_index);
      const auto& rp = model.redo_prefix(c.microbatch_index);
      const bool apart = c.schedule == Schedule::zb_v;
      const std::vector<double> none(cp.size(), 0.0);
      const auto& wp = apart ? model.weight_prefix(c.microbatch_index) : none;
      std::vector<double> redo;
      for (int64_t l = 0; l < L; ++l) redo.push_back(rp[static_cast<size_t>(l + 1)] - rp[static_cast<size_t>(l)]);
      std::sort(redo.begin(), redo.end());
      double expected = cp.back() - wp.back();
      for (int64_t l = 0; l < L - plain; ++l) expected += redo[static_cast<size_t>(l)];
      const auto last = static_cast<size_t>(L - 1);
      expected += (static_cast<double>(c.microbatches) - 1.0) * ((cp[last + 1] - cp[last]) - (wp[last + 1] - wp[last]));
      expected += static_cast<double>(c.chunks) * least_chunk_held(model, c);
      CHECK(own >= expected * (1.0 - 1e-6));
      if (own <= expected * (1.0 + 1e-6)) ++tally.redone_binds;

      ++tally.redone;
      tally.closest = std::max(tally.closest, own / opt);
      if (own >= 0.99 * opt) ++tally.redone_tight;
    }
  }
}

}  // namespace

TEST_CASE("the chunked candidates' memory bound never passes their exact optimum, and binds") {
  ChunkedTally tally;
  pd2bw::testing::RandomInstanceOptions opt;
  opt.max_nodes = 2;
  for (uint64_t seed = 9001; seed <= 9800; ++seed) {
    const bool zbv = seed % 2 == 0;
    opt.split_backward_p = zbv ? 1.0 : 0.3;  // zb-v needs the backward timed in halves
    RandomInstance inst = make_random_instance(seed, opt);
    inst.constraints.schedule = zbv ? Schedule::zb_v : Schedule::interleaved;
    check_chunked(inst, tally);
  }
  MESSAGE("chunked candidates checked " << tally.checked << ", within 3% of the optimum " << tally.tight
                                        << ", of which above the even share of compute " << tally.above_share
                                        << "; with layers forced onto recomputing ranks " << tally.redone
                                        << ", bound by their climb " << tally.redone_binds << ", within 1% "
                                        << tally.redone_tight << ", closest " << tally.closest
                                        << "; interleaved's waits above the even share " << tally.waits_above_share
                                        << ", within 3% " << tally.waits_tight);
  CHECK(tally.checked >= 2000);
  CHECK(tally.above_share >= tally.checked / 80);
  CHECK(tally.waits_above_share >= tally.checked / 20);
}

TEST_CASE("the chunked climb with the recompute that memory forces never passes the exact optimum, and binds") {
  // zb-v with few microbatches per step (one microbatch's trip through the model is most of the step) and
  // memory from tight to ample: where the plain options' caps leave layers to recomputing ranks, the
  // climb through the last chunk carries their recompute, and it is the bound.
  ChunkedTally tally;
  pd2bw::testing::RandomInstanceOptions opt;
  opt.split_backward_p = 1.0;
  opt.min_layers = 6;
  opt.max_layers = 12;
  for (uint64_t seed = 9801; seed <= 11800; ++seed) {
    RandomInstance inst = make_random_instance(seed, opt);
    inst.constraints.schedule = Schedule::zb_v;
    inst.constraints.global_batch = 2 * inst.profile.microbatch_sizes.front();  // m = 2 at width 1
    for (auto& layer : inst.profile.layers) {  // activations, not parameters, fill the memory
      layer.param_bytes /= 256;
      for (auto& t : layer.per_microbatch) t.stash_bytes *= 8;
    }
    for (auto& t : inst.profile.layers.back().per_microbatch)  // a head heavier than any block
      for (double* ms : {&t.fwd_ms, &t.bwd_ms, &t.bwd_input_ms, &t.bwd_weight_ms, &t.recompute_ms}) *ms *= 6.0;
    const int64_t ample = inst.cluster.device.memory_bytes;
    for (double scale : {1.0, 0.5, 0.3, 0.2, 0.15, 0.1, 0.07}) {
      const int64_t reserve = inst.constraints.reserve_bytes;
      inst.cluster.device.memory_bytes = inst.profile.device.memory_bytes =
          reserve + static_cast<int64_t>(scale * static_cast<double>(ample - reserve));
      check_chunked(inst, tally);
    }
  }
  MESSAGE("zb-v candidates checked " << tally.checked << "; with layers forced onto recomputing ranks " << tally.redone
                                     << ", bound by their climb " << tally.redone_binds << ", within 1% of the optimum "
                                     << tally.redone_tight << ", closest " << tally.closest);
  CHECK(tally.redone_binds >= 3);
}

TEST_CASE("the whole-layer walks stay sound where a later stage starts past the real split's") {
  // Pinned flush and zb-h1 on deeper instances with few microbatches: a walk's early stages take more
  // layers than any real split, and a later stage then has no room at its start (it must stay put, not
  // rule the candidate out). Seed 7187 was such a case (flush b=4 d=4 w=2 m=2).
  Tally tally;
  pd2bw::testing::RandomInstanceOptions opt;
  opt.min_layers = 8;
  opt.max_layers = 30;
  opt.max_per_node = 8;
  opt.max_nodes = 2;
  opt.max_devices_flat = 12;
  opt.split_backward_p = 1.0;  // zb-h1 needs the backward timed in halves
  for (uint64_t seed = 7000; seed <= 8000; ++seed) {
    RandomInstance inst = make_random_instance(seed, opt);
    inst.constraints.schedule = seed % 2 ? Schedule::flush : Schedule::zb_h1;
    inst.constraints.recompute = pd2bw::planner::RecomputePolicy::auto_;
    inst.constraints.max_depth = 10;
    check_instance(inst, tally);
  }
  CHECK(tally.checked >= 100);
}

namespace {

// The fractional knapsack least_redo_ms promises, written out: layers by redo share ascending (each redo
// capped at its compute), whole layers while they fit in `compute`, then a fraction of the next.
double knapsack_redo(const CostModel& model, int64_t bi, double compute) {
  std::vector<std::pair<double, double>> layers;  // (share, compute)
  for (const auto& l : model.profile().layers) {
    const auto& t = l.per_microbatch[static_cast<size_t>(bi)];
    const double c = t.fwd_ms + t.bwd_ms;
    layers.emplace_back(std::min(t.recompute_ms > 0 ? t.recompute_ms : t.fwd_ms, c) / c, c);
  }
  std::sort(layers.begin(), layers.end());
  double redo = 0.0;
  for (const auto& [share, c] : layers) {
    const double take = std::min(c, std::max(0.0, compute));
    redo += share * take;
    compute -= take;
  }
  return redo;
}

}  // namespace

TEST_CASE("least_redo_ms is the cheapest fractional recompute of a compute, with or without its hint") {
  int64_t checked = 0;
  for (uint64_t seed = 5001; seed <= 5100; ++seed) {
    const RandomInstance inst = make_random_instance(seed);
    INFO(inst.describe());
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    for (int64_t bi = 0; bi < static_cast<int64_t>(inst.profile.microbatch_sizes.size()); ++bi) {
      const double all = model.compute_prefix(bi).back();
      size_t hint = 0;
      // Rising (the partitioner's use: one hint per row), then falling, then past the whole model.
      for (const double f : {0.0, 0.05, 0.2, 0.2, 0.45, 0.7, 0.99, 0.6, 0.1, 0.3, 1.0, 1.5}) {
        const double x = f * all;
        CAPTURE(x);
        const double want = knapsack_redo(model, bi, x);
        const double plain = model.least_redo_ms(bi, x);
        const double hinted = model.least_redo_ms(bi, x, hint);
        CHECK(pd2bw::testing::close_rel(plain, want));
        CHECK(hinted == plain);  // the same piece, the same arithmetic
        if (f <= 1.0) CHECK(plain >= model.min_redo_share(bi) * x * (1.0 - 1e-12));
        if (f > 1.0) CHECK(plain <= all);  // every layer's redo, each at most its compute
        ++checked;
      }
    }
  }
  CHECK(checked >= 1000);
}

TEST_CASE("memory_fits rules out only candidates with no split in memory, the same with its memo shared") {
  // One bound answers every candidate of an instance, so its memo (by schedule, microbatch size and depth,
  // a range of the microbatches memory reads) is shared across widths, placements and microbatch counts;
  // the candidates come in a shuffled order, so that the memo answers counts on both sides of those it
  // walked. A fresh bound per candidate must agree, and no candidate with a split that fits (the exact
  // search's) may be ruled out, nor refined below infinity when it is ruled out. It must bite: a share of
  // the candidates with no split in memory is ruled out by it.
  int64_t checked = 0, none_fits = 0, ruled = 0;
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    const RandomInstance inst = make_random_instance(seed, pd2bw::testing::medium_instance_options());
    INFO(inst.describe());
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    StepLowerBound shared(model);
    auto candidates = pd2bw::planner::enumerate_candidates(model);
    std::shuffle(candidates.begin(), candidates.end(), std::mt19937_64(seed));
    for (const Candidate& c : candidates) {
      if (c.chunks > 1) continue;
      INFO(std::string(schedule_name(c.schedule)) << " b=" << c.microbatch << " d=" << c.depth << " w=" << c.width
                                     << " m=" << c.microbatches);
      const bool fits = shared.lanes_reach(c, kInfinity);  // answered by memory_fits (its memo shared)
      CHECK(fits == StepLowerBound(model).lanes_reach(c, kInfinity));
      const Split best = pd2bw::planner::best_split(model, c, kInfinity, INT64_MAX);
      if (best.exhausted) continue;
      ++checked;
      if (best.feasible()) CHECK(fits);
      if (best.feasible() || shared(c) == kInfinity) continue;
      ++none_fits;  // the cheap bound does not see it
      if (fits) continue;
      ++ruled;
      CHECK(shared.refined(c, shared(c), 2.0 * shared(c)) == kInfinity);
    }
  }
  MESSAGE("candidates " << checked << "; with no split in memory that the cheap bound misses " << none_fits
                        << ", of which memory_fits rules out " << ruled);
  CHECK(checked >= 5000);
  CHECK(ruled >= none_fits / 2);
  CHECK(ruled >= 500);
}

// least_overage_split and least_overage_bytes (planner/src/partition_overage.cpp) against the plain form of
// the same search: the split tables over the static-memory windows of the balanced split's fullest stage,
// one run, no walks, no greedy, no narrowed windows. Deeper random instances than the brute force of
// test_partition_overage can take, with many equal stages (the split tables' choice among equal splits is
// what the narrowed windows and the caps must keep). The same split, the same overage, for every bound.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "brute_force.hpp"
#include "pd2bw/checked.hpp"
#include "partition_internal.hpp"
#include "partition_overage.hpp"
#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/partition.hpp"
#include "prepared.hpp"
#include "random_instances.hpp"
#include "split_tables.hpp"

namespace {

using pd2bw::planner::Candidate;
using pd2bw::planner::CostModel;
using pd2bw::planner::OverageSplit;
namespace detail = pd2bw::planner::detail;

int64_t bytes_of(const CostModel& model, const detail::PreparedCandidate& pc, int64_t i, int64_t a, int64_t e) {
  const auto q = detail::quick_price(pc, i, a, e);
  return q.recompute ? q.redo_bytes : q.plain_bytes;
}

// The plain search (one chunk per rank).
OverageSplit reference(const CostModel& model, const Candidate& c, int64_t bound_bytes) {
  OverageSplit out;
  out.over_bytes = INT64_MAX;
  const int64_t L = model.num_layers(), d = c.depth, limit = model.memory_limit_bytes();
  const auto pc = detail::prepare(model, c);
  std::vector<int64_t> start{0};  // stages of about equal parameter bytes
  const auto& pp = model.param_prefix();
  for (int64_t i = 1; i < d; ++i) {
    const double target = static_cast<double>(pp.back()) * static_cast<double>(i) / static_cast<double>(d);
    auto e = static_cast<int64_t>(std::lower_bound(pp.begin(), pp.end(), static_cast<int64_t>(target)) - pp.begin());
    start.push_back(std::clamp(e, start.back() + 1, L - (d - i)));
  }
  start.push_back(L);
  int64_t most = 0;
  for (int64_t i = 0; i < d; ++i)
    most = std::max(most, bytes_of(model, pc, i, start[size_t(i)], start[size_t(i + 1)]));
  const int64_t bound = std::min(most, pd2bw::saturating_add(limit, bound_bytes));
  const auto w = detail::make_windows(model, pc, pd2bw::planner::kInfinity, bound - pc.reserve_bytes, false, true);
  if (!w) return out;
  const detail::SplitTables<detail::TwoBwFold> tables(
      L, d, 1.0, static_cast<double>(bound), w->start_lo, w->start_hi,
      [&](int64_t i, int64_t a) { return w->hi(i, a); },
      [&](int64_t i, int64_t a, int64_t e) -> std::optional<detail::StageTerms> {
        detail::StageTerms s;
        s.lane = static_cast<double>(bytes_of(model, pc, i, a, e));
        return s;
      },
      [&](int64_t, int64_t a, int64_t e) {
        return static_cast<double>(model.static_bytes(c.schedule, a, e) + pc.reserve_bytes);
      },
      [](int64_t, int64_t) { return 0.0; });
  const auto* best = tables.best();
  if (!best || static_cast<int64_t>(best->v[0]) > bound) return out;
  out.bounds = tables.bounds(best);
  out.over_bytes = static_cast<int64_t>(best->v[0]) - limit;
  return out;
}

}  // namespace

TEST_CASE("least_overage_split gives the plain split tables' split and overage, under every bound") {
  int64_t compared = 0, over = 0, deep = 0;
  for (uint64_t seed = 1; seed <= 60; ++seed) {
    pd2bw::testing::RandomInstanceOptions opt = pd2bw::testing::medium_instance_options();
    opt.min_layers = 8;
    pd2bw::testing::RandomInstance inst = pd2bw::testing::make_random_instance(seed, opt);
    if (seed % 2 == 0)  // every layer the same: many splits of equal fullest stages
      for (size_t i = 1; i < inst.profile.layers.size(); ++i) {
        const auto name = inst.profile.layers[i].name;
        inst.profile.layers[i] = inst.profile.layers[0];
        inst.profile.layers[i].name = name;
      }
    const int64_t spare = inst.cluster.device.memory_bytes - inst.constraints.reserve_bytes;
    for (const int64_t memory : {inst.cluster.device.memory_bytes, inst.constraints.reserve_bytes + spare / 10}) {
      pd2bw::testing::set_device_memory(inst, memory);
      INFO(inst.describe());
      const CostModel model(inst.profile, inst.cluster, inst.constraints);
      pd2bw::testing::for_each_candidate(model, [&](const Candidate& c) {
        if (c.chunks > 1) return;
        CAPTURE(c.depth);
        CAPTURE(c.microbatch);
        const std::string schedule = pd2bw::testing::schedule_name(c.schedule);
        CAPTURE(schedule);
        const auto want = reference(model, c, INT64_MAX);
        const auto got = pd2bw::planner::least_overage_split(model, c);
        CHECK(got.bounds == want.bounds);
        CHECK(got.over_bytes == want.over_bytes);
        ++compared;
        over += want.over_bytes > 0;
        deep += c.depth >= 6;
        if (want.bounds.empty()) return;
        // Bounds at, just below and well above the least overage.
        for (const int64_t b : {want.over_bytes, want.over_bytes - 1, want.over_bytes + 12345}) {
          CAPTURE(b);
          const auto ref = reference(model, c, b);
          const auto cut = pd2bw::planner::least_overage_split(model, c, b);
          CHECK(cut.bounds == ref.bounds);
          CHECK(cut.over_bytes == ref.over_bytes);
          CHECK(detail::least_overage_bytes(model, c, b) == ref.over_bytes);
        }
      });
    }
  }
  MESSAGE("compared " << compared << " candidates, " << over << " over the memory, " << deep << " of depth >= 6");
  CHECK(compared >= 2000);
  CHECK(over >= compared / 4);
  CHECK(deep >= 200);
}

// least_overage_split starts from the least cap at which its forward walk reaches the last layer, found by
// walks that each decide an interval of caps: it must be exactly that cap (the walk reaches there and not
// one byte below), from bounds far above it and near it.
TEST_CASE("least_walk_cap is the least cap the overage walk reaches at") {
  auto opt = pd2bw::testing::medium_instance_options();
  int64_t checked = 0;
  for (uint64_t seed = 9101; seed <= 9140; ++seed) {
    const auto inst = pd2bw::testing::make_random_instance(seed, opt);
    INFO(inst.describe());
    const CostModel model(inst.profile, inst.cluster, inst.constraints);
    for (const Candidate& c : pd2bw::planner::enumerate_candidates(model)) {
      if (c.chunks > 1) continue;
      const int64_t limit = model.memory_limit_bytes();
      for (const int64_t bound : {4 * limit, limit + limit / 8}) {
        const int64_t cap = detail::least_walk_cap(model, c, bound);
        INFO("d=" << c.depth << " m=" << c.microbatches << " bound " << bound << " cap " << cap);
        if (cap < 0) {
          CHECK_FALSE(detail::overage_walk_reaches(model, c, bound));
          continue;
        }
        ++checked;
        CHECK(cap <= bound);
        CHECK(detail::overage_walk_reaches(model, c, cap));
        if (cap > 0) CHECK_FALSE(detail::overage_walk_reaches(model, c, cap - 1));
      }
    }
  }
  MESSAGE("caps checked " << checked);
  CHECK(checked >= 200);
}

// least_overage_split: the split whose fullest stage exceeds device memory the least.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "chunk_price.hpp"
#include "partition_internal.hpp"
#include "prepared.hpp"
#include "split_tables.hpp"

namespace pd2bw::planner {

using detail::make_windows;
using detail::StageTerms;

namespace {

// Layers split so that stages hold about equal parameter bytes; a quick starting bound.
std::vector<int64_t> balanced_by_params(const CostModel& model, int64_t d) {
  const auto& pp = model.param_prefix();
  const int64_t L = model.num_layers();
  std::vector<int64_t> bounds{0};
  for (int64_t i = 1; i < d; ++i) {
    const double target = static_cast<double>(pp.back()) * static_cast<double>(i) / static_cast<double>(d);
    int64_t e = static_cast<int64_t>(std::lower_bound(pp.begin(), pp.end(), static_cast<int64_t>(target)) - pp.begin());
    e = std::clamp(e, bounds.back() + 1, L - (d - i));
    bounds.push_back(e);
  }
  bounds.push_back(L);
  return bounds;
}

}  // namespace

OverageSplit least_overage_split(const CostModel& model, const Candidate& c, int64_t bound_bytes) {
  const int64_t L = model.num_layers();
  OverageSplit out;
  if (c.depth < 1 || c.depth > L) return out;
  if (c.chunks > 1) return detail::chunked_least_overage_split(model, c, bound_bytes);
  const auto pc = detail::prepare(model, c);
  // A stage's bytes in the option the recompute policy picks. The tables compare bytes, not overages:
  // their relative slack assumes values >= 0, and an overage is negative when a split fits.
  auto bytes = [&](int64_t i, int64_t a, int64_t e) {
    const auto q = detail::quick_price(model, pc, i, a, e);
    return q.recompute ? q.redo_bytes : q.plain_bytes;
  };
  const int64_t limit = model.memory_limit_bytes();
  const auto start = balanced_by_params(model, c.depth);
  int64_t most = 0;  // the largest stage of the balanced split, in bytes
  for (int64_t i = 0; i < c.depth; ++i)
    most = std::max(most, bytes(i, start[static_cast<size_t>(i)], start[static_cast<size_t>(i + 1)]));
  const int64_t bound = std::min(most, saturating_add(limit, bound_bytes));
  // Every stage holds at least its static bytes and the reserve: that narrows the windows.
  const int64_t static_cap = bound - model.constraints().reserve_bytes;
  const auto w = make_windows(model, pc, kInfinity, static_cap, false, true);
  if (!w) {
    out.over_bytes = INT64_MAX;
    return out;
  }
  const detail::SplitTables<detail::TwoBwFold> tables(
      L, c.depth, 1.0, static_cast<double>(bound), w->start_lo, w->start_hi,
      [&](int64_t i, int64_t a) { return w->hi(i, a); },
      [&](int64_t i, int64_t a, int64_t e) -> std::optional<StageTerms> {
        StageTerms s;
        s.lane = static_cast<double>(bytes(i, a, e));
        return s;
      },
      [&](int64_t, int64_t a, int64_t e) {
        return static_cast<double>(model.static_bytes(c.schedule, a, e) + model.constraints().reserve_bytes);
      },
      [](int64_t) { return 0.0; });
  const auto* best = tables.best();
  // The tables check no state of a last stage against the bound: one stage comes back whatever it is.
  if (!best || static_cast<int64_t>(best->v[0]) > bound) {
    out.over_bytes = INT64_MAX;
    return out;
  }
  out.bounds = tables.bounds(best);
  out.over_bytes = static_cast<int64_t>(best->v[0]) - limit;
  return out;
}

}  // namespace pd2bw::planner

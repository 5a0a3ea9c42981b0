// Exact min-max splitting of the layers into contiguous stages by dynamic programming, with windows
// derived from an upper bound so that the work stays near O(layers^2) for a tight bound.
#include "pd2bw/planner/partition.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "prepared.hpp"

namespace pd2bw::planner {

namespace {

// The DP over stage end points. cost(i, a, c) prices layers [a, c) as stage i (infinity when
// infeasible); lo[c] is the smallest start worth trying for a stage ending at c (non-decreasing);
// cmin[i] is the smallest end of stage i that leaves the rest coverable. Returns bounds or empty.
template <class Cost>
std::vector<int64_t> minmax_dp(int64_t L, int64_t d, double bound, const std::vector<int64_t>& lo,
                               const std::vector<int64_t>& cmin, Cost&& cost, double* best_out) {
  const auto n = static_cast<size_t>(L + 1);
  std::vector<double> prev(n, kInfinity), cur(n, kInfinity);
  std::vector<int32_t> back(static_cast<size_t>(d) * n, -1);
  for (int64_t c = std::max<int64_t>(1, cmin[0]); c <= L - (d - 1); ++c) {
    if (lo[static_cast<size_t>(c)] > 0) break;
    const double v = cost(0, 0, c);
    if (v <= bound) prev[static_cast<size_t>(c)] = v;
  }
  for (int64_t i = 1; i < d; ++i) {
    std::fill(cur.begin(), cur.end(), kInfinity);
    int64_t plo = -1, phi = -1;
    for (int64_t a = 0; a <= L; ++a)
      if (prev[static_cast<size_t>(a)] < kInfinity) {
        if (plo < 0) plo = a;
        phi = a;
      }
    if (plo < 0) return {};
    const int64_t c_first = std::max({plo + 1, cmin[static_cast<size_t>(i)], i + 1});
    const int64_t c_last = i == d - 1 ? L : L - (d - 1 - i);
    for (int64_t c = i == d - 1 ? L : c_first; c <= c_last; ++c) {
      double best = kInfinity;
      int32_t arg = -1;
      const int64_t a_last = std::min(c - 1, phi);
      for (int64_t a = std::max(plo, lo[static_cast<size_t>(c)]); a <= a_last; ++a) {
        const double pv = prev[static_cast<size_t>(a)];
        if (!(pv < best)) continue;
        const double v = std::max(pv, cost(i, a, c));
        if (v < best) {
          best = v;
          arg = static_cast<int32_t>(a);
        }
      }
      if (best <= bound) {
        cur[static_cast<size_t>(c)] = best;
        back[static_cast<size_t>(i) * n + static_cast<size_t>(c)] = arg;
      }
    }
    std::swap(prev, cur);
  }
  const double result = prev[static_cast<size_t>(L)];
  if (!(result <= bound) || result == kInfinity) return {};
  std::vector<int64_t> bounds(static_cast<size_t>(d + 1));
  bounds[static_cast<size_t>(d)] = L;
  for (int64_t i = d - 1; i >= 1; --i)
    bounds[static_cast<size_t>(i)] = back[static_cast<size_t>(i) * n + static_cast<size_t>(bounds[static_cast<size_t>(i + 1)])];
  bounds[0] = 0;
  *best_out = result;
  return bounds;
}

// lo[c]: smallest a whose range [a, c) can still meet `time_cap` (compute alone, times factor) and
// whose static memory fits `static_cap` bytes. Two pointers: both quantities grow as a decreases.
std::vector<int64_t> start_windows(const CostModel& model, const Candidate& c, double time_cap,
                                   int64_t static_cap) {
  const int64_t L = model.num_layers();
  const auto& cp = model.compute_prefix(c.microbatch_index);
  const double k = static_cast<double>(CostModel::pipeline_factor(c));
  std::vector<int64_t> lo(static_cast<size_t>(L + 1), 0);
  int64_t a = 0;
  for (int64_t e = 1; e <= L; ++e) {
    while (a < e && (k * (cp[static_cast<size_t>(e)] - cp[static_cast<size_t>(a)]) > time_cap ||
                     model.static_bytes(c.schedule, a, e) > static_cap))
      ++a;
    lo[static_cast<size_t>(e)] = a;  // a == e means no start works
  }
  return lo;
}

// cmin[i]: smallest end of stage i such that the d - 1 - i later stages can hold the rest within the
// time cap and the static memory cap (necessary conditions; a small slack absorbs rounding).
std::vector<int64_t> end_windows(const CostModel& model, const Candidate& c, double time_cap,
                                 int64_t static_cap) {
  const int64_t L = model.num_layers();
  const auto& cp = model.compute_prefix(c.microbatch_index);
  const double k = static_cast<double>(CostModel::pipeline_factor(c));
  std::vector<int64_t> cmin(static_cast<size_t>(c.depth), 0);
  for (int64_t i = 0; i < c.depth; ++i) {
    const double rest = static_cast<double>(c.depth - 1 - i);
    int64_t e = i + 1;
    while (e < L && (k * (cp[static_cast<size_t>(L)] - cp[static_cast<size_t>(e)]) >
                         rest * time_cap * (1.0 + 1e-9) ||
                     static_cast<double>(model.static_bytes(c.schedule, e, L)) >
                         rest * static_cast<double>(static_cap)))
      ++e;
    cmin[static_cast<size_t>(i)] = e;
  }
  return cmin;
}

// A feasible split found greedily (each stage as long as allowed) at threshold t, or empty.
std::vector<int64_t> greedy_split(const CostModel& model, const detail::PreparedCandidate& pc, double t,
                                  int64_t static_cap) {
  const int64_t L = model.num_layers();
  const int64_t d = pc.candidate.depth;
  const auto& cp = model.compute_prefix(pc.candidate.microbatch_index);
  const double k = static_cast<double>(pc.factor);
  std::vector<int64_t> bounds{0};
  int64_t a = 0;
  for (int64_t i = 0; i < d; ++i) {
    const int64_t last = i == d - 1 ? L : L - (d - 1 - i);
    int64_t pick = -1;
    for (int64_t e = a + 1; e <= last; ++e) {
      if (k * (cp[static_cast<size_t>(e)] - cp[static_cast<size_t>(a)]) > t ||
          model.static_bytes(pc.candidate.schedule, a, e) > static_cap)
        break;
      if (i == d - 1 && e != L) continue;
      const auto sc = detail::price_stage(model, pc, i, a, e);
      if (sc.feasible && sc.step_ms <= t) pick = e;
    }
    if (pick < 0) return {};
    bounds.push_back(pick);
    a = pick;
  }
  return bounds;
}

// An upper bound on the optimum from greedy splits: bisection on the threshold.
double greedy_bound(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap,
                    double cap) {
  const auto& cp = model.compute_prefix(pc.candidate.microbatch_index);
  const double k = static_cast<double>(pc.factor);
  double lo = k * cp.back() / static_cast<double>(pc.candidate.depth);
  double hi = lo;
  int doublings = 0;
  while (greedy_split(model, pc, hi, static_cap).empty()) {
    if (hi > cap || ++doublings > 40) return kInfinity;
    hi *= 2.0;
  }
  for (int it = 0; it < 40 && hi - lo > 1e-7 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    (greedy_split(model, pc, mid, static_cap).empty() ? lo : hi) = mid;
  }
  return hi;
}

}  // namespace

Split best_split(const CostModel& model, const Candidate& c, double upper_bound_ms) {
  Split out;
  const int64_t L = model.num_layers();
  if (c.depth < 1 || c.depth > L) return out;
  const auto pc = detail::prepare(model, c);
  const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  const double bound = std::min(upper_bound_ms, greedy_bound(model, pc, static_cap, upper_bound_ms));
  const auto lo = start_windows(model, c, bound, static_cap);
  const auto cmin = end_windows(model, c, bound, static_cap);
  auto cost = [&](int64_t i, int64_t a, int64_t e) {
    const auto sc = detail::price_stage(model, pc, i, a, e);
    return sc.feasible ? sc.step_ms : kInfinity;
  };
  double best = kInfinity;
  auto bounds = minmax_dp(L, c.depth, bound, lo, cmin, cost, &best);
  if (bounds.empty()) return out;
  out.bounds = std::move(bounds);
  out.step_ms = best;
  return out;
}

OverageSplit least_overage_split(const CostModel& model, const Candidate& c) {
  const int64_t L = model.num_layers();
  OverageSplit out;
  if (c.depth < 1 || c.depth > L) return out;
  const auto pc = detail::prepare(model, c);
  const std::vector<int64_t> lo(static_cast<size_t>(L + 1), 0);
  const std::vector<int64_t> cmin(static_cast<size_t>(c.depth), 0);
  auto cost = [&](int64_t i, int64_t a, int64_t e) {
    const auto sc = detail::price_stage(model, pc, i, a, e);
    return static_cast<double>(sc.memory.total_bytes - sc.memory.limit_bytes);
  };
  double best = kInfinity;
  out.bounds = minmax_dp(L, c.depth, kInfinity, lo, cmin, cost, &best);
  out.over_bytes = static_cast<int64_t>(best);
  return out;
}

}  // namespace pd2bw::planner

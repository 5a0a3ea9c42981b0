// Exact min-max splitting of the layers into contiguous stages by dynamic programming, with windows
// derived from an upper bound so that the work stays near O(layers^2) for a tight bound.
#include "pd2bw/planner/partition.hpp"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <vector>

#include "prepared.hpp"

namespace pd2bw::planner {

namespace {

// The DP over stage end points. cost(i, a, c) prices layers [a, c) as stage i (infinity when
// infeasible); floor(i, a, c) is a cheap lower bound on it that does not grow with a, so scanning
// starts from the latest a and stops once the floor passes the best found; lo(i, c) is the smallest
// start worth trying for a stage ending at c (non-decreasing); cmin[i] is the smallest end of stage i
// that leaves the rest coverable. Ties go to the smallest a. Returns bounds or empty.
template <class Lo, class Floor, class Cost>
std::vector<int64_t> minmax_dp(int64_t L, int64_t d, double bound, Lo&& lo,
                               const std::vector<int64_t>& cmin, Floor&& floor, Cost&& cost,
                               double* best_out) {
  const auto n = static_cast<size_t>(L + 1);
  std::vector<double> prev(n, kInfinity), cur(n, kInfinity);
  // Only entries on the path are ever read back, so the table is left uninitialised.
  auto back = std::make_unique_for_overwrite<int32_t[]>(static_cast<size_t>(d) * n);
  int64_t plo = -1, phi = -1;  // finite range of prev
  for (int64_t c = std::max<int64_t>(1, cmin[0]); c <= L - (d - 1); ++c) {
    if (lo(0, c) > 0) break;
    const double v = cost(0, 0, c);
    if (v <= bound) {
      prev[static_cast<size_t>(c)] = v;
      if (plo < 0) plo = c;
      phi = c;
    }
  }
  for (int64_t i = 1; i < d; ++i) {
    if (plo < 0) return {};
    const int64_t c_first = i == d - 1 ? L : std::max({plo + 1, cmin[static_cast<size_t>(i)], i + 1});
    const int64_t c_last = i == d - 1 ? L : L - (d - 1 - i);
    int64_t nlo = -1, nhi = -1;
    for (int64_t c = c_first; c <= c_last; ++c) {
      const int64_t a_first = std::max(plo, lo(i, c));
      if (a_first > phi) break;  // lo only grows with c
      double best = bound;
      int32_t arg = -1;
      for (int64_t a = std::min(c - 1, phi); a >= a_first; --a) {
        if (floor(i, a, c) > best) break;
        const double pv = prev[static_cast<size_t>(a)];
        if (!(pv <= best)) continue;
        const double v = std::max(pv, cost(i, a, c));
        if (v <= best) {
          best = v;
          arg = static_cast<int32_t>(a);
        }
      }
      if (arg >= 0) {
        cur[static_cast<size_t>(c)] = best;
        back[static_cast<size_t>(i) * n + static_cast<size_t>(c)] = arg;
        if (nlo < 0) nlo = c;
        nhi = c;
      } else {
        cur[static_cast<size_t>(c)] = kInfinity;
      }
    }
    std::swap(prev, cur);
    plo = nlo;
    phi = nhi;
  }
  if (plo < 0 || phi != L) return {};
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

// The least p2p time (per microbatch) stage i can have: its links carry at least the smallest boundary
// tensor of the model. Used only to narrow the DP's windows.
std::vector<double> least_p2p(const CostModel& model, const detail::PreparedCandidate& pc) {
  const auto bi = static_cast<size_t>(pc.candidate.microbatch_index);
  int64_t small = INT64_MAX;
  for (const auto& l : model.profile().layers)
    small = std::min({small, l.per_microbatch[bi].input_bytes, l.per_microbatch[bi].output_bytes});
  std::vector<double> out;
  for (const auto& st : pc.stages)
    out.push_back((st.in_level >= 0 ? 2.0 * model.p2p_ms(small, st.in_level) : 0.0) +
                  (st.out_level >= 0 ? 2.0 * model.p2p_ms(small, st.out_level) : 0.0));
  return out;
}

// lo[e]: smallest a whose layers [a, e) fit `static_cap` bytes of static memory (two pointers).
std::vector<int64_t> static_starts(const CostModel& model, const Candidate& c, int64_t static_cap) {
  const int64_t L = model.num_layers();
  std::vector<int64_t> lo(static_cast<size_t>(L + 1), 0);
  int64_t a = 0;
  for (int64_t e = 1; e <= L; ++e) {
    while (a < e && model.static_bytes(c.schedule, a, e) > static_cap) ++a;
    lo[static_cast<size_t>(e)] = a;  // a == e means no start works
  }
  return lo;
}

// The most compute (fwd + bwd per microbatch) stage i can hold in a split whose step time is <= bound:
// k (compute + p2p) + allreduce <= bound with at least the stage's least p2p and allreduce latency;
// a stage that recomputes pays at least (1 + the smallest forward share) times its compute, and one
// that does not must fit its stash (CostModel::plain_capacity_ms). Negative: the stage cannot exist.
std::vector<double> stage_compute_caps(const CostModel& model, const detail::PreparedCandidate& pc,
                                       double bound) {
  const Candidate& c = pc.candidate;
  const auto p2p = least_p2p(model, pc);
  const double k = static_cast<double>(pc.factor);
  const double share = model.min_fwd_share(c.microbatch_index);
  const auto policy = model.constraints().recompute;
  std::vector<double> caps;
  for (int64_t i = 0; i < c.depth; ++i) {
    const auto& st = pc.stages[static_cast<size_t>(i)];
    const double latency = st.ar_level >= 0 ? model.allreduce_ms(0, c.width, st.ar_level) : 0.0;
    const double x = (bound - latency) / k - p2p[static_cast<size_t>(i)];
    const double plain = std::min(x, model.plain_capacity_ms(c.schedule, c.microbatch_index, st.in_flight));
    const double redo = x / (1.0 + share);
    const double cap = policy == RecomputePolicy::never    ? plain
                       : policy == RecomputePolicy::always ? redo
                                                           : std::max(plain, redo);
    caps.push_back(cap * (1.0 + 1e-9));  // slack for rounding: the caps only prune
  }
  return caps;
}

// cmin[i]: smallest end of stage i such that stages i + 1 .. d - 1 can hold the rest: within their
// compute caps (when given) and the static memory cap.
std::vector<int64_t> stage_min_ends(const CostModel& model, const Candidate& c, const std::vector<double>& caps,
                                    int64_t static_cap) {
  const int64_t L = model.num_layers();
  const auto& cp = model.compute_prefix(c.microbatch_index);
  std::vector<int64_t> cmin(static_cast<size_t>(c.depth), 0);
  double later = 0.0;
  int64_t e = L;
  for (int64_t i = c.depth - 1; i >= 0; --i) {
    const auto rest = static_cast<double>(c.depth - 1 - i);
    while (e > i + 1 && (caps.empty() || cp[static_cast<size_t>(L)] - cp[static_cast<size_t>(e - 1)] <= later) &&
           static_cast<double>(model.static_bytes(c.schedule, e - 1, L)) <= rest * static_cast<double>(static_cap))
      --e;
    cmin[static_cast<size_t>(i)] = std::max(e, i + 1);
    if (!caps.empty()) later += std::max(0.0, caps[static_cast<size_t>(i)]);
  }
  return cmin;
}

// A necessary condition for any split, checked before pricing anything: stage by stage, the furthest
// end the windows allow (a stage ending at e starts at or after lo(i, e), which never decreases in e)
// must move forward and reach the last layer.
template <class Lo>
bool windows_reach_end(int64_t L, int64_t d, Lo&& lo) {
  int64_t reach = 0;
  for (int64_t i = 0; i < d; ++i) {
    int64_t e_lo = reach + 1, e_hi = L - (d - 1 - i);
    if (e_lo > e_hi || lo(i, e_lo) > reach) return false;
    while (e_lo < e_hi) {  // the largest e with lo(i, e) <= reach
      const int64_t mid = e_lo + (e_hi - e_lo + 1) / 2;
      if (lo(i, mid) <= reach)
        e_lo = mid;
      else
        e_hi = mid - 1;
    }
    reach = e_lo;
  }
  return reach == L;
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
      const auto q = detail::quick_price(model, pc, i, a, e);
      if (q.feasible && q.step_ms <= t) pick = e;
    }
    if (pick < 0) return {};
    bounds.push_back(pick);
    a = pick;
  }
  return bounds;
}

// An upper bound on the optimum from greedy splits, by bisection on the threshold, never above `known`
// (the DP's work grows with the gap between its bound and the optimum, and a greedy run is cheap).
// With an infinite `known` the threshold doubles until a greedy split exists.
double greedy_bound(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap,
                    double known) {
  const auto& cp = model.compute_prefix(pc.candidate.microbatch_index);
  const double k = static_cast<double>(pc.factor);
  double lo = k * cp.back() / static_cast<double>(pc.candidate.depth);
  double hi = known < kInfinity ? known : lo;
  if (known < kInfinity) {
    if (lo >= hi || greedy_split(model, pc, hi, static_cap).empty()) return known;
  } else {
    for (int doublings = 0; greedy_split(model, pc, hi, static_cap).empty(); hi *= 2.0)
      if (++doublings > 40) return kInfinity;
  }
  for (int it = 0; it < 10 && hi - lo > 1e-3 * hi; ++it) {
    const double mid = 0.5 * (lo + hi);
    (greedy_split(model, pc, mid, static_cap).empty() ? lo : hi) = mid;
  }
  return hi;
}

}  // namespace

double greedy_step_ms(const CostModel& model, const Candidate& c) {
  if (c.depth < 1 || c.depth > model.num_layers()) return kInfinity;
  const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  return greedy_bound(model, detail::prepare(model, c), static_cap, kInfinity);
}

Split best_split(const CostModel& model, const Candidate& c, double upper_bound_ms) {
  Split out;
  const int64_t L = model.num_layers();
  if (c.depth < 1 || c.depth > L) return out;
  const auto pc = detail::prepare(model, c);
  const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  const double bound = greedy_bound(model, pc, static_cap, upper_bound_ms);
  if (!(bound < kInfinity)) return out;
  const auto caps = stage_compute_caps(model, pc, bound);
  const auto lo_static = static_starts(model, c, static_cap);
  const auto cmin = stage_min_ends(model, c, caps, static_cap);
  const auto& cp = model.compute_prefix(c.microbatch_index);
  auto lo = [&](int64_t i, int64_t e) {
    // Smallest a with cp[e] - cp[a] <= caps[i]; e itself (no start) when the cap is negative.
    const double least = cp[static_cast<size_t>(e)] - caps[static_cast<size_t>(i)];
    const auto a = std::lower_bound(cp.begin(), cp.begin() + e, least) - cp.begin();
    return std::max<int64_t>(a, lo_static[static_cast<size_t>(e)]);
  };
  auto cost = [&](int64_t i, int64_t a, int64_t e) {
    const auto q = detail::quick_price(model, pc, i, a, e);
    return q.feasible ? q.step_ms : kInfinity;
  };
  const double k = static_cast<double>(pc.factor);
  auto floor = [&](int64_t, int64_t a, int64_t e) {
    return k * (cp[static_cast<size_t>(e)] - cp[static_cast<size_t>(a)]);
  };
  if (!windows_reach_end(L, c.depth, lo)) return out;
  double best = kInfinity;
  auto bounds = minmax_dp(L, c.depth, bound, lo, cmin, floor, cost, &best);
  if (bounds.empty()) return out;
  out.bounds = std::move(bounds);
  out.step_ms = best;
  return out;
}

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
  const auto pc = detail::prepare(model, c);
  auto over = [&](int64_t i, int64_t a, int64_t e) {
    const auto q = detail::quick_price(model, pc, i, a, e);
    return (q.recompute ? q.redo_bytes : q.plain_bytes) - model.memory_limit_bytes();
  };
  const auto start = balanced_by_params(model, c.depth);
  int64_t bound = INT64_MIN;
  for (int64_t i = 0; i < c.depth; ++i)
    bound = std::max(bound, over(i, start[static_cast<size_t>(i)], start[static_cast<size_t>(i + 1)]));
  bound = std::min(bound, bound_bytes);
  // Every stage holds at least its static bytes and the reserve: that narrows the windows.
  const int64_t static_cap = model.memory_limit_bytes() - model.constraints().reserve_bytes + bound;
  const auto lo_all = static_starts(model, c, static_cap);
  const auto cmin = stage_min_ends(model, c, {}, static_cap);
  auto lo = [&](int64_t, int64_t e) { return lo_all[static_cast<size_t>(e)]; };
  auto cost = [&](int64_t i, int64_t a, int64_t e) { return static_cast<double>(over(i, a, e)); };
  const int64_t fixed = model.constraints().reserve_bytes - model.memory_limit_bytes();
  auto floor = [&](int64_t, int64_t a, int64_t e) {
    return static_cast<double>(model.static_bytes(c.schedule, a, e) + fixed);
  };
  double best = kInfinity;
  out.bounds = minmax_dp(L, c.depth, static_cast<double>(bound), lo, cmin, floor, cost, &best);
  out.over_bytes = out.bounds.empty() ? INT64_MAX : static_cast<int64_t>(best);
  return out;
}

}  // namespace pd2bw::planner

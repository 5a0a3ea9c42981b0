// The windows on where each stage may start and end for splits whose objective is under a bound.
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "bisect.hpp"
#include "partition_internal.hpp"
#include "prepared.hpp"

namespace pd2bw::planner::detail {

namespace {

// The largest parameter bytes whose static memory (weights, master, grads, optimizer) fits `cap` bytes.
int64_t params_within(const StaticFactors& f, int64_t cap) {
  if (cap < 0) return -1;
  // Static bytes are at least the parameter bytes and total() never falls (it saturates at INT64_MAX).
  return detail::last_true(int64_t{0}, cap, [&](int64_t p) { return f.total(p) <= cap; });
}

// The least per-microbatch p2p a stage of `pc` can have: each boundary it has moves at least the smallest
// boundary tensor, twice, over the fastest of its levels.
double least_p2p(const CostModel& model, const detail::PreparedCandidate& pc, const detail::PreparedStage& st) {
  auto least = [&](Span levels) {
    double out = kInfinity;
    for (uint32_t k = levels.first; k < levels.first + levels.count; ++k)
      out = std::min(out, model.least_boundary_p2p_ms(pc.candidate.microbatch_index, pc.table_levels[k]));
    return levels.count == 0 ? 0.0 : 2.0 * out;
  };
  return least(st.in) + least(st.out);
}

// Per stage, the most compute (fwd + bwd per microbatch) it can hold in a split whose objective is <= bound:
// its busy time m (compute + p2p) + allreduce <= bound with at least its least p2p and allreduce latency;
// a stage that recomputes pays at least (1 + the smallest redo share) times its compute, and one that
// does not must fit its stash (CostModel::plain_capacity_ms). GPipe also runs (m - 1) of each slot after
// one microbatch has passed every layer: (m - 1) compute <= bound - all layers' compute.
// With `lanes_only` the bound is on the busiest stage alone.
std::vector<double> stage_compute_caps(const CostModel& model, const detail::PreparedCandidate& pc, double bound,
                                       bool lanes_only) {
  const Candidate& c = pc.candidate;
  const double m = static_cast<double>(c.microbatches);
  const double share = model.min_redo_share(c.microbatch_index);
  const double all = model.compute_prefix(c.microbatch_index).back();
  const auto policy = model.constraints().recompute;
  std::vector<double> caps;
  for (int64_t i = 0; i < c.depth; ++i) {
    const auto& st = pc.stages[static_cast<size_t>(i)];
    const double latency = st.ar_level >= 0 ? model.allreduce_ms(0, c.width, st.ar_level) : 0.0;
    double x = (bound - latency) / m - least_p2p(model, pc, st);
    if (!lanes_only && c.schedule == Schedule::gpipe && c.microbatches > 1) x = std::min(x, (bound - all) / (m - 1.0));
    const double plain = std::min(x, model.plain_capacity_ms(c.schedule, c.microbatch_index, st.in_flight));
    const double redo = x / (1.0 + share);
    const double cap = policy == RecomputePolicy::never    ? plain
                       : policy == RecomputePolicy::always ? redo
                                                           : std::max(plain, redo);
    caps.push_back(cap * (1.0 + 1e-9));  // slack for rounding: the caps only prune
  }
  return caps;
}

}  // namespace

// Windows for `bound`; nullopt when no split can fit them.
std::optional<Windows> make_windows(const CostModel& model, const detail::PreparedCandidate& pc, double bound,
                                    int64_t static_cap, bool use_caps, bool lanes_only) {
  const Candidate& c = pc.candidate;
  const int64_t L = model.num_layers(), d = c.depth;
  Windows w;
  w.caps = use_caps ? stage_compute_caps(model, pc, bound, lanes_only)
                    : std::vector<double>(static_cast<size_t>(d), kInfinity);
  w.max_params = params_within(pc.statics, static_cap);
  w.cp = &model.compute_prefix(c.microbatch_index);
  w.pp = &model.param_prefix();
  if (w.max_params < 0) return std::nullopt;
  w.start_hi.assign(static_cast<size_t>(d), 0);
  w.start_lo.assign(static_cast<size_t>(d), 0);
  for (int64_t i = 1; i < d; ++i) {  // furthest start: each earlier stage as long as allowed
    const int64_t prev = w.start_hi[static_cast<size_t>(i - 1)];
    w.start_hi[static_cast<size_t>(i)] = std::min(w.hi(i - 1, prev), L - (d - i));
    if (w.start_hi[static_cast<size_t>(i)] < i) return std::nullopt;
  }
  int64_t need = L;  // earliest start from which stages i..d-1 reach L
  for (int64_t i = d - 1; i >= 0; --i) {
    need = std::max(w.lo(i, need), i);
    w.start_lo[static_cast<size_t>(i)] = need;
    if (need > w.start_hi[static_cast<size_t>(i)]) return std::nullopt;
  }
  if (w.hi(d - 1, w.start_hi[static_cast<size_t>(d - 1)]) < L) return std::nullopt;
  return w;
}

}  // namespace pd2bw::planner::detail

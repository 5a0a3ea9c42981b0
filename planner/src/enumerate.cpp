// The search space: which schedules a search considers and every (schedule, microbatch, width, depth,
// microbatches, chunks, placement) point of it, with those too large to replay summed up.
#include <algorithm>
#include <vector>

#include "pd2bw/planner/search.hpp"

namespace pd2bw::planner {

std::vector<Schedule> searched_schedules(const CostModel& model) {
  const auto& k = model.constraints();
  if (k.schedule) return {*k.schedule};
  if (model.split_backward())
    return {Schedule::two_bw, Schedule::flush,  Schedule::gpipe, Schedule::zb_h1,
            Schedule::interleaved, Schedule::zb_h2, Schedule::zb_v};
  return {Schedule::two_bw, Schedule::flush, Schedule::gpipe, Schedule::interleaved};
}

namespace {

// The divisors of n in ascending order (O(sqrt n); n is at most kMaxGlobalBatch).
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t q = 1; q * q <= n; ++q)
    if (n % q == 0) {
      low.push_back(q);
      if (q != n / q) high.push_back(n / q);
    }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

// The chunks per rank searched for schedule s on d ranks of a model of `layers` layers: interleaved 2, 4,
// 8, ... while every chunk keeps a layer, zb-v 2, the others 1; `pinned` (> 0) keeps that one alone.
std::vector<int64_t> chunk_options(Schedule s, int64_t d, int64_t layers, int64_t pinned) {
  std::vector<int64_t> out;
  if (s == Schedule::interleaved) {
    for (int64_t v = 2; v <= layers / d; v *= 2) out.push_back(v);
  } else {
    out.push_back(s == Schedule::zb_v ? 2 : 1);
    if (d * out.back() > layers) out.clear();
  }
  if (pinned > 0) {
    const bool allowed = pipeline::chunks_allowed(s, pinned) && d * pinned <= layers;
    out.assign(allowed ? 1 : 0, pinned);
  }
  return out;
}

}  // namespace

std::vector<Candidate> enumerate_candidates(const CostModel& model, LeftOut* left_out) {
  const auto& k = model.constraints();
  const auto& sizes = model.profile().microbatch_sizes;
  const int64_t devices = model.cluster().total_devices();
  int64_t max_d = std::min(model.num_layers(), devices);
  if (k.max_depth > 0) max_d = std::min(max_d, k.max_depth);
  if (left_out) *left_out = {};
  std::vector<double> heaviest(sizes.size(), 0.0);  // fwd + bwd of the heaviest layer, per microbatch size
  for (size_t bi = 0; bi < sizes.size(); ++bi) {
    const auto& cp = model.compute_prefix(static_cast<int64_t>(bi));
    for (size_t j = 0; j + 1 < cp.size(); ++j) heaviest[bi] = std::max(heaviest[bi], cp[j + 1] - cp[j]);
  }
  auto per_stage = [&](size_t bi, int64_t d) {
    return model.compute_prefix(static_cast<int64_t>(bi)).back() / static_cast<double>(d);
  };
  std::vector<Candidate> out;
  for (Schedule s : searched_schedules(model)) {
    for (size_t bi = 0; bi < sizes.size(); ++bi) {
      const int64_t b = sizes[bi];
      if (k.microbatch && *k.microbatch != b) continue;
      if (k.global_batch % b != 0) continue;
      // b * w divides the global batch: w runs over the divisors of global_batch / b, never over devices.
      const auto widths = divisors(k.global_batch / b);
      for (int64_t d = 1; d <= max_d; ++d) {
        if (k.depth > 0 && d != k.depth) continue;
        for (int64_t w : widths) {
          if (w > devices / d) break;
          if (k.width > 0 && w != k.width) continue;
          const int64_t m = k.global_batch / (b * w);
          if (m < pipeline::min_microbatches(s, d) || m % pipeline::microbatch_multiple(s, d) != 0) continue;
          // One stage: zb-h1 and zb-h2 run flush's ops exactly. (Chunks on one rank differ from flush: a
          // recomputing rank rebuilds one chunk's stash at a time.)
          if ((s == Schedule::zb_h1 || s == Schedule::zb_h2) && d == 1 && !k.schedule) continue;
          for (int64_t v : chunk_options(s, d, model.num_layers(), k.chunks)) {
            Candidate c{s, static_cast<int64_t>(bi), b, w, d, m, Placement::replicas_inner, v};
            if (m > (v > 1 ? kMaxChunkedMicrobatches : kMaxReplayedMicrobatches) / (d * v)) {
              if (left_out) {
                left_out->count += w > 1 && d > 1 ? 2 : 1;
                left_out->candidates.push_back(c);
                if (w > 1 && d > 1) {
                  left_out->candidates.push_back(c);
                  left_out->candidates.back().placement = Placement::stages_inner;
                }
                // Some stage runs m microbatches of at least the average compute, and of the heaviest layer.
                const double floor = static_cast<double>(m) * std::max(heaviest[bi], per_stage(bi, d));
                left_out->floor_ms = std::min(left_out->floor_ms, floor * (1.0 - 1e-9));
              }
              continue;
            }
            out.push_back(c);
            if (w > 1 && d > 1) {
              c.placement = Placement::stages_inner;
              out.push_back(c);
            }
          }
        }
      }
    }
  }
  return out;
}

}  // namespace pd2bw::planner

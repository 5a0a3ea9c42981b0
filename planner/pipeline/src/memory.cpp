// The per-stage memory model: the factors of a schedule and optimizer, and a stage's terms.
#include "pd2bw/pipeline/memory.hpp"

#include <fmt/format.h>

#include <array>
#include <utility>

#include "pd2bw/error.hpp"

namespace pd2bw::pipeline {

MemoryFactors memory_factors(Schedule s, Optimizer o, int64_t compute_bytes, int64_t state_bytes) {
  if (compute_bytes < 1 || state_bytes < 1)
    throw UsageError(fmt::format("dtype sizes must be >= 1 byte (got compute {} state {})", compute_bytes,
                                 state_bytes));
  MemoryFactors f;
  f.compute_bytes = compute_bytes;
  f.state_bytes = state_bytes;
  f.versions = weight_versions(s);
  f.moments = optimizer_moments(o);
  return f;
}

int64_t MemoryFactors::most_params_within(int64_t cap) const {
  if (total(0) > cap) return -1;
  int64_t lo = 0, hi = INT64_MAX;  // total(lo) <= cap, and the answer is in [lo, hi]
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2 + 1;
    if (total(mid) <= cap)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

StageMemoryTerms stage_memory_terms(const MemoryFactors& f, const StageMemoryInput& in) {
  StageMemoryTerms t;
  t.version_bytes = in.param_bytes;
  t.fixed_bytes = saturating_add(saturating_add(f.master_copy(in.param_bytes), f.grads(in.param_bytes)),
                                 saturating_add(f.optimizer(in.param_bytes),
                                                saturating_add(in.comm_bytes, in.reserve_bytes)));
  t.per_microbatch_bytes = in.recompute ? in.input_bytes : in.stash_bytes;
  t.recompute_bytes = in.recompute ? in.stash_bytes : 0;
  t.weight_grad_bytes = in.split_backward ? in.weight_grad_bytes : 0;
  return t;
}

schemas::MemoryBreakdown stage_memory(const MemoryFactors& f, const StageMemoryInput& in, int64_t limit_bytes) {
  schemas::MemoryBreakdown m;
  m.weights_bytes = f.weights(in.param_bytes);
  m.master_bytes = f.master_copy(in.param_bytes);
  m.grads_bytes = f.grads(in.param_bytes);
  m.optimizer_bytes = f.optimizer(in.param_bytes);
  if (in.split_backward) {
    const auto [ahead, defer] = split_shape(in.schedule, in.depth, in.stage);
    m.stash_bytes = deferred_stash_term(ahead, defer, in.microbatches, in.recompute, in.input_bytes, in.stash_bytes,
                                        in.weight_grad_bytes);
  } else {
    m.stash_bytes = stash_term(in.in_flight, in.recompute, in.input_bytes, in.stash_bytes);
  }
  m.comm_bytes = in.comm_bytes;
  m.reserve_bytes = in.reserve_bytes;
  m.total_bytes = memory_total(m);
  m.limit_bytes = limit_bytes;
  m.dominant = dominant_term(m);
  return m;
}

int64_t memory_total(const schemas::MemoryBreakdown& m) {
  int64_t total = 0;
  for (int64_t term : {m.weights_bytes, m.master_bytes, m.grads_bytes, m.optimizer_bytes, m.stash_bytes, m.comm_bytes,
                       m.reserve_bytes})
    total = saturating_add(total, term);
  return total;
}

std::string dominant_term(const schemas::MemoryBreakdown& m) {
  const std::array<std::pair<const char*, int64_t>, 7> terms{{{"weights", m.weights_bytes},
                                                              {"master", m.master_bytes},
                                                              {"grads", m.grads_bytes},
                                                              {"optimizer", m.optimizer_bytes},
                                                              {"stash", m.stash_bytes},
                                                              {"comm", m.comm_bytes},
                                                              {"reserve", m.reserve_bytes}}};
  const auto* top = &terms[0];
  for (const auto& t : terms)
    if (t.second > top->second) top = &t;
  return top->first;
}

}  // namespace pd2bw::pipeline

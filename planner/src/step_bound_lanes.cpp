// The whole-layer lanes bound (StepLowerBound::lanes_reach, lanes_bound): every schedule's objective is
// at least its busiest lane, max_i (m t_i + h_i) (objective.hpp), so no split beats the least T at which
// d stages of whole layers, each within its own memory, can all have lanes <= T.
//
// Relaxing a stage: price stage k holding layers [a, e) as the partitioner does (price_stage.cpp), but
// with the smallest boundary tensors of the model for its input (stash and buffers) and output buffers,
// its replicas' least transfers (stage_links: the smallest tensor over each level its replicas cross) and
// its allreduce at its replicas' level. Each term then only grows when layers are added at either end:
// parameters, stash, W stash, compute, redo and update are sums over the layers, and the allreduce is
// non-decreasing in bytes. Its memory decides recompute as the policy does: when the relaxed stage fits
// without recompute its compute is the plain one, at most the real stage's; when it does not, neither
// does the real one, which must recompute (or not fit). So the relaxed lane of [a, e) is at most the real
// lane of any run of layers containing [a, e), and is non-decreasing in e.
//
// The walk: stage 0 starts at layer 0 and each stage k, starting at g_k, ends at the furthest e >= g_k
// whose relaxed lane is <= T (e = g_k, an empty stage, when not even one layer fits). If some split
// [a_0 = 0, a_1, ..., a_d = L) has every real lane <= T, then g_k >= a_k for every k: it holds at k = 0,
// and when g_k >= a_k, either g_k >= a_{k+1} or [g_k, a_{k+1}) lies inside stage k's run [a_k, a_{k+1}),
// whose real lane is <= T, so its relaxed lane is too and g_{k+1} >= a_{k+1}. Hence the walk reaches L;
// when it does not, no split has all lanes <= T.
#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "bisect.hpp"
#include "pd2bw/pipeline/memory.hpp"
#include "pd2bw/planner/partition.hpp"
#include "prepared.hpp"
#include "step_bound.hpp"

namespace pd2bw::planner {

StepLowerBound::Relaxed::Relaxed(const StepLowerBound& bound, const Candidate& c, int64_t extra_bytes)
    : c_(c), statics_(bound.model_.static_factors(c.schedule)), cp_(bound.model_.compute_prefix(c.microbatch_index)),
      rp_(bound.model_.redo_prefix(c.microbatch_index)), sp_(bound.model_.stash_prefix(c.microbatch_index)),
      pp_(bound.model_.param_prefix()), wp_(bound.model_.weight_stash_prefix(c.microbatch_index)),
      policy_(bound.model_.constraints().recompute), split_(schemas::splits_backward(c.schedule)) {
  const auto bi = static_cast<size_t>(c.microbatch_index);
  input_ = bound.min_input_any_[bi];
  limit_ = saturating_add(bound.model_.memory_limit_bytes(), extra_bytes);
  const int64_t reserve = bound.model_.constraints().reserve_bytes;
  stages_.resize(static_cast<size_t>(std::max<int64_t>(c.depth, 0)));
  for (int64_t k = 0; k < c.depth; ++k) {
    auto& st = stages_[static_cast<size_t>(k)];
    st.fixed = saturating_add(pipeline::comm_buffer_bytes(k, c.depth, bound.min_in_[bi], bound.min_out_[bi]), reserve);
    if (split_)
      std::tie(st.ahead, st.defer) = pipeline::split_shape(c.schedule, c.depth, k);
    else
      st.in_flight = CostModel::in_flight(c, k);
  }
}

double StepLowerBound::Relaxed::time(int64_t k, int64_t a, int64_t e) const {
  const auto& st = stages_[static_cast<size_t>(k)];
  const auto ua = static_cast<size_t>(a), ue = static_cast<size_t>(e);
  const int64_t stash = sp_[ue] - sp_[ua];
  auto stash_term = [&](bool redo) {
    return split_ ? pipeline::deferred_stash_term(st.ahead, st.defer, c_.microbatches, redo, input_, stash,
                                                  wp_[ue] - wp_[ua])
                  : pipeline::stash_term(st.in_flight, redo, input_, stash);
  };
  const int64_t fixed = saturating_add(statics_.total(pp_[ue] - pp_[ua]), st.fixed);
  const auto choice =
      detail::choose_recompute(policy_, saturating_add(fixed, stash_term(false)), saturating_add(fixed, stash_term(true)), limit_);
  if (!choice.feasible) return kInfinity;
  return (cp_[ue] - cp_[ua]) + (choice.recompute ? rp_[ue] - rp_[ua] : 0.0);
}

bool StepLowerBound::lanes_reach(const Candidate& c, double t) const {
  if (c.chunks > 1 || c.depth < 1) return true;
  const auto links = stage_links(c);
  const auto levels = placement_levels(c);
  const Relaxed relaxed(*this, c);
  const auto& statics = model_.static_factors(c.schedule);
  const auto& pp = model_.param_prefix();
  const auto& up = model_.update_prefix();
  const int64_t L = model_.num_layers();
  const double m = static_cast<double>(c.microbatches);
  int64_t a = 0;
  for (int64_t k = 0; k < c.depth && a < L; ++k) {
    const auto& l = links[static_cast<size_t>(k)];
    const int64_t ar_level = levels->ar_level[static_cast<size_t>(k)];
    const auto ua = static_cast<size_t>(a);
    a = gallop(a, L, [&](int64_t e) {
      const auto ue = static_cast<size_t>(e);
      const double allreduce = model_.allreduce_ms(statics.grads(pp[ue] - pp[ua]), c.width, ar_level);
      const double time = relaxed.time(k, a, e);
      return time < kInfinity && m * (time + l.lane) + allreduce + (up[ue] - up[ua]) <= t;
    });
  }
  return a >= L;
}

// The same walk with memory alone: a stage's bytes in the policy's option are at least its relaxed bytes
// (smallest boundary tensors), so a split whose every stage is within the memory plus over_bytes makes
// each relaxed run within it too, and the walk reaches the last layer as above.
bool StepLowerBound::fits_within(const Candidate& c, int64_t over_bytes) const {
  if (c.chunks > 1 || c.depth < 1) return true;
  const Relaxed relaxed(*this, c, over_bytes);
  const int64_t L = model_.num_layers();
  int64_t a = 0;
  for (int64_t k = 0; k < c.depth && a < L; ++k)
    a = gallop(a, L, [&](int64_t e) { return relaxed.time(k, a, e) < kInfinity; });
  return a >= L;
}

}  // namespace pd2bw::planner

// The memory model of one pipeline stage (DESIGN.md section 5), written once: weight versions in the
// compute dtype, master weights when the compute dtype is narrower than the state dtype, gradients and
// optimizer moments in the state dtype, the stash of the in-flight microbatches (or, when recomputing,
// their inputs plus one microbatch's full stash), the boundary buffers and the reserve. The planner's
// pricing, the simulator's memory replay and the executor's host-memory check all read it.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <utility>

#include "pd2bw/checked.hpp"
#include "pd2bw/pipeline/shape.hpp"
#include "pd2bw/schemas/plan.hpp"

namespace pd2bw::pipeline {

// Turns a stage's parameter bytes (compute dtype) into the terms that depend on nothing else. Integer
// arithmetic: state(p) = p / compute_bytes * state_bytes, so the terms are exact for whole parameters.
// Every term saturates at INT64_MAX (a stage that large fits no device); readers that must report such
// sizes check them first (the planner refuses a profile whose whole model overflows).
struct MemoryFactors {
  int64_t compute_bytes = 4;  // bytes of one parameter in the compute dtype
  int64_t state_bytes = 4;    // bytes of one master weight, gradient or optimizer-moment element
  int64_t versions = 1;       // weight versions held (weight_versions(schedule))
  int64_t moments = 2;        // optimizer moments per parameter (optimizer_moments(optimizer))

  // A separate master copy exists when the compute dtype differs from the state dtype (e.g. bf16 / fp32).
  bool master() const { return compute_bytes != state_bytes; }
  int64_t state(int64_t param_bytes) const { return saturating_mul(param_bytes / compute_bytes, state_bytes); }
  int64_t weights(int64_t param_bytes) const { return saturating_mul(versions, param_bytes); }
  int64_t master_copy(int64_t param_bytes) const { return master() ? state(param_bytes) : 0; }
  int64_t grads(int64_t param_bytes) const { return state(param_bytes); }
  int64_t optimizer(int64_t param_bytes) const { return saturating_mul(moments, state(param_bytes)); }
  // weights + master + grads + optimizer: a lower bound on any stage holding these parameters.
  int64_t total(int64_t param_bytes) const {
    return saturating_add(saturating_add(weights(param_bytes), master_copy(param_bytes)),
                          saturating_add(grads(param_bytes), optimizer(param_bytes)));
  }
  // The most parameter bytes p >= 0 with total(p) <= cap, -1 when not even 0 fits: total never falls as
  // p grows, so total(p) <= cap exactly when p <= most_params_within(cap). O(64) totals.
  int64_t most_params_within(int64_t cap) const;
};

// The factors of schedule `s` and optimizer `o` with parameters of `compute_bytes` and state (master,
// gradients, moments) of `state_bytes` each: the planner passes the profile's dtype and 4 (fp32 state),
// the executor its compute dtype and its master dtype.
MemoryFactors memory_factors(Schedule s, Optimizer o, int64_t compute_bytes, int64_t state_bytes);

// Bytes of the stash term: `in_flight` microbatches' stashes, or with recompute their inputs plus one
// microbatch's full stash (rebuilt for the backward being run). Inline: the partitioner's inner loop.
// Saturates at INT64_MAX.
inline int64_t stash_term(int64_t in_flight, bool recompute, int64_t input_bytes, int64_t stash_bytes) {
  return recompute ? saturating_add(saturating_mul(in_flight, input_bytes), stash_bytes)
                   : saturating_mul(in_flight, stash_bytes);
}

// The B's deferred_stash_term weighs (k = 0, defer, m - ahead and m - 1, those in [0, m - 1]): before
// each, the activations min(ahead, m - k) and the deferred W's min(k, defer); visit(activations, deferred
// W's) for each, in that order (at most 4 calls).
template <class Visit>
inline void for_each_deferred_shape(int64_t ahead, int64_t defer, int64_t microbatches, Visit&& visit) {
  const int64_t last = microbatches - 1;
  for (int64_t k : {int64_t{0}, defer, microbatches - ahead, last})
    if (k >= 0 && k <= last) visit(ahead < microbatches - k ? ahead : microbatches - k, k < defer ? k : defer);
}

// The stash term of a stage whose backward is split, holding at most `ahead` activations between forward
// and B and deferring its W's by `defer` microbatches, with `microbatches` per step: the largest over its
// B's of the memory just before one (the activations in flight, the recomputed stash when recomputing,
// the W stashes of `weight_grad_bytes` still deferred) and just after it (one activation fewer, one W
// stash more). Before the B of microbatch k the stage holds min(ahead, m - k) activations and
// min(k, defer) deferred W's (the schedule runs one forward per B after its warm-up, and the W of k -
// defer after the B of k); both are linear in k between k = defer and k = m - ahead, so the largest is at
// one of those, k = 0 or k = m - 1. zb-h1: ahead = d - i, defer = i; zb-h2: ahead = 2 (d - i) - 1,
// defer = 2 i (split_shape). Saturates.
inline int64_t deferred_stash_term(int64_t ahead, int64_t defer, int64_t microbatches, bool recompute,
                                   int64_t input_bytes, int64_t stash_bytes, int64_t weight_grad_bytes) {
  const int64_t activation = recompute ? input_bytes : stash_bytes;
  int64_t most = 0;
  for_each_deferred_shape(ahead, defer, microbatches, [&](int64_t act, int64_t deferred) {
    const int64_t before = saturating_add(saturating_add(saturating_mul(act, activation), recompute ? stash_bytes : 0),
                                          saturating_mul(deferred, weight_grad_bytes));
    const int64_t after =
        saturating_add(saturating_mul(act - 1, activation), saturating_mul(deferred + 1, weight_grad_bytes));
    most = std::max({most, before, after});
  });
  return most;
}

// The (ahead, defer) of stage `stage` of `depth` under a split-backward schedule of one chunk per rank:
// (d - i, i) for zb-h1, (2 (d - i) - 1, 2 i) for zb-h2.
inline std::pair<int64_t, int64_t> split_shape(Schedule s, int64_t depth, int64_t stage) {
  if (s == Schedule::zb_h2) return {2 * (depth - stage) - 1, 2 * stage};
  return {depth - stage, stage};
}

// zb-h1's stash term, stage `stage` of `depth` (deferred_stash_term with ahead = d - i, defer = i). With
// m >= d the largest is the steady state, d - i activations and i W's. Saturates.
inline int64_t split_stash_term(int64_t depth, int64_t microbatches, int64_t stage, bool recompute, int64_t input_bytes,
                                int64_t stash_bytes, int64_t weight_grad_bytes) {
  return deferred_stash_term(depth - stage, stage, microbatches, recompute, input_bytes, stash_bytes,
                             weight_grad_bytes);
}

// Send and receive buffers of stage `stage` of `depth`: both directions of the input boundary (activation
// in, gradient out) unless it is the first stage, and of the output boundary unless it is the last.
// Saturates at INT64_MAX.
inline int64_t comm_buffer_bytes(int64_t stage, int64_t depth, int64_t input_bytes, int64_t output_bytes) {
  return saturating_add(stage > 0 ? saturating_mul(2, input_bytes) : 0,
                        stage + 1 < depth ? saturating_mul(2, output_bytes) : 0);
}

// What one stage holds, per device (bytes; one microbatch of the planned size).
struct StageMemoryInput {
  int64_t param_bytes = 0;  // the stage's parameters in the compute dtype
  int64_t stash_bytes = 0;  // what backward keeps of one microbatch, over the stage's layers
  int64_t input_bytes = 0;  // the stage's input activation of one microbatch (kept when recomputing)
  int64_t comm_bytes = 0;   // boundary buffers (comm_buffer_bytes)
  int64_t in_flight = 0;    // microbatches stashed at once (pipeline::in_flight)
  bool recompute = false;
  int64_t reserve_bytes = 0;  // runtime overhead kept aside
  // A schedule that splits the backward (zb-h1): what one microbatch keeps from its B to its W, over the
  // stage's layers, and the stage's place (split_stash_term): stage i of d with m microbatches per step.
  bool split_backward = false;
  int64_t weight_grad_bytes = 0;
  int64_t stage = 0, depth = 1, microbatches = 1;
  Schedule schedule = Schedule::zb_h1;  // which split schedule (split_shape), when split_backward
};

// The same model in the form an event-by-event replay needs (the simulator adds and frees these).
struct StageMemoryTerms {
  int64_t version_bytes = 0;         // one weight version (held `versions` times at most)
  int64_t fixed_bytes = 0;           // master + grads + optimizer + comm + reserve, held throughout
  int64_t per_microbatch_bytes = 0;  // from a microbatch's forward to its backward: its stash, or its
                                     // input when recomputing
  int64_t recompute_bytes = 0;       // one microbatch's full stash from Recompute to the end of Backward
                                     // (or BackwardInput; 0 without recompute)
  int64_t weight_grad_bytes = 0;     // from the end of a BackwardInput to the end of its BackwardWeight
};
StageMemoryTerms stage_memory_terms(const MemoryFactors& f, const StageMemoryInput& in);

// The stage's peak by term: weights = versions x one version, stash = stash_term(...) (split_stash_term
// when the backward is split: deferred_stash_term with split_shape), the others as above; total_bytes their sum
// (saturating), limit_bytes = `limit_bytes`, dominant the name of the largest term
// ("weights", "master", "grads", "optimizer", "stash", "comm", "reserve"; the first of equals).
schemas::MemoryBreakdown stage_memory(const MemoryFactors& f, const StageMemoryInput& in, int64_t limit_bytes);

// The sum of m's seven terms (saturating), and the name of the largest (the first of equals): what
// stage_memory writes as total_bytes and dominant. Plan checks read them too.
int64_t memory_total(const schemas::MemoryBreakdown& m);
std::string dominant_term(const schemas::MemoryBreakdown& m);

}  // namespace pd2bw::pipeline

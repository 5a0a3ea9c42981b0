// The schedule generator: per-rank op streams and lists for 2BW, PipeDream-Flush, GPipe, ZB-H1, ZB-H2,
// interleaved 1F1B and ZB-V.
#include "pd2bw/pipeline/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <limits>
#include <utility>

#include "pd2bw/error.hpp"

namespace pd2bw::pipeline {

std::string_view to_string(OpKind k) {
  switch (k) {
    case OpKind::recv_activation: return "recv_activation";
    case OpKind::forward: return "forward";
    case OpKind::send_activation: return "send_activation";
    case OpKind::recv_gradient: return "recv_gradient";
    case OpKind::recompute: return "recompute";
    case OpKind::backward: return "backward";
    case OpKind::backward_input: return "backward_input";
    case OpKind::backward_weight: return "backward_weight";
    case OpKind::send_gradient: return "send_gradient";
    case OpKind::allreduce: return "allreduce";
    case OpKind::update: return "update";
  }
  return "?";
}

int64_t version_for_step(Schedule kind, int64_t step) {
  return kind == Schedule::two_bw ? std::max<int64_t>(step - 1, 0) : step;
}

namespace {

void check_spec(const ScheduleSpec& s, int64_t stage) {
  if (s.depth < 1 || s.microbatches < 1 || s.steps < 1 || s.width < 1)
    throw UsageError(fmt::format("schedule needs d, m, steps and width >= 1 (got d={} m={} steps={} w={})",
                                 s.depth, s.microbatches, s.steps, s.width));
  if (stage < 0 || stage >= s.depth)
    throw UsageError(fmt::format("stage {} is outside 0..{}", stage, s.depth - 1));
  if (!chunks_allowed(s.kind, s.chunks))
    throw UsageError(fmt::format("{} cannot hold {} chunks per rank", to_string(s.kind), s.chunks),
                     "interleaved takes 2 or more, zb-v exactly 2, the other schedules 1");
  if (s.microbatches < min_microbatches(s.kind, s.depth))
    throw UsageError(fmt::format("{} needs m >= d (got m={} d={})", to_string(s.kind), s.microbatches, s.depth),
                     "raise the microbatches per step or use fewer stages");
  if (s.microbatches % microbatch_multiple(s.kind, s.depth) != 0)
    throw UsageError(fmt::format("{} needs m to be a multiple of d (got m={} d={})", to_string(s.kind),
                                 s.microbatches, s.depth),
                     "Megatron's rule: the microbatches go round the ranks in groups of d");
}

using LocalUnit = std::pair<OpKind, std::pair<int64_t, int64_t>>;  // kind, (local chunk, microbatch)

// One step of interleaved 1F1B on position i (see stage_ops): the k-th forward and backward by Megatron's
// order, after its warm-up, one forward and one backward at a time.
void interleaved_units(int64_t d, int64_t v, int64_t m, int64_t i, std::vector<LocalUnit>& out) {
  const int64_t total = m * v;
  const auto at = [&](int64_t k, bool fwd) {
    const int64_t w = k % (d * v), j = w / d;
    return std::make_pair(fwd ? j : v - 1 - j, (k / (d * v)) * d + w % d);
  };
  const int64_t warm = m == d ? total : std::min(total, 2 * (d - i - 1) + (v - 1) * d);
  int64_t nf = 0, nb = 0;
  for (; nf < warm; ++nf) out.push_back({OpKind::forward, at(nf, true)});
  for (; nb < total; ++nb) {
    if (nf < total) out.push_back({OpKind::forward, at(nf++, true)});
    out.push_back({OpKind::backward, at(nb, false)});
  }
}

// One step of zb-v on position i (see stage_ops): chunk 0 is i, chunk 1 is 2 d - 1 - i.
void zbv_units(int64_t d, int64_t m, int64_t i, std::vector<LocalUnit>& out) {
  std::array<int64_t, 2> f{}, b{}, w{};
  const auto fwd = [&](int64_t j) {
    if (f[j] < m) out.push_back({OpKind::forward, {j, f[j]++}});
  };
  const auto bwd = [&](int64_t j) {
    if (b[j] < f[j]) out.push_back({OpKind::backward_input, {j, b[j]++}});
  };
  const auto wgt = [&](int64_t j) {
    if (w[j] < b[j]) out.push_back({OpKind::backward_weight, {j, w[j]++}});
  };
  for (int64_t n = 0; n < std::min(m, 2 * (d - i) - 1); ++n) fwd(0);
  for (int64_t n = 0; n < i; ++n) fwd(1), fwd(0);
  for (int64_t n = 0; n < d - i; ++n) fwd(1), bwd(1), wgt(1);
  while (f[1] < f[0] || f[0] < m) {
    fwd(0);
    if (b[0] < b[1]) bwd(0), wgt(0);
    fwd(1), bwd(1), wgt(1);
  }
  for (int64_t n = 0; n < i; ++n) bwd(0), bwd(1);
  for (int64_t n = 0; n < d - i; ++n) bwd(0), wgt(0);
  while (w[1] < b[1]) wgt(1);
  while (w[0] < b[0]) wgt(0);
  while (b[1] < m) bwd(1), wgt(1);
  while (b[0] < m) bwd(0), wgt(0);
}

}  // namespace

std::vector<int64_t> chunks_at(Schedule kind, int64_t depth, int64_t chunks, int64_t stage) {
  // One chunk per rank (every schedule but interleaved and zb-v): chunk_position(c) is c for c < d, so
  // the rank holds its own stage; a replay builds one stream per rank, and the pass below is O(d).
  if (chunks == 1 && stage >= 0 && stage < depth) return {stage};
  std::vector<int64_t> out;
  // The two placements of chunk_position solved for the chunk, without a pass over all d v chunks.
  if (kind == Schedule::interleaved && stage >= 0 && stage < depth) {
    for (int64_t k = 0; k < chunks; ++k) out.push_back(stage + k * depth);
    return out;
  }
  if (kind == Schedule::zb_v && chunks == 2 && stage >= 0 && stage < depth) return {stage, 2 * depth - 1 - stage};
  for (int64_t c = 0; c < depth * chunks; ++c)
    if (chunk_position(kind, depth, c) == stage) out.push_back(c);
  return out;
}

// Microbatches are numbered in one stream, g = step * m + k. The cursor walks the schedule's units (a
// forward, a backward, a step's end) in order: 2bw is one 1F1B segment over all steps with an update after
// every m-th backward; flush is one 1F1B segment per step followed by the step's end; gpipe a step's
// forwards, then its backwards, then its end. zb-h1 and zb-h2 are flush with each backward's B in its
// place and its W `defer_` microbatches later (after the B of microbatch k comes the W of k - defer_); the
// step's W's still waiting run, one per unit, before its end. The chunked schedules (interleaved, zb-v)
// lay one step's compute ops out once (units_) and walk them every step.
StageOpStream::StageOpStream(const ScheduleSpec& spec, int64_t stage, bool recompute)
    : s_(spec), stage_(stage), recompute_(recompute) {
  check_spec(spec, stage);
  // A unit emits at most max(v + 1, 5) ops (a step's end; a split backward with its receive, recompute,
  // send and a W): push() writes them in place.
  buf_.resize(static_cast<size_t>(2 * spec.chunks + 4));
  std::vector<LocalUnit> units;
  if (spec.chunks > 1) {
    constexpr int64_t kMost = std::numeric_limits<int32_t>::max();  // a Unit's fields
    if (spec.microbatches > kMost / (3 * spec.chunks) || spec.depth > kMost / spec.chunks)
      throw UsageError(fmt::format("{} with d={}, v={}, m={} is too large to lay out one step of", to_string(spec.kind),
                                   spec.depth, spec.chunks, spec.microbatches),
                       "use fewer microbatches per step");
    units.reserve(static_cast<size_t>(3 * spec.microbatches * spec.chunks));  // F, B, W each
  }
  if (spec.kind == Schedule::interleaved) interleaved_units(spec.depth, spec.chunks, spec.microbatches, stage, units);
  if (spec.kind == Schedule::zb_v) zbv_units(spec.depth, spec.microbatches, stage, units);
  held_ = chunks_at(spec.kind, spec.depth, spec.chunks, stage);
  units_.reserve(units.size());
  for (const auto& [kind, at] : units)
    units_.push_back(
        {static_cast<int32_t>(held_[static_cast<size_t>(at.first)]), static_cast<int32_t>(at.second), kind});
  defer_ = spec.kind == Schedule::zb_h2 ? 2 * stage : stage;
  start_step(0);
  refill();
}

bool StageOpStream::split() const { return s_.kind == Schedule::zb_h1 || s_.kind == Schedule::zb_h2; }

void StageOpStream::start_step(int64_t step) {
  step_ = step;
  const int64_t m = s_.microbatches;
  first_ = s_.kind == Schedule::two_bw ? 0 : step * m;
  end_ = s_.kind == Schedule::two_bw ? m * s_.steps : first_ + m;
  next_f_ = next_b_ = next_w_ = first_;
  const int64_t warm = s_.kind == Schedule::zb_h2 ? 2 * (s_.depth - stage_) - 1 : s_.depth - stage_ - 1;
  warm_left_ = s_.kind == Schedule::gpipe ? 0 : std::min(warm, end_ - first_);
  phase_ = s_.kind == Schedule::zb_h2 ? Phase::backward : Phase::forward;  // zb-h2: B (W) F after the warm-up
  next_unit_ = 0;
}

void StageOpStream::refill() {
  head_ = count_ = 0;
  if (units_.empty()) {
    while (count_ == 0 && !finished_) unit();
  } else {
    while (count_ == 0 && !finished_) chunked_unit();
  }
}

// Stream microbatch g's step and index in it. Only 2bw's one segment spans steps; the others walk one
// step at a time, so g is in step_ and needs no division (once per unit of a long replay).
std::pair<int64_t, int64_t> StageOpStream::locate(int64_t g) const {
  if (s_.kind == Schedule::two_bw) return {g / s_.microbatches, g % s_.microbatches};
  return {step_, g - first_};
}

// Emits the next unit's ops (possibly none, when the unit is a phase change).
void StageOpStream::unit() {
  const int64_t m = s_.microbatches;
  if (warm_left_ > 0) {
    --warm_left_;
    forward(next_f_++, stage_);
    return;
  }
  switch (phase_) {
    case Phase::forward:
      phase_ = s_.kind == Schedule::gpipe && next_f_ + 1 < end_ ? Phase::forward : Phase::backward;
      if (next_f_ < end_) forward(next_f_++, stage_);
      return;
    case Phase::backward:
      if (split()) {
        backward(next_b_++, OpKind::backward_input, stage_);
        if (next_b_ - 1 - next_w_ >= defer_) weight(next_w_++, stage_);
      } else {
        backward(next_b_++, OpKind::backward, stage_);
      }
      phase_ = s_.kind == Schedule::gpipe ? (next_b_ < end_ ? Phase::backward : Phase::end) : Phase::update;
      return;
    case Phase::update:  // 1F1B after a backward: 2bw may update, and the segment may end
      phase_ = Phase::forward;
      if (s_.kind == Schedule::two_bw && next_b_ % m == 0) finish_step(next_b_ / m - 1);
      if (next_b_ == end_) phase_ = s_.kind == Schedule::two_bw ? Phase::done : Phase::end;
      return;
    case Phase::end:
      if (next_w_ < end_ && split()) {  // the deferred W's, then the step's end
        weight(next_w_++, stage_);
        return;
      }
      end_step();
      return;
    case Phase::done: finished_ = true; return;
  }
}

void StageOpStream::chunked_unit() {
  if (phase_ == Phase::done) {
    finished_ = true;
    return;
  }
  if (next_unit_ == units_.size()) {
    end_step();
    return;
  }
  const Unit& u = units_[next_unit_++];
  const int64_t g = step_ * s_.microbatches + u.microbatch;
  if (u.kind == OpKind::forward)
    forward(g, u.chunk);
  else if (u.kind == OpKind::backward_weight)
    weight(g, u.chunk);
  else
    backward(g, u.kind, u.chunk);
}

void StageOpStream::forward(int64_t g, int64_t chunk) {
  const auto [step, k] = locate(g);
  if (chunk > 0) push(OpKind::recv_activation, step, k, 0, chunk);
  push(OpKind::forward, step, k, version_for_step(s_.kind, step), chunk);
  if (chunk + 1 < s_.depth * s_.chunks) push(OpKind::send_activation, step, k, 0, chunk);
}

void StageOpStream::backward(int64_t g, OpKind kind, int64_t chunk) {
  const auto [step, k] = locate(g);
  const int64_t v = version_for_step(s_.kind, step);
  if (chunk + 1 < s_.depth * s_.chunks) push(OpKind::recv_gradient, step, k, 0, chunk);
  if (recompute_) push(OpKind::recompute, step, k, v, chunk);
  push(kind, step, k, v, chunk);
  if (chunk > 0) push(OpKind::send_gradient, step, k, 0, chunk);
}

void StageOpStream::weight(int64_t g, int64_t chunk) {
  const auto [step, k] = locate(g);
  push(OpKind::backward_weight, step, k, version_for_step(s_.kind, step), chunk);
}

// The step's allreduces and update, then the next step or the end.
void StageOpStream::end_step() {
  finish_step(step_);
  if (step_ + 1 < s_.steps)
    start_step(step_ + 1);
  else
    phase_ = Phase::done;
}

void StageOpStream::finish_step(int64_t step) {
  if (s_.width > 1)
    for (int64_t c : held_) push(OpKind::allreduce, step, -1, 0, c);
  push(OpKind::update, step, -1, step + 1, -1);
}

void StageOpStream::push(OpKind kind, int64_t step, int64_t k, int64_t v, int64_t chunk) {
  buf_[static_cast<size_t>(count_++)] = {kind, step, k, v, chunk};
}

std::vector<Op> stage_ops(const ScheduleSpec& spec, int64_t stage, bool recompute) {
  std::vector<Op> out;
  for (StageOpStream s(spec, stage, recompute); !s.done(); s.next()) out.push_back(s.op());
  return out;
}

ScheduleSpec schedule_spec(const PipelineShape& shape, int64_t steps) {
  return {shape.schedule, shape.depth, shape.microbatches, steps, shape.width, shape.chunks};
}

}  // namespace pd2bw::pipeline

// The schedule generator: per-stage op streams and lists for 2BW, PipeDream-Flush, GPipe and ZB-H1.
#include "pd2bw/pipeline/schedule.hpp"

#include <fmt/format.h>

#include <algorithm>

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
  if (s.microbatches < min_microbatches(s.kind, s.depth))
    throw UsageError(fmt::format("2bw needs m >= d (got m={} d={})", s.microbatches, s.depth),
                     "raise the microbatches per step or use fewer stages");
}

}  // namespace

// Microbatches are numbered in one stream, g = step * m + k. The cursor walks the schedule's units (a
// forward, a backward, a step's end) in order: 2bw is one 1F1B segment over all steps with an update after
// every m-th backward; flush is one 1F1B segment per step followed by the step's end; gpipe a step's
// forwards, then its backwards, then its end. zb-h1 is flush with each backward's B in its place and its
// W `stage` microbatches later (after the B of microbatch k comes the W of k - stage); the step's W's
// still waiting run, one per unit, before its end.
StageOpStream::StageOpStream(const ScheduleSpec& spec, int64_t stage, bool recompute)
    : s_(spec), stage_(stage), recompute_(recompute) {
  check_spec(spec, stage);
  start_step(0);
  refill();
}

void StageOpStream::next() {
  if (++head_ == count_) refill();
}

void StageOpStream::start_step(int64_t step) {
  step_ = step;
  const int64_t m = s_.microbatches;
  first_ = s_.kind == Schedule::two_bw ? 0 : step * m;
  end_ = s_.kind == Schedule::two_bw ? m * s_.steps : first_ + m;
  next_f_ = next_b_ = next_w_ = first_;
  warm_left_ = s_.kind == Schedule::gpipe ? 0 : std::min(s_.depth - stage_ - 1, end_ - first_);
  phase_ = Phase::forward;
}

void StageOpStream::refill() {
  head_ = count_ = 0;
  while (count_ == 0 && !finished_) unit();
}

// Emits the next unit's ops (possibly none, when the unit is a phase change).
void StageOpStream::unit() {
  const int64_t m = s_.microbatches;
  if (warm_left_ > 0) {
    --warm_left_;
    forward(next_f_++);
    return;
  }
  switch (phase_) {
    case Phase::forward:
      phase_ = s_.kind == Schedule::gpipe && next_f_ + 1 < end_ ? Phase::forward : Phase::backward;
      if (next_f_ < end_) forward(next_f_++);
      return;
    case Phase::backward:
      if (s_.kind == Schedule::zb_h1) {
        backward(next_b_++, OpKind::backward_input);
        if (next_b_ - 1 - next_w_ >= stage_) weight(next_w_++);
      } else {
        backward(next_b_++);
      }
      phase_ = s_.kind == Schedule::gpipe ? (next_b_ < end_ ? Phase::backward : Phase::end) : Phase::update;
      return;
    case Phase::update:  // 1F1B after a backward: 2bw may update, and the segment may end
      phase_ = Phase::forward;
      if (s_.kind == Schedule::two_bw && next_b_ % m == 0) finish_step(next_b_ / m - 1);
      if (next_b_ == end_) phase_ = s_.kind == Schedule::two_bw ? Phase::done : Phase::end;
      return;
    case Phase::end:
      if (next_w_ < end_ && s_.kind == Schedule::zb_h1) {  // the deferred W's, then the step's end
        weight(next_w_++);
        return;
      }
      finish_step(step_);
      if (step_ + 1 < s_.steps)
        start_step(step_ + 1);
      else
        phase_ = Phase::done;
      return;
    case Phase::done: finished_ = true; return;
  }
}

void StageOpStream::forward(int64_t g) {
  const int64_t step = g / s_.microbatches, k = g % s_.microbatches;
  if (stage_ > 0) push(OpKind::recv_activation, step, k, 0);
  push(OpKind::forward, step, k, version_for_step(s_.kind, step));
  if (stage_ + 1 < s_.depth) push(OpKind::send_activation, step, k, 0);
}

void StageOpStream::backward(int64_t g, OpKind kind) {
  const int64_t step = g / s_.microbatches, k = g % s_.microbatches;
  const int64_t v = version_for_step(s_.kind, step);
  if (stage_ + 1 < s_.depth) push(OpKind::recv_gradient, step, k, 0);
  if (recompute_) push(OpKind::recompute, step, k, v);
  push(kind, step, k, v);
  if (stage_ > 0) push(OpKind::send_gradient, step, k, 0);
}

void StageOpStream::weight(int64_t g) {
  const int64_t step = g / s_.microbatches, k = g % s_.microbatches;
  push(OpKind::backward_weight, step, k, version_for_step(s_.kind, step));
}

void StageOpStream::finish_step(int64_t step) {
  if (s_.width > 1) push(OpKind::allreduce, step, -1, 0);
  push(OpKind::update, step, -1, step + 1);
}

void StageOpStream::push(OpKind kind, int64_t step, int64_t k, int64_t v) {
  buf_[static_cast<size_t>(count_++)] = {kind, step, k, v};
}

std::vector<Op> stage_ops(const ScheduleSpec& spec, int64_t stage, bool recompute) {
  std::vector<Op> out;
  for (StageOpStream s(spec, stage, recompute); !s.done(); s.next()) out.push_back(s.op());
  return out;
}

ScheduleSpec schedule_spec(const PipelineShape& shape, int64_t steps) {
  return {shape.schedule, shape.depth, shape.microbatches, steps, shape.width};
}

}  // namespace pd2bw::pipeline

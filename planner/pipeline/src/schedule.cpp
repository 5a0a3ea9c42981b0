// The schedule generator: per-stage op lists for 2BW, PipeDream-Flush, GPipe and ZB-H1.
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
    throw UsageError(fmt::format("{} needs m >= d (got m={} d={})", to_string(s.kind), s.microbatches, s.depth),
                     "raise the microbatches per step or use fewer stages");
}

// Appends the ops of one stage; microbatches are numbered in one stream, g = step * m + k.
class Emitter {
 public:
  Emitter(const ScheduleSpec& spec, int64_t stage, bool recompute)
      : s_(spec), stage_(stage), recompute_(recompute) {}

  void forward(int64_t g) {
    const auto [step, k] = split(g);
    const int64_t v = version_for_step(s_.kind, step);
    if (stage_ > 0) push(OpKind::recv_activation, step, k, 0);
    push(OpKind::forward, step, k, v);
    if (stage_ + 1 < s_.depth) push(OpKind::send_activation, step, k, 0);
  }

  // The backward of microbatch g, or with `kind` backward_input its B half (W comes later, weight()).
  void backward(int64_t g, OpKind kind = OpKind::backward) {
    const auto [step, k] = split(g);
    const int64_t v = version_for_step(s_.kind, step);
    if (stage_ + 1 < s_.depth) push(OpKind::recv_gradient, step, k, 0);
    if (recompute_) push(OpKind::recompute, step, k, v);
    push(kind, step, k, v);
    if (stage_ > 0) push(OpKind::send_gradient, step, k, 0);
  }

  void weight(int64_t g) {
    const auto [step, k] = split(g);
    push(OpKind::backward_weight, step, k, version_for_step(s_.kind, step));
  }

  void finish_step(int64_t step) {
    if (s_.width > 1) push(OpKind::allreduce, step, -1, 0);
    push(OpKind::update, step, -1, step + 1);
  }

  // One-forward-one-backward over microbatches [first, first + count) of the stream; with
  // `update_inside` an update follows each backward that completes a step.
  void one_f_one_b(int64_t first, int64_t count, bool update_inside) {
    const int64_t warmup = std::min(s_.depth - stage_ - 1, count);
    int64_t next_f = first, next_b = first;
    const int64_t end = first + count;
    for (int64_t i = 0; i < warmup; ++i) forward(next_f++);
    while (next_b < end) {
      if (next_f < end) forward(next_f++);
      backward(next_b);
      ++next_b;
      if (update_inside && next_b % s_.microbatches == 0) finish_step(next_b / s_.microbatches - 1);
    }
  }

  // One step of zb-h1 over microbatches [first, first + m): 1F1B with split backwards, each W deferred
  // by `stage` microbatches behind its B, then the step's remaining W's and its end.
  void zero_bubble_step(int64_t first, int64_t step) {
    const int64_t m = s_.microbatches, end = first + m;
    int64_t next_f = first, next_w = first;
    for (int64_t i = 0; i < std::min(s_.depth - stage_ - 1, m); ++i) forward(next_f++);
    for (int64_t b = first; b < end; ++b) {
      if (next_f < end) forward(next_f++);
      backward(b, OpKind::backward_input);
      if (b - next_w >= stage_) weight(next_w++);
    }
    while (next_w < end) weight(next_w++);
    finish_step(step);
  }

  std::vector<Op> take() { return std::move(ops_); }

 private:
  std::pair<int64_t, int64_t> split(int64_t g) const { return {g / s_.microbatches, g % s_.microbatches}; }
  void push(OpKind kind, int64_t step, int64_t k, int64_t v) { ops_.push_back({kind, step, k, v}); }

  const ScheduleSpec& s_;
  int64_t stage_;
  bool recompute_;
  std::vector<Op> ops_;
};

}  // namespace

std::vector<Op> stage_ops(const ScheduleSpec& spec, int64_t stage, bool recompute) {
  check_spec(spec, stage);
  Emitter e(spec, stage, recompute);
  const int64_t m = spec.microbatches;
  switch (spec.kind) {
    case Schedule::two_bw: e.one_f_one_b(0, m * spec.steps, true); break;
    case Schedule::flush:
      for (int64_t j = 0; j < spec.steps; ++j) {
        e.one_f_one_b(j * m, m, false);
        e.finish_step(j);
      }
      break;
    case Schedule::gpipe:
      for (int64_t j = 0; j < spec.steps; ++j) {
        for (int64_t k = 0; k < m; ++k) e.forward(j * m + k);
        for (int64_t k = 0; k < m; ++k) e.backward(j * m + k);
        e.finish_step(j);
      }
      break;
    case Schedule::zb_h1:
      for (int64_t j = 0; j < spec.steps; ++j) e.zero_bubble_step(j * m, j);
      break;
  }
  return e.take();
}

ScheduleSpec schedule_spec(const PipelineShape& shape, int64_t steps) {
  return {shape.schedule, shape.depth, shape.microbatches, steps, shape.width};
}

}  // namespace pd2bw::pipeline

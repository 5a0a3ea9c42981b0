// A simulated rank's bookkeeping, and the summary of a finished simulation.
#include "sim_lane.hpp"

#include <algorithm>
#include <cmath>

namespace pd2bw::planner {

namespace {

// The j-th of the v chunks position `stage` holds, in model order: the inverse of schemas::chunk_position
// (the V for zb-v, the loop otherwise), without building chunks_at's list.
int64_t held_chunk(const ScheduleSpec& spec, int64_t stage, int64_t j) {
  if (spec.kind == Schedule::zb_v) return j == 0 ? stage : 2 * spec.depth - 1 - stage;
  return stage + j * spec.depth;
}

}  // namespace

// A rank recomputes all of its chunks or none (the generator takes one flag); the input's check makes
// its chunks agree, so the first one's flag is the rank's.
SimLane::SimLane(int64_t stage_, int64_t replica_, const SimInput& in, LaneMeasure measure)
    : stage(stage_), replica(replica_),
      ops_(in.spec, stage_, in.stages[static_cast<size_t>(held_chunk(in.spec, stage_, 0))].recompute),
      stages_(in.stages.data()), own_(in.spec.chunks == 1 ? &in.stages[static_cast<size_t>(stage_)] : nullptr),
      measure_(measure), kind_(in.spec.kind), microbatches_(in.spec.microbatches),
      steps_(in.spec.steps) {
  const ScheduleSpec& spec = in.spec;
  const int64_t last = spec.depth * spec.chunks - 1;
  // Ops per microbatch of each chunk: receive, forward, send; receive, recompute, backward (or B), send;
  // W; the receives and sends only where the chunk has a neighbour (local hand-overs are ops too).
  int64_t per_microbatch = 0, fixed = 0;
  for (int64_t j = 0; j < spec.chunks; ++j) {
    const int64_t c = held_chunk(spec, stage_, j);
    const SimStage& st = in.stages[static_cast<size_t>(c)];
    per_microbatch += 2 + 2 * (c > 0) + 2 * (c < last) + (st.recompute ? 1 : 0) + (splits_backward(spec.kind) ? 1 : 0);
    fixed += st.fixed_bytes;
    weights_bytes_ += st.weights_bytes;
    update_ms_ += st.update_ms;
  }
  period_ops_ = spec.microbatches * per_microbatch + (spec.width > 1 ? spec.chunks : 0) + 1;
  // One step has no counterparts a step later: no ring, and no op is past the warm-up.
  if (spec.steps == 1) {
    warmup_ops_ = INT64_MAX;
  } else {
    ring_ = std::make_unique_for_overwrite<double[]>(static_cast<size_t>(period_ops_) + kPrefetch);
    cursor_ = ring_.get();
    ring_end_ = cursor_ + period_ops_;
  }
  // 2bw's first step also runs the warm-up forwards of the stream; past them every step's ops line up.
  if (spec.kind == Schedule::two_bw && spec.steps > 1)
    warmup_ops_ = std::min(spec.depth - stage_ - 1, spec.microbatches * spec.steps) * ((stage_ > 0) + 1 + (stage_ < last));
  live_.push_back(0);
  add_memory(0.0, fixed + weights_bytes_);
  first_kind = ops_.done() ? OpKind::update : ops_.op().kind;
}

int64_t SimLane::last_reading_step(int64_t v) const {
  // Steps read version_for_step(step): max(step - 1, 0) for 2bw, step otherwise.
  const int64_t last = kind_ == Schedule::two_bw ? (v == 0 ? 1 : v + 1) : v;
  if (last < steps_) return last;
  return kind_ == Schedule::two_bw && v == 0 ? 0 : -1;  // v = 0 is read by step 0 in any case
}

void SimLane::add_curve_point(double at_ms) {
  if (!memory_curve.empty() && memory_curve.back().first == at_ms)
    memory_curve.back().second = bytes;
  else
    memory_curve.push_back({at_ms, bytes});
}

void SimLane::free_dead_versions(double at_ms, int64_t newest) {
  for (auto it = live_.begin(); it != live_.end();) {
    if (*it < newest && last_reading_step(*it) <= read_steps_done_) {
      add_memory(at_ms, -weights_bytes_);
      it = live_.erase(it);
    } else {
      ++it;
    }
  }
}

void SimLane::finish_update(const Op& o, double start_ms, double end_ms) {
  // The new version takes the buffer of a version nobody reads any more (freed first at the same
  // instant), so 2BW holds two buffers and flush / gpipe update in place.
  free_dead_versions(start_ms, o.version);
  live_.push_back(o.version);
  add_memory(start_ms, weights_bytes_);
  max_live_versions = std::max<int64_t>(max_live_versions, static_cast<int64_t>(live_.size()));
  if (update_end_ms.size() <= static_cast<size_t>(o.step)) update_end_ms.resize(static_cast<size_t>(o.step) + 1, 0.0);
  update_end_ms[static_cast<size_t>(o.step)] = end_ms;
  stopped_ = measure_.stop_after && o.step == measure_.step;
}

int64_t steady_step(const ScheduleSpec& spec) {
  if (spec.steps == 1) return 0;
  return (spec.kind == Schedule::two_bw && spec.steps >= 3) ? spec.steps - 2 : spec.steps - 1;
}

double first_step_period(const std::vector<SimLane>& lanes) {
  auto receives_first = [](const SimLane& lane) {
    return lane.first_kind == OpKind::recv_activation || lane.first_kind == OpKind::recv_gradient;
  };
  auto entry = [&](const SimLane& lane) { return receives_first(lane) ? lane.first_sent_ms : 0.0; };
  double period = 0.0, longest = 0.0;  // when the lanes that waited on nothing end; the longest entry to end
  for (const auto& lane : lanes) {
    if (lane.update_end_ms.size() != 1 || lane.clock_ms != lane.update_end_ms[0]) return 0.0;
    if (lane.first_kind == OpKind::allreduce) return 0.0;  // it waits on its peers' clocks: not decided here
    if (!receives_first(lane)) period = std::max(period, lane.clock_ms);
    longest = std::max(longest, lane.clock_ms - entry(lane));
  }
  // Whether lane l's entry reaches its own clock: the chain that reaches the clock starts at the entry of
  // its origin, whose entry the chain of its first message reached from another lane's entry, and so on
  // back to a lane that waited on nothing (each link leads to an earlier entry, so at most every lane once).
  auto own_chain = [&](size_t l) {
    int32_t at = lanes[l].origin;
    for (size_t links = 0; at >= 0 && links <= lanes.size(); ++links, at = lanes[static_cast<size_t>(at)].entry_origin)
      if (at == static_cast<int32_t>(l)) return true;
    return false;
  };
  bool shifted = true, chained = false;
  for (size_t l = 0; l < lanes.size(); ++l) {
    const SimLane& lane = lanes[l];
    shifted = shifted && (receives_first(lane) ? lane.clock_ms <= entry(lane) + period : lane.clock_ms == period);
    chained = chained || (lane.clock_ms - entry(lane) == longest && own_chain(l));
  }
  return shifted || chained ? longest : 0.0;  // shifted: the lanes that waited on nothing end last, at D
}

SimResult summarize(const SimInput& input, std::vector<SimLane>& lanes, const std::vector<int64_t>& weights,
                    double period) {
  SimResult r;
  const size_t n = weights.size();
  r.simulated_ranks = static_cast<int64_t>(lanes.size());
  r.step_end_ms.assign(static_cast<size_t>(input.spec.steps), 0.0);
  for (auto& lane : lanes) {
    r.simulated_ops += lane.pc;
    lane.update_end_ms.resize(r.step_end_ms.size(), 0.0);  // a lane that stopped early has none after
    for (size_t j = 0; j < lane.update_end_ms.size(); ++j)
      r.step_end_ms[j] = std::max(r.step_end_ms[j], lane.update_end_ms[j]);
    r.total_ms = std::max(r.total_ms, lane.clock_ms);
  }
  r.first_step_ms = r.step_end_ms[0];
  const auto s = static_cast<size_t>(steady_step(input.spec));
  r.window_end_ms = r.step_end_ms[s];
  r.window_begin_ms = period > 0 ? r.window_end_ms - period : s == 0 ? 0.0 : r.step_end_ms[s - 1];
  const double length = r.window_end_ms - r.window_begin_ms;
  // The longest interval between two of one rank's updates. Every rank does all of its step's work
  // between them, so this is never below any rank's work per step.
  auto interval = [&](size_t j) {
    double out = 0.0;
    for (const auto& lane : lanes) out = std::max(out, lane.update_end_ms[j] - (j ? lane.update_end_ms[j - 1] : 0.0));
    return out;
  };
  // The replay is a max-plus linear system from step to step: if no op of a step came more than M after
  // its counterpart a step earlier, no op of a later step will (2bw's ops also depend on two steps back
  // through the neighbours' warm-ups, so there two steps must stay within M), so M bounds the steady step
  // from above. Steady: the measured step's M and the one before's agree.
  std::array<double, 2> most{0.0, 0.0};
  bool measured = !lanes.empty();
  for (const auto& lane : lanes) {
    measured = measured && lane.increments_measured[0] && lane.increments_measured[1];
    for (size_t k = 0; k < 2; ++k) most[k] = std::max(most[k], lane.max_increment_ms[k]);
  }
  if (period > 0) {
    r.step_ms = r.previous_step_ms = r.last_step_ms = period;
    r.steady = true;
  } else if (measured) {
    r.previous_step_ms = most[0];
    r.last_step_ms = most[1];
    r.step_ms = input.spec.kind == Schedule::two_bw ? std::max(most[0], most[1]) : most[1];
    r.steady = std::abs(most[1] - most[0]) <= kSteadyTolerance * most[1];
  } else {
    r.step_ms = r.last_step_ms = interval(s);
    if (s >= 1) r.previous_step_ms = interval(s - 1);
  }
  r.stages.resize(static_cast<size_t>(input.spec.depth));
  for (size_t l = 0; l < lanes.size(); ++l) {
    SimLane& lane = lanes[l];
    auto& out = r.stages[static_cast<size_t>(lane.stage)];
    const double w = static_cast<double>(weights[l % n]) / static_cast<double>(input.spec.width);
    out.compute_ms += w * lane.busy_ms[static_cast<size_t>(Busy::compute)];
    out.p2p_ms += w * lane.busy_ms[static_cast<size_t>(Busy::p2p)];
    out.allreduce_ms += w * lane.busy_ms[static_cast<size_t>(Busy::allreduce)];
    out.update_ms += w * lane.busy_ms[static_cast<size_t>(Busy::update)];
    if (l % n == 0) out.memory_curve = std::move(lane.memory_curve);
    out.peak_bytes = std::max(out.peak_bytes, lane.peak_bytes);
    out.peak_in_flight = std::max(out.peak_in_flight, lane.peak_in_flight);
    out.max_live_versions = std::max(out.max_live_versions, lane.max_live_versions);
  }
  double idle = 0.0, least_idle = length;
  for (auto& out : r.stages) {
    out.idle_ms = std::max(0.0, length - out.compute_ms - out.p2p_ms - out.allreduce_ms - out.update_ms);
    out.busy_fraction = length > 0 ? (length - out.idle_ms) / length : 0.0;
    idle += out.idle_ms;
    least_idle = std::min(least_idle, out.idle_ms);
  }
  const double total = length * static_cast<double>(r.stages.size());
  if (total > 0) {
    r.idle_fraction = idle / total;
    r.bubble_fraction = least_idle / length;
    r.imbalance_fraction = std::max(0.0, r.idle_fraction - r.bubble_fraction);
  }
  return r;
}

}  // namespace pd2bw::planner

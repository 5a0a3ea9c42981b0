// One simulated rank: its op list, program counter and clock, and what it accumulates while it runs
// (busy time by category inside a measured window, memory and its peak, live weight versions). Nothing
// grows with the run's length except the optional memory curve. A rank holds v model chunks (one when
// v = 1); each op is charged to its own chunk's terms. Private to the planner.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <vector>

#include "pd2bw/planner/simulator.hpp"

namespace pd2bw::planner {

enum class Busy { compute, p2p, allreduce, update };

// What a lane measures: the busy time of the ops of step `step` (the steady step; -1: none), and the
// memory curve if asked. In steady state every step's ops take the same time on a lane, so this is the
// lane's busy time in the steady step's window.
struct LaneMeasure {
  int64_t step = -1;
  bool curve = false;
  bool stop_after = false;  // the lane is done once its update of `step` is
};

class SimLane {
 public:
  // Replays position `stage`'s ops of in.spec (the schedule generator's stream) with the durations and
  // memory of its chunks in in.stages (which must outlive the lane).
  SimLane(int64_t stage, int64_t replica, const SimInput& in, LaneMeasure measure);

  bool done() const { return stopped_ || ops_.done(); }
  // Whether ops remain, short of done(): only an update stops a lane early, so a replay tests done()
  // after updates and this before every op.
  bool running() const { return !ops_.done(); }
  const Op& op() const { return ops_.op(); }
  // The chunk op() computes or moves for (requires op().chunk >= 0).
  const SimStage& chunk(const Op& o) const { return own_ ? *own_ : stages_[static_cast<size_t>(o.chunk)]; }
  const SimStage& own_chunk() const { return *own_; }  // the one chunk, when v = 1
  double update_ms() const { return update_ms_; }      // the rank's update: all its chunks
  // Completes op(), of kind K, over [start, end) and moves to the next; `st` is its chunk for the
  // compute kinds (unused otherwise). Inline and by kind: the replay calls it once per op, from a switch
  // on the kind, so the bookkeeping of each kind is straight-line code with the lane's fields at hand;
  // the rare parts (the update, freeing versions, the memory curve) stay out of line.
  template <OpKind K>
  [[gnu::always_inline]] void finish(double start_ms, double end_ms, const SimStage* st = nullptr) {
    const Op& o = op();
    if (o.step == measure_.step) busy_ms[static_cast<size_t>(category(K))] += end_ms - start_ms;
    if constexpr (K == OpKind::forward) {
      add_memory(start_ms, st->stash_bytes);
      peak_in_flight = std::max(peak_in_flight, ++in_flight);
    } else if constexpr (K == OpKind::recompute) {
      add_memory(start_ms, st->recompute_stash_bytes);
    } else if constexpr (K == OpKind::backward || K == OpKind::backward_input) {
      // B keeps what its W needs (split backward) and frees the rest of the stash with the backward's end.
      const int64_t kept = K == OpKind::backward_input ? st->weight_grad_bytes : 0;
      add_memory(end_ms, kept - st->stash_bytes - (st->recompute ? st->recompute_stash_bytes : 0));
      --in_flight;
      // The step's last backward is the last op to read its weights: versions nobody reads go.
      if (o.microbatch == microbatches_ - 1) {
        read_steps_done_ = o.step;
        if (!live_.empty()) free_dead_versions(end_ms, live_.back());
      }
    } else if constexpr (K == OpKind::backward_weight) {
      add_memory(end_ms, -st->weight_grad_bytes);
    } else if constexpr (K == OpKind::update) {
      finish_update(o, start_ms, end_ms);
    }
    if (pc >= warmup_ops_) measure_increment(end_ms);
    if constexpr (K == OpKind::update) {
      ++updates_done_;
      refresh_measuring();
    }
    clock_ms = end_ms;
    ++pc;
    ops_.next();  // `o` refers into the stream: used up above
  }

  int64_t stage, replica;
  int64_t pc = 0;  // ops completed
  double clock_ms = 0;
  std::array<double, 4> busy_ms{};  // by Busy, of the measured step's ops
  int64_t bytes = 0, peak_bytes = 0;
  std::vector<std::pair<double, int64_t>> memory_curve;  // (time, bytes from then on) when measured
  std::vector<double> update_end_ms;                     // per step
  int64_t max_live_versions = 1;
  int64_t in_flight = 0, peak_in_flight = 0;  // microbatches forwarded and not yet backwarded, all chunks
  // The longest time from an op's end to the end of its counterpart one step later, over the ops of the
  // step before the measured one [0] and of the measured one [1] (steps counted from the lane's updates).
  std::array<double, 2> max_increment_ms{};
  std::array<bool, 2> increments_measured{};
  // The lane's first op, and when the message it receives was sent (if it is a receive): what
  // first_step_period() needs to know how the lane's clock entered the first step.
  OpKind first_kind;
  double first_sent_ms = 0;
  // The lane whose own chain of dependencies reaches this lane's clock (set by the replay): it starts at
  // that lane's first op (at its start, or at the send of the message it receives) and follows, from op to
  // op, whatever started each one (the lane's previous op, a message's send, the latest peer of an
  // allreduce). The same dependencies, with the same durations, recur in every step.
  int32_t origin = -1;
  int32_t entry_origin = -1;  // the origin of the message the first op received (-1: it received none)

 private:
  static constexpr Busy category(OpKind k) {
    switch (k) {
      case OpKind::forward:
      case OpKind::backward:
      case OpKind::backward_input:
      case OpKind::backward_weight:
      case OpKind::recompute: return Busy::compute;
      case OpKind::allreduce: return Busy::allreduce;
      case OpKind::update: return Busy::update;
      default: return Busy::p2p;
    }
  }
  void finish_update(const Op& o, double start_ms, double end_ms);
  // The op's end against its counterpart's a period earlier (pc >= warmup_ops_): the end is kept in the
  // ring for the next period, and the increment counts when the op is in a measured step.
  [[gnu::always_inline]] void measure_increment(double end_ms) {
    double* slot = cursor_;
    if (measuring_ >= 0) {
      const auto k = static_cast<size_t>(measuring_);
      const double increment = end_ms - *slot;
      max_increment_ms[k] = increments_measured[k] ? std::max(max_increment_ms[k], increment) : increment;
      increments_measured[k] = true;
    }
    *slot = end_ms;
    // The lanes take turns, so the next slots have mostly left the cache by this lane's next turn (the
    // ring has kPrefetch slots to spare past its end).
    __builtin_prefetch(slot + kPrefetch, 1);
    if (++cursor_ == ring_end_) {
      cursor_ = ring_.get();
      wrapped_ = true;
      refresh_measuring();
    }
  }
  // Which increment the next op counts in: [1] in the measured step, [0] in the one before, once a period
  // of counterparts is in the ring; -1: none. Changes only when the ring wraps and at updates.
  void refresh_measuring() {
    const int64_t u = updates_done_, s = measure_.step;
    measuring_ = !wrapped_ ? -1 : u == s ? 1 : u + 1 == s ? 0 : -1;
  }
  void free_dead_versions(double at_ms, int64_t newest);
  // Changes are made in time order, frees before allocations at the same instant.
  [[gnu::always_inline]] void add_memory(double at_ms, int64_t delta) {
    bytes += delta;
    peak_bytes = std::max(peak_bytes, bytes);
    if (measure_.curve) add_curve_point(at_ms);
  }
  void add_curve_point(double at_ms);

  // The last step reading version v in the replay (-1: none); it is dead once that step's last backward,
  // its last op reading weights, is done.
  int64_t last_reading_step(int64_t v) const;

  pipeline::StageOpStream ops_;
  const SimStage* stages_;   // all chunks of the input, indexed by Op::chunk
  const SimStage* own_;      // the one chunk when v = 1 (saves the replay a dependent load per op), else null
  int64_t weights_bytes_ = 0;  // one weight version of all the rank's chunks
  double update_ms_ = 0;
  LaneMeasure measure_;
  Schedule kind_;
  int64_t microbatches_ = 1, steps_ = 1;
  int64_t read_steps_done_ = -1;  // the last step whose last backward is done here
  std::vector<int64_t> live_;     // versions held
  int64_t period_ops_ = 1;        // ops between two updates once the pipe is full
  int64_t warmup_ops_ = 0;        // 2bw's warm-up forwards at the start of the stream (all, in one step)
  bool stopped_ = false;
  int64_t updates_done_ = 0;
  // The end time of the op period_ops_ ago, by stream index (from warmup_ops_ on) modulo the period, at
  // cursor_. Left uninitialised: a slot is read only a period after its first write (wrapped_).
  static constexpr size_t kPrefetch = 8;
  std::unique_ptr<double[]> ring_;
  double *cursor_ = nullptr, *ring_end_ = nullptr;
  bool wrapped_ = false;
  int measuring_ = -1;  // refresh_measuring()
};

// The steady step simulate() measures: the last for flush and gpipe, the one before it for 2bw (the
// last drains the pipe), 0 for a single step.
int64_t steady_step(const ScheduleSpec& spec);

// Step times, the breakdown of the steady step and memory peaks (per position), from lanes that measured
// it. `weights[s]` is how many replicas the lane slot s stands for.
// `period` (> 0), when first_step_period() found one, makes the measured step (step 0) that period's.
SimResult summarize(const SimInput& input, std::vector<SimLane>& lanes, const std::vector<int64_t>& weights,
                    double period = 0.0);

// For lanes that ran one step of a schedule whose steps do not overlap (all but 2bw) from clocks at 0: the
// steady period D (every step from some step on ends D after the one before), or 0 when that is not
// proven. The replay is a max-plus system from step to step. Let a lane enter the step at 0, or, when its
// first op receives a message sent at time a, at a, and let D be the longest time from a lane's entry to
// its clock. Above: were every lane's next step to start D after its entry, it would repeat the first
// step D later op for op (no lane is still busy then), and the lanes start it no later than that, so no
// later step takes longer. Below: a lane whose clock its own chain reached (`origin`) depends on its entry
// through a path that every step repeats, and its next step starts after its clock, so its steps start D
// apart at least. Either every lane that waited on nothing ends at D, which makes the second step the first
// one shifted by D, or a lane whose own chain reached its clock is D past its entry.
double first_step_period(const std::vector<SimLane>& lanes);

}  // namespace pd2bw::planner

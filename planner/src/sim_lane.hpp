// One simulated rank: its op list, program counter and clock, and what it accumulates while it runs
// (busy time by category inside a measured window, memory and its peak, live weight versions). Nothing
// grows with the run's length except the optional memory curve. A rank holds v model chunks (one when
// v = 1); each op is charged to its own chunk's terms. Private to the planner.
#pragma once

#include <array>
#include <cstdint>
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
  const Op& op() const { return ops_.op(); }
  // The chunk op() computes or moves for (requires op().chunk >= 0).
  const SimStage& chunk(const Op& o) const { return own_ ? *own_ : stages_[static_cast<size_t>(o.chunk)]; }
  double update_ms() const { return update_ms_; }  // the rank's update: all its chunks
  // Completes the current op over [start, end) and moves to the next.
  void finish(double start_ms, double end_ms);

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

 private:
  void free_dead_versions(double at_ms, int64_t newest);
  // Changes are made in time order, frees before allocations at the same instant.
  void add_memory(double at_ms, int64_t delta);

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
  int64_t warmup_ops_ = 0;        // 2bw's warm-up forwards at the start of the stream
  int64_t slot_ = 0;              // (pc - warmup_ops_) modulo period_ops_
  bool stopped_ = false;
  int64_t updates_done_ = 0;
  std::vector<double> last_period_end_ms_;  // end time of the op period_ops_ ago, by stream index mod period
};

// The steady step simulate() measures: the last for flush and gpipe, the one before it for 2bw (the
// last drains the pipe), 0 for a single step.
int64_t steady_step(const ScheduleSpec& spec);

// Step times, the breakdown of the steady step and memory peaks (per position), from lanes that measured
// it. `weights[s]` is how many replicas the lane slot s stands for.
SimResult summarize(const SimInput& input, std::vector<SimLane>& lanes, const std::vector<int64_t>& weights);

}  // namespace pd2bw::planner

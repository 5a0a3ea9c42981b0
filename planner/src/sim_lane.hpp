// One simulated rank: its op list, program counter and clock, and what it accumulates while it runs
// (busy time by category inside a measured window, memory and its peak, live weight versions). Nothing
// grows with the run's length except the optional memory curve. Private to the planner.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "pd2bw/planner/simulator.hpp"

namespace pd2bw::planner {

enum class Busy { compute, p2p, allreduce, update };

// What a lane measures: busy time inside [lo, hi) (nothing when hi < lo), and the memory curve if asked.
struct LaneMeasure {
  double lo = 0, hi = -1;
  bool curve = false;
};

class SimLane {
 public:
  SimLane(int64_t stage, int64_t replica, const std::vector<Op>& ops, const SimStage& st, LaneMeasure measure);

  bool done() const { return pc >= static_cast<int64_t>(ops_->size()); }
  const Op& op() const { return (*ops_)[static_cast<size_t>(pc)]; }
  // Completes the current op over [start, end) and moves to the next.
  void finish(double start_ms, double end_ms);

  int64_t stage, replica;
  int64_t pc = 0;
  double clock_ms = 0;
  std::array<double, 4> busy_ms{};  // by Busy, inside the measured window
  int64_t bytes = 0, peak_bytes = 0;
  std::vector<std::pair<double, int64_t>> memory_curve;  // (time, bytes from then on) when measured
  std::vector<double> update_end_ms;                     // per step
  int64_t max_live_versions = 1;
  int64_t in_flight = 0, peak_in_flight = 0;  // microbatches forwarded and not yet backwarded

 private:
  void free_dead_versions(double at_ms, int64_t newest);
  // Changes are made in time order, frees before allocations at the same instant.
  void add_memory(double at_ms, int64_t delta);

  const std::vector<Op>* ops_;
  const SimStage* st_;
  LaneMeasure measure_;
  std::vector<int64_t> last_reader_;  // per version: index of the last op reading it (-1: none)
  std::vector<int64_t> live_;         // versions held
};

// When the last lane finished each step's update.
std::vector<double> step_ends(const SimInput& input, const std::vector<SimLane>& lanes);
// The measured window: see simulate()'s contract.
std::pair<double, double> steady_window(const ScheduleSpec& spec, const std::vector<double>& ends);

// Step times, the breakdown of the measured window and memory peaks, from lanes that measured `window`.
// `weights[s]` is how many replicas the lane slot s stands for.
SimResult summarize(const SimInput& input, std::vector<SimLane>& lanes, const std::vector<int64_t>& weights,
                    std::pair<double, double> window);

}  // namespace pd2bw::planner

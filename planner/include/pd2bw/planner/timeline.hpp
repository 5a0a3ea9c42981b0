// Pictures of a simulated run: a Chrome trace (Perfetto, chrome://tracing) and an SVG Gantt chart.
// Both take a SimResult made with keep_events and return the file's text; the caller writes it.
#pragma once

#include <cstdint>
#include <string>

#include "pd2bw/planner/simulator.hpp"

namespace pd2bw::planner {

// Chrome trace JSON: one process per rank (named "rank R: stage i, replica r"), a "compute" track
// (forward, backward, recompute, allreduce, update) and a "comm" track (sends and receives), one complete
// ("X") event per op with its step, microbatch and weight version in args, and a memory counter per
// stage (replica 0). Times in microseconds. Throws Error when the result has no events.
std::string chrome_trace(const SimInput& input, const SimResult& result);
// Number of "X" events chrome_trace writes for `result` (one per op).
int64_t chrome_trace_op_events(const SimResult& result);

struct GanttOptions {
  std::string title;        // first line of the picture
  int64_t max_width_px = 16000;
};

// SVG Gantt chart of replica 0 of every stage: one row per stage with forward, backward, recompute,
// allreduce and update boxes in distinct colours (odd weight versions lighter), microbatch numbers on
// boxes wide enough to hold them, a thin communication strip under each row, the stage's memory over
// time under that (with its device limit), and a time axis in ms. Throws Error when there are no events.
std::string gantt_svg(const SimInput& input, const SimResult& result, const GanttOptions& options);

}  // namespace pd2bw::planner

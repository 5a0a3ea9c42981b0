// Pictures of a simulated run: a Chrome trace (Perfetto, chrome://tracing) and an SVG Gantt chart.
// Both take a SimResult made with keep_events and return the file's text; the caller writes it.
#pragma once

#include <cstdint>
#include <string>

#include "pd2bw/planner/simulator.hpp"

namespace pd2bw::planner {

// Chrome trace JSON: one process per rank (named "rank R: stage i, replica r"; with v > 1 chunks per rank
// "rank R: stage i (chunks a, b), replica r"), a "compute" track (forward, backward and its halves,
// recompute, allreduce, update) and a "comm" track (sends and receives), one complete ("X") event per op
// with its step, microbatch and weight version in args, and a memory counter per rank position (replica
// 0). With v > 1 each op but the update names its model chunk ("F3 c1", "send act 3 c1") and has it in
// args; with v = 1 nothing about chunks is written. Times in microseconds. Throws Error when the result has
// no events.
std::string chrome_trace(const SimInput& input, const SimResult& result);
// Number of "X" events chrome_trace writes for `result` (one per op).
int64_t chrome_trace_op_events(const SimResult& result);

struct GanttOptions {
  std::string title;        // first line of the picture
  int64_t max_width_px = 16000;
};

// SVG Gantt chart of replica 0 of every stage (rank position): one row per position with forward,
// backward, recompute, allreduce and update boxes in distinct colours (odd weight versions lighter),
// microbatch numbers on boxes wide enough to hold them, a thin communication strip under each row, the
// position's memory over time under that (with its device limit), and a time axis in ms. With v > 1
// chunks per rank a row holds all its chunks: a later chunk on the rank is drawn darker, box labels read
// "3c1" (microbatch 3 of chunk 1) and the row names its chunks. Throws Error when there are no events.
std::string gantt_svg(const SimInput& input, const SimResult& result, const GanttOptions& options);

}  // namespace pd2bw::planner

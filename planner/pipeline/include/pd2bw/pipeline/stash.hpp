// What one rank holds between its forwards and backwards over a step, read off the schedule generator's
// own op list: the memory model of the schedules whose counts have no short closed form (zb-h2, and the
// chunked interleaved and zb-v, whose chunks hold different counts at different moments), and the
// reference the closed forms of the others are tested against.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "pd2bw/pipeline/schedule.hpp"

namespace pd2bw::pipeline {

// One chunk's holdings at one moment.
struct ChunkHeld {
  int64_t activations = 0;     // microbatches between their forward and their backward (or B): each
                               // holds its stash, or only its input when the rank recomputes
  int64_t rebuilt = 0;         // 1 between a Recompute and its backward (or B): one full stash
  int64_t weight_stashes = 0;  // microbatches whose B ran and whose W has not
  friend bool operator==(const ChunkHeld&, const ChunkHeld&) = default;
};

struct StashWalk {
  std::vector<int64_t> chunks;  // the rank's chunks, model order (chunks_at)
  // After each op of one step, what each of those chunks holds; only the moments no other moment
  // covers (every count <= the other's) are kept, in the order first seen. Any positive weighting of
  // the counts peaks at one of them.
  std::vector<std::vector<ChunkHeld>> moments;
};

// The walk of one step (spec.steps is ignored) of position `stage`. Throws what stage_ops throws.
// O(m v) time.
StashWalk stash_walk(const ScheduleSpec& spec, int64_t stage, bool recompute);

// stash_walk(spec, stage, false) and stash_walk(spec, stage, true) from one pass over the op list without
// recompute: a recomputing rank runs the same ops with each Recompute just before its backward (or B),
// so its moments are the plain ones with that chunk's stash rebuilt at each backward (or B). Equal to the
// two walks (test_stash_walk.cpp); half their cost.
std::pair<StashWalk, StashWalk> stash_walks(const ScheduleSpec& spec, int64_t stage);

// Bytes of one microbatch of one chunk, as the stash term weighs the counts.
struct ChunkStashBytes {
  int64_t activation = 0;  // what an activation in flight holds: the stash, or the input when recomputing
  int64_t rebuilt = 0;     // the full stash a Recompute rebuilds (0 without recompute)
  int64_t weight = 0;      // what a B keeps for its W (0 when the backward is not split)
};

// The largest, over the walk's moments, of sum over chunks of activations x activation + rebuilt x
// rebuilt + weight_stashes x weight; `bytes` has one entry per chunk of walk.chunks. Saturates at
// INT64_MAX.
int64_t stash_peak(const StashWalk& walk, const std::vector<ChunkStashBytes>& bytes);

}  // namespace pd2bw::pipeline

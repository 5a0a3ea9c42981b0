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
  // After each op of one step, what each of those chunks holds: every moment no other moment covers
  // (every count <= the other's) is kept, in the order first seen, and of the others only those no
  // moment kept shortly before covers (a bounded look-back keeps the walk linear in its ops). Any
  // positive weighting of the counts peaks at one of the moments kept.
  std::vector<std::vector<ChunkHeld>> moments;

  // The same moments as stash_walk(s) leave them for stash_peak, one row per moment: its chunks'
  // activations, then their rebuilt, then their weight_stashes; with the largest sum of a row's counts
  // and whether any rebuilt / weight_stashes count is non-zero. Empty in a walk put together by hand (or
  // not matching `moments` in size): stash_peak then reads `moments`. Whoever changes the moments of a
  // walk clears it.
  std::vector<int64_t> flat;
  int64_t flat_most = 0;
  bool flat_rebuilt = false, flat_weight = false;
};

// The microbatches per step whose walk stands for a step of `microbatches`: min(m, 2d) for the chunked
// schedules (interleaved, zb-v), m for the others. From 2d on, a chunked rank's warm-up and cool-down no
// longer depend on m and each further microbatch only repeats its steady round, whose counts a kept
// moment already covers, so the walk of m equals the walk of 2d moment for moment (2d is a multiple of d,
// as interleaved needs); test_stash_walk_cap.cpp checks it against walks of the uncapped op list.
int64_t walk_microbatches(Schedule kind, int64_t depth, int64_t microbatches);

// The walk of one step (spec.steps is ignored) of position `stage`. Throws what stage_ops throws.
// O(m' v) time for m' = walk_microbatches(...), plus the moments kept.
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
  friend bool operator==(const ChunkStashBytes&, const ChunkStashBytes&) = default;
};

// The largest, over the walk's moments, of sum over chunks of activations x activation + rebuilt x
// rebuilt + weight_stashes x weight; `bytes` has one entry per chunk of walk.chunks. Saturates at
// INT64_MAX.
int64_t stash_peak(const StashWalk& walk, const std::vector<ChunkStashBytes>& bytes);

// stash_peak for a sequence of byte vectors on one walk, each priced from the one before: the sum of
// every kept moment is held, so that a call where a few chunks' bytes changed costs O(moments) per such
// chunk (a split search moves one boundary at a time). Returns what stash_peak returns, call for call.
// Every walk it is called with must live as long as it does (another walk made later at a freed one's
// address would be taken for it); not thread-safe.
class StashPeaks {
 public:
  int64_t peak(const StashWalk& walk, const std::vector<ChunkStashBytes>& bytes);

 private:
  const StashWalk* walk_ = nullptr;  // the walk sums_ were made for; null: none held
  std::vector<ChunkStashBytes> bytes_;
  std::vector<int64_t> sums_;         // per kept moment, at bytes_
};

}  // namespace pd2bw::pipeline

// A memory floor for the chunked schedules (interleaved, zb-v) that holds on every split: it rules a
// candidate out before any stash walk or split is priced. Private to the planner; the proof is in
// chunk_floor.cpp.
#pragma once

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "pd2bw/pipeline/stash.hpp"
#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner::detail {

// A moment of one rank's step, in closed form from the schedule generator's op order: the counts of its
// chunks (local order, pipeline::chunks_at) just before a backward (or B), with `rebuilt` set on the
// chunk whose backward follows, as the recomputing rank holds it (the plain rank holds the same counts,
// none rebuilt). The walk of either kind keeps that moment or one covering it.
using FloorMoment = std::vector<pipeline::ChunkHeld>;

// The closed-form moments of position `position` for a step of `microbatches` (the walked count,
// pipeline::walk_microbatches): interleaved's end of warm-up, zb-v's first B and the end of its
// cool-down B's. Empty for the other schedules.
std::vector<FloorMoment> floor_moments(Schedule kind, int64_t depth, int64_t chunks, int64_t microbatches,
                                       int64_t position);

// The per-profile part of the floor for one schedule and microbatch size: the prefix sums of the
// per-layer statics, stash and weight stash, each sorted ascending (the n fewest-byte layers' sum is
// entry n), and the least input of a chunk's first layer.
struct FloorTable {
  std::vector<int64_t> s_static, s_stash, s_wst;  // L + 1 entries each
  int64_t in_first = 0, in_rest = 0;              // chunk 0's input; the least of the others'
  // The least per-layer stash and weight stash of a layer model chunk 0 may hold (any), and of one any
  // other chunk may hold (layers 1..L-1).
  int64_t stash_first = 0, stash_rest = 0, wst_first = 0, wst_rest = 0;
};

// The table of `model` for schedule `kind` at microbatch index `microbatch_index`, built in O(L log L).
// CostModel::floor_table memoises it; call that instead.
std::shared_ptr<const FloorTable> make_floor_table(const CostModel& model, Schedule kind, int64_t microbatch_index);

// A bound per option of a rank: without recompute (plain) and with it (redo).
struct RankFloor {
  int64_t plain = 0, redo = 0;
};

// The most layers rank `position` of chunked candidate c can hold, on any split, with its memory within
// memory_limit_bytes() + slack_bytes without (plain) and with (redo) recompute: an upper bound (the proof's
// cap_p), L for the other schedules; below 0 when not even its fixed part fits.
RankFloor chunked_rank_capacity(const CostModel& model, const Candidate& c, int64_t position, int64_t slack_bytes = 0);

// chunked_rank_capacity of every rank of chunked candidate c (d entries; empty for the other schedules),
// with one look-up of the per-profile table: O(L) to find it, then O(d (v + log L)).
std::vector<RankFloor> chunked_rank_capacities(const CostModel& model, const Candidate& c, int64_t slack_bytes = 0);

// False only when no split of chunked candidate c has every rank within memory_limit_bytes() + slack_bytes
// (slack saturates; negative is taken as 0) under any recompute choice: a proof that none fits. True
// otherwise, and for candidates of one chunk per rank. O(d (v + log L)) after a per-profile table.
bool chunked_may_fit(const CostModel& model, const Candidate& c, int64_t slack_bytes = 0);

// A lower bound on the memory ChunkPricer prices rank `position` of chunked candidate c at on split
// `bounds` (d v + 1 entries), without and with recompute: its statics and reserve and its stash at the
// closed-form moments (no comm buffers). Zero for the other schedules.
RankFloor chunked_rank_floor(const CostModel& model, const Candidate& c, const std::vector<int64_t>& bounds,
                             int64_t position);

// Per local chunk of a rank (local order), the layers [first, second) it holds.
using ChunkWindows = std::vector<std::pair<int64_t, int64_t>>;

// chunked_rank_floor of candidate c's ranks on as many splits as asked, the closed-form moments laid
// out once. Zero for the other schedules. Keeps a reference to `model`.
class RankFloors {
 public:
  RankFloors(const CostModel& model, const Candidate& c);
  RankFloor operator()(const std::vector<int64_t>& bounds, int64_t position) const;
  // The same floor of rank `position` holding `windows` (v entries in local order, each a non-empty
  // [first, second) with 0 <= first < second <= L) as if no other rank's chunks constrained them: the
  // windows may overlap, and need not be the ones of any split.
  RankFloor in(int64_t position, const ChunkWindows& windows) const;
  // The closed-form moments of rank `position` (floor_moments; requires a chunked candidate).
  const std::vector<FloorMoment>& moments(int64_t position) const { return moments_[static_cast<size_t>(position)]; }

 private:
  const CostModel& model_;
  Candidate c_;
  std::vector<std::vector<FloorMoment>> moments_;  // per position
};

// False only when, on the split `bounds` (d v + 1 entries) of chunked candidate c, some rank exceeds
// memory_limit_bytes() + slack_bytes (slack saturates; negative is taken as 0) both without and with
// recompute: then the split fits under no recompute policy, and its overage (the least of the two, less
// the limit) is above slack. The same floor at the split's own bytes; O(d v) with no walk.
bool chunked_split_may_fit(const CostModel& model, const Candidate& c, const std::vector<int64_t>& bounds,
                           int64_t slack_bytes = 0);

}  // namespace pd2bw::planner::detail

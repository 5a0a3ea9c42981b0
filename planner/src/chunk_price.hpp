// Pricing and splitting for the chunked schedules (interleaved, zb-v: v > 1 model chunks per rank). A
// rank's chunks are not contiguous, so the stage-by-stage folds of objective.hpp do not apply: the
// objective is the busiest rank's time per step, and memory is priced per rank (its chunks' parameters,
// the stash walk of pipeline/stash.hpp over its chunks, the reserve once). Private to the planner.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <utility>
#include <vector>

#include "pd2bw/pipeline/stash.hpp"
#include "pd2bw/planner/partition.hpp"
#include "prepared.hpp"

namespace pd2bw::planner::detail {

// One rank's price for a split: its busiest replica's time per step, and what each of its chunks costs.
struct PositionPrice {
  bool feasible = false;
  double lane_ms = 0;               // m (compute + p2p) + allreduce + update, summed over the chunks, on
                                    // the replica where that sum is largest
  std::vector<StageCost> chunks;    // in the order of ChunkPricer::chunks_of(position)
};

class ChunkPricer {
 public:
  // Requires c.chunks > 1 (or a schedule that places chunks: interleaved, zb-v).
  ChunkPricer(const CostModel& model, const Candidate& c);
  int64_t chunks_total() const { return c_.depth * c_.chunks; }
  int64_t positions() const { return c_.depth; }
  const std::vector<int64_t>& chunks_of(int64_t position) const { return held_[static_cast<size_t>(position)]; }
  int64_t position_of(int64_t chunk) const { return pos_[static_cast<size_t>(chunk)]; }
  // Whether `chunk` is the last (highest) chunk of its position: its position is priced once it is placed.
  bool completes(int64_t chunk) const;
  // A lower bound on chunk's share of its rank's time with layers [begin, end): m (compute + the fastest
  // replica's transfers) + allreduce + update, without recompute. Non-decreasing in the compute part.
  double least_lane(int64_t chunk, int64_t begin, int64_t end) const;
  // m x the chunk's plain compute: the part of least_lane that only grows with `end`.
  double compute_lane(int64_t begin, int64_t end) const;
  // The price of `position` under `bounds` (d v + 1 entries; only its chunks' entries are read).
  PositionPrice price_position(int64_t position, const std::vector<int64_t>& bounds) const;
  // price_position's lane_ms alone (infinity when the rank does not fit), without building its StageCosts:
  // the split walk's inner step. Not thread-safe (scratch buffers); one walk per pricer.
  double position_lane(int64_t position, const std::vector<int64_t>& bounds, bool* recompute = nullptr) const;
  // The lane of `position` under `bounds` as position_lane prices it, with the recompute choice given
  // instead of taken from the rank's memory (no stash walk): position_lane where the choice is the rank's,
  // and no more than it (where finite) with recompute false or forced by the rank's memory floor.
  double lane_with(int64_t position, const std::vector<int64_t>& bounds, bool recompute) const;
  // The split's objective from its ranks' lanes and recompute choices: the busiest lane, the climb
  // (objective.hpp: chunked_climb) and, for interleaved, its cycle (interleaved_cycle). Below `cutoff` the
  // result is the objective; a result at or above it only says that the objective is too (a cheaper part
  // of it may stand in: a caller looking for a split below the cutoff learns all it needs). `held`, when
  // given, is held_time of every position (a caller that re-prices a few ranks keeps it up to date).
  double objective(const std::vector<int64_t>& bounds, const std::vector<double>& lanes,
                   const std::vector<char>& recompute, double cutoff = kInfinity,
                   const std::vector<double>* held = nullptr) const;
  // Rank `position`'s allreduces and updates under `bounds`, summed as step_objective sums its chunks'.
  double held_time(size_t position, const std::vector<int64_t>& bounds) const;
  // One StageCost per chunk, in model order; Split-wide objective = max over positions of lane_ms.
  std::vector<StageCost> price(const std::vector<int64_t>& bounds, double* objective) const;

 private:
  double transfer_ms(int64_t chunk, int64_t replica, int64_t layer_out, bool input) const;
  // One transfer over chunk `chunk`'s input and one over its output boundary on `replica`, the chunk holding
  // layers [begin, end) (0 where it starts or ends the model, or the boundary stays on the rank).
  std::pair<double, double> boundary_ms(int64_t chunk, int64_t replica, int64_t begin, int64_t end) const;
  // The replica whose boundary transfers at `position` add up to the most, and that sum (one way).
  std::pair<int64_t, double> busiest_replica(int64_t position, const std::vector<int64_t>& bounds) const;
  // Interleaved: each rank's waits for the microbatches' first trips (objective.hpp's add_interleaved_waits)
  // added to its work, from its chunks' times as price_position has them.
  void add_waits(const std::vector<int64_t>& bounds, const std::vector<char>& recompute,
                 std::vector<double>& work) const;
  const CostModel& model_;
  Candidate c_;
  PreparedCandidate pc_;
  std::vector<int64_t> pos_;
  std::vector<std::vector<int64_t>> held_;
  // [chunk][replica]: the level of the chunk's input / output boundary, -1 when there is none or it stays
  // on the rank.
  std::vector<std::vector<int64_t>> in_level_, out_level_;
  std::vector<int64_t> ar_level_;                    // per position, -1 for width 1
  std::vector<std::vector<int64_t>> kinds_;          // per position: first replica of each level pattern
  // Per position: without and with recompute; walked on first use (position_walks()), since a pricer
  // that only prices lanes with a given recompute choice needs none.
  mutable std::shared_ptr<const CostModel::PositionWalks> walks_;
  const CostModel::PositionWalks& position_walks() const;
  // The rank's memory without and with recompute, and whether it recomputes and fits (the policy's choice).
  struct RankMemory {
    int64_t plain = 0, redo = 0;
    bool recompute = false, feasible = false;
  };
  RankMemory rank_memory(int64_t position, const std::vector<int64_t>& bounds) const;
  mutable std::vector<pipeline::ChunkStashBytes> plain_bytes_, redo_bytes_;  // scratch
  // Per position, without and with recompute: its stash peaks, each priced from the last bytes priced.
  mutable std::vector<pipeline::StashPeaks> peaks_;
  // held_time's terms: per chunk its allreduce + update at its last two (begin, end), since a refinement's
  // tries move one bound and mostly move it back.
  struct HeldCache {
    struct Slot {
      int64_t begin = -1, end = -1;
      double ms = 0;
    };
    std::array<Slot, 2> slots;
    uint8_t older = 0;  // the slot filled longer ago
  };
  double chunk_held(size_t chunk, int64_t begin, int64_t end, int64_t level) const;
  mutable std::vector<HeldCache> held_cache_;  // per chunk
  // The objective's scratch.
  mutable std::vector<double> cycle_work_, cycle_h_, cycle_u_;
  mutable std::vector<double> wait_f_, wait_b_, wait_x_, wait_scratch_;  // add_waits' per chunk terms
  struct WaitKey {  // what a rank's terms in wait_f_, wait_b_, wait_x_ were computed from
    bool valid = false;
    char recompute = 0;
    std::vector<int64_t> bounds;  // its chunks' begin and end, in order
  };
  mutable std::vector<WaitKey> wait_keys_;
};

// The most partial splits one chunked search may walk: the walk is exact but exponential in the chunks
// (a rank's chunks are far apart, so no dynamic program over contiguous stages applies), so past this the
// search keeps the equal-compute split, marked exhausted (the replay search then reports its proven gap).
// Every split of a model of up to about a dozen layers in up to six chunks is walked well within it.
inline constexpr int64_t kChunkedSplitWork = int64_t{1} << 13;

// The chunked counterparts of partition.hpp's functions (same contracts; see there; best_split's work is
// at most kChunkedSplitWork).
Split chunked_best_split(const CostModel& model, const Candidate& c, double upper_bound_ms, int64_t max_work);
Split chunked_balanced_split(const CostModel& model, const Candidate& c);
bool chunked_for_each_split_within(const CostModel& model, const Candidate& c, double limit_ms, int64_t max_nodes,
                                   const std::function<double(const Split&)>& visit);
OverageSplit chunked_least_overage_split(const CostModel& model, const Candidate& c, int64_t bound_bytes);

}  // namespace pd2bw::planner::detail

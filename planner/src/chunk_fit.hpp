// The pieces of the memory-fitted start of the chunked split search (chunk_split.cpp's memory_fitted):
// how many layers each rank can hold and in which of its chunks, and the split those counts lay out.
// Private to the planner. Heuristics, not bounds: the split they give is checked by the floor and the
// pricer before it is used.
#pragma once

#include <cstdint>
#include <vector>

#include "chunk_floor.hpp"
#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner::detail {

// One rank's layout of n layers: one layer in each local chunk but `heavy`, which holds the other
// n - (v - 1) (RankLayouts::best says which).
struct RankLayout {
  size_t heavy = 0;
  bool fits = false;  // the floor, under the recompute policy, is within the memory limit
};

// Whether a rank of memory floor `f` is within `limit` in an option `policy` allows (plain unless
// `always`, recomputing unless `never`).
bool fits_under(RecomputePolicy policy, const RankFloor& f, int64_t limit);

// Rank layouts of chunked candidate c priced by its memory floor (RankFloors::in). The chunks' layers
// are taken at the model's ends where the chunk is model chunk 0 or the last, else from layer 1 up: as if
// the rank's chunks were the only ones. Keeps references to `model` and `floors`. Not thread-safe (its
// calls share scratch vectors).
class RankLayouts {
 public:
  RankLayouts(const CostModel& model, const Candidate& c, const RankFloors& floors);
  // Rank `position` holding v <= n <= L layers: the chunk to hold the most. Without recompute first
  // (unless the policy is `always`): the chunk of fewest activations in flight (then fewest W's
  // waiting) at the floor's moments where its layout fits, else the chunk of least floor; with recompute
  // (unless the policy is `never`) likewise when no layout fits without. `fits` false: no layout fits in
  // the options allowed, and `heavy` is that of the last option tried.
  RankLayout best(int64_t position, int64_t n) const;
  // The most layers in [v, hi] (hi <= L) rank `position` holds in its best layout and fits by the floor,
  // by bisection: exact where fitting holds for a prefix of n, as on blocks that are all alike (a chunk's
  // floor grows with its size); elsewhere some n that fits. v - 1 when not even v fit.
  int64_t capacity(int64_t position, int64_t hi) const;

 private:
  RankFloor layout_floor(int64_t position, int64_t n, size_t heavy) const;
  const CostModel& model_;
  Candidate c_;
  const RankFloors& floors_;
  std::vector<std::vector<int64_t>> chunks_;  // per position, its model chunks in local order
  std::vector<size_t> fewest_;                // per position, the local chunk of fewest activations in flight
  mutable ChunkWindows windows_;              // layout_floor's, and best()'s floors of its v layouts
  mutable std::vector<RankFloor> floors_at_;
};

// Layer counts per rank, each within its cap, summing to L, as level as the caps allow: min(cap_p, t)
// for the least level t that reaches L, less one layer on the first ranks at t while the sum is over.
// Empty when the caps hold fewer than L layers, some rank cannot hold `per_rank_least` layers, or L is
// too few layers for that many per rank.
std::vector<int64_t> water_filled(const std::vector<int64_t>& caps, int64_t L, int64_t per_rank_least);

// The split (d v + 1 bounds) whose rank p holds counts[p] >= v layers: one in each of its chunks but
// `heavy[p]` (a local chunk index), which holds the rest.
std::vector<int64_t> laid_out(const Candidate& c, const std::vector<int64_t>& counts, const std::vector<size_t>& heavy);

}  // namespace pd2bw::planner::detail

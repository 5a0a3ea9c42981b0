// What one rank holds between its forwards and backwards over a step, read off the schedule generator's
// own op list: the memory model of the schedules whose counts have no short closed form (zb-h2, and the
// chunked interleaved and zb-v, whose chunks hold different counts at different moments), and the
// reference the closed forms of the others are tested against.
#pragma once

#include <cstdint>
#include <span>
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

// A walk's kept moments: one row per moment of its chunks' holdings (`width` of them), all rows in one
// array (a chunked replay search walks thousands of ranks, and a vector per moment was most of its
// memory). Also kept as rows are added, over every row added: the largest sum of a row's counts
// (saturating), and whether any row holds a rebuilt stash or a waiting W. Erasing leaves them: they stay
// an upper bound and a superset, which is what stash_peak reads them for (and the walk only erases a row
// for a later one that covers it, which keeps them exact).
class StashMoments {
 public:
  using Row = std::span<const ChunkHeld>;
  explicit StashMoments(size_t width = 0) : width_(width) {}
  size_t width() const { return width_; }
  size_t size() const { return rows_; }
  bool empty() const { return size() == 0; }
  Row operator[](size_t t) const { return {cells_.data() + t * width_, width_}; }
  const ChunkHeld* data() const { return cells_.data(); }  // row t at data() + t * width()
  // Appends a row (throws UsageError unless row.size() == width()); erases row t (t < size()).
  void push_back(Row row);
  void erase(size_t t);
  int64_t most_held() const { return most_; }  // the largest sum of a row's counts
  bool any_rebuilt() const { return any_rebuilt_; }
  bool any_weight() const { return any_weight_; }
  // The rows copied out, for whoever compares walks.
  std::vector<std::vector<ChunkHeld>> rows() const;

  class iterator {
   public:
    iterator(const StashMoments* m, size_t t) : m_(m), t_(t) {}
    Row operator*() const { return (*m_)[t_]; }
    iterator& operator++() {
      ++t_;
      return *this;
    }
    friend bool operator==(const iterator&, const iterator&) = default;

   private:
    const StashMoments* m_;
    size_t t_;
  };
  iterator begin() const { return {this, 0}; }
  iterator end() const { return {this, size()}; }
  friend bool operator==(const StashMoments& a, const StashMoments& b) {
    return a.width_ == b.width_ && a.rows_ == b.rows_ && a.cells_ == b.cells_;
  }

 private:
  size_t width_ = 0;
  size_t rows_ = 0;
  std::vector<ChunkHeld> cells_;
  int64_t most_ = 0;
  bool any_rebuilt_ = false, any_weight_ = false;
};

struct StashWalk {
  std::vector<int64_t> chunks;  // the rank's chunks, model order (chunks_at)
  // After each op of one step, what each of those chunks holds: every moment no other moment covers
  // (every count <= the other's) is kept, in the order first seen, and of the others only those no
  // moment kept shortly before covers (a bounded look-back keeps the walk linear in its ops). Any
  // positive weighting of the counts peaks at one of the moments kept.
  StashMoments moments;
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

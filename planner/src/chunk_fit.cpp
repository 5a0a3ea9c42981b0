// The memory-fitted start's pieces (chunk_fit.hpp).
#include "chunk_fit.hpp"

#include <algorithm>

#include "bisect.hpp"
#include "pd2bw/pipeline/schedule.hpp"
#include "pd2bw/pipeline/shape.hpp"

namespace pd2bw::planner::detail {

bool fits_under(RecomputePolicy policy, const RankFloor& f, int64_t limit) {
  return (policy != RecomputePolicy::always && f.plain <= limit) ||
         (policy != RecomputePolicy::never && f.redo <= limit);
}

RankLayouts::RankLayouts(const CostModel& model, const Candidate& c, const RankFloors& floors)
    : model_(model), c_(c), floors_(floors) {
  for (int64_t p = 0; p < c.depth; ++p) {
    chunks_.push_back(pipeline::chunks_at(c.schedule, c.depth, c.chunks, p));
    // Per chunk, the most activations and then the most W's waiting at the floor's moments.
    std::vector<std::pair<int64_t, int64_t>> most(static_cast<size_t>(c.chunks), {0, 0});
    for (const FloorMoment& moment : floors.moments(p))
      for (size_t j = 0; j < moment.size(); ++j) {
        most[j].first = std::max(most[j].first, moment[j].activations);
        most[j].second = std::max(most[j].second, moment[j].weight_stashes);
      }
    fewest_.push_back(static_cast<size_t>(std::min_element(most.begin(), most.end()) - most.begin()));
  }
}

RankFloor RankLayouts::layout_floor(int64_t position, int64_t n, size_t heavy) const {
  const int64_t L = model_.num_layers(), last = c_.depth * c_.chunks - 1;
  const auto& chunks = chunks_[static_cast<size_t>(position)];
  ChunkWindows& windows = windows_;
  windows.clear();
  for (size_t j = 0; j < chunks.size(); ++j) {
    const int64_t size = j == heavy ? n - (c_.chunks - 1) : 1;  // 1 <= size <= L - v + 1
    // Model chunk 0 starts at layer 0 and the last ends at L; the others hold blocks from layer 1 on,
    // clear of the last layer where they can.
    int64_t begin = size <= L - 2 ? 1 : 0;
    if (chunks[j] == 0) begin = 0;
    if (chunks[j] == last) begin = L - size;
    windows.emplace_back(begin, begin + size);
  }
  return floors_.in(position, windows);
}

RankLayout RankLayouts::best(int64_t position, int64_t n) const {
  const int64_t limit = model_.memory_limit_bytes();
  const auto policy = model_.constraints().recompute;
  const size_t fewest = fewest_[static_cast<size_t>(position)];
  std::vector<RankFloor>& floors = floors_at_;
  floors.clear();
  for (size_t j = 0; j < static_cast<size_t>(c_.chunks); ++j) floors.push_back(layout_floor(position, n, j));
  // In one option: the fewest-activations chunk where it fits, else the chunk of least floor (the
  // fewest-activations one on ties).
  const auto choose = [&](bool plain) {
    const auto at = [&](size_t j) { return plain ? floors[j].plain : floors[j].redo; };
    size_t out = fewest;
    for (size_t j = 0; at(fewest) > limit && j < floors.size(); ++j)
      if (at(j) < at(out)) out = j;
    return RankLayout{out, at(out) <= limit};
  };
  if (policy == RecomputePolicy::always) return choose(false);
  const RankLayout plain = choose(true);
  if (plain.fits || policy == RecomputePolicy::never) return plain;
  return choose(false);
}

int64_t RankLayouts::capacity(int64_t position, int64_t hi) const {
  const int64_t v = c_.chunks;
  if (hi < v || !best(position, v).fits) return v - 1;
  return last_true(v, hi, [&](int64_t n) { return best(position, n).fits; });
}

std::vector<int64_t> water_filled(const std::vector<int64_t>& caps, int64_t L, int64_t per_rank_least) {
  const auto reach = [&](int64_t t) {
    int64_t sum = 0;
    for (int64_t cap : caps) sum += std::min(cap, t);
    return sum;
  };
  if (caps.empty() || static_cast<int64_t>(caps.size()) * per_rank_least > L) return {};
  const int64_t top = *std::max_element(caps.begin(), caps.end());
  if (*std::min_element(caps.begin(), caps.end()) < per_rank_least || reach(top) < L) return {};
  int64_t lo = 0, hi = top;  // reach(hi) >= L
  while (lo + 1 < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    (reach(mid) >= L ? hi : lo) = mid;
  }
  std::vector<int64_t> counts;
  for (int64_t cap : caps) counts.push_back(std::min(cap, hi));
  for (int64_t over = reach(hi) - L, p = 0; over > 0; ++p)
    if (counts[static_cast<size_t>(p)] == hi && hi > per_rank_least) --counts[static_cast<size_t>(p)], --over;
  return counts;
}

std::vector<int64_t> laid_out(const Candidate& c, const std::vector<int64_t>& counts,
                              const std::vector<size_t>& heavy) {
  std::vector<int64_t> bounds{0};
  std::vector<size_t> placed(counts.size(), 0);
  for (int64_t k = 0; k < c.depth * c.chunks; ++k) {
    const auto p = static_cast<size_t>(pipeline::chunk_position(c.schedule, c.depth, k));
    bounds.push_back(bounds.back() + (placed[p]++ == heavy[p] ? counts[p] - (c.chunks - 1) : 1));
  }
  return bounds;
}

}  // namespace pd2bw::planner::detail

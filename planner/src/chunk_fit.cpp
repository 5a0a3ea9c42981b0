// The memory-fitted start's pieces (chunk_fit.hpp).
#include "chunk_fit.hpp"

#include <algorithm>

#include "bisect.hpp"
#include "pd2bw/pipeline/schedule.hpp"
#include "pd2bw/pipeline/shape.hpp"

namespace pd2bw::planner::detail {

RankLayouts::RankLayouts(const CostModel& model, const Candidate& c, const RankFloors& floors)
    : model_(model), c_(c), floors_(floors) {
  for (int64_t p = 0; p < c.depth; ++p) chunks_.push_back(pipeline::chunks_at(c.schedule, c.depth, c.chunks, p));
}

RankFloor RankLayouts::floor(int64_t position, int64_t n, size_t heavy) const {
  const int64_t L = model_.num_layers(), last = c_.depth * c_.chunks - 1;
  const auto& chunks = chunks_[static_cast<size_t>(position)];
  ChunkWindows windows;
  for (size_t j = 0; j < chunks.size(); ++j) {
    const int64_t size = j == heavy ? n - (c_.chunks - 1) : 1;
    // Model chunk 0 starts at layer 0 and the last ends at L; the others start past layer 0 and end
    // before L - 1 where they can.
    int64_t begin = std::clamp<int64_t>(1, 0, std::max<int64_t>(0, L - 1 - size));
    if (chunks[j] == 0) begin = 0;
    if (chunks[j] == last) begin = L - size;
    windows.emplace_back(begin, begin + size);
  }
  return floors_.in(position, windows);
}

RankLayout RankLayouts::best(int64_t position, int64_t n) const {
  const int64_t limit = model_.memory_limit_bytes();
  const auto policy = model_.constraints().recompute;
  const bool plain_ok = policy != RecomputePolicy::always, redo_ok = policy != RecomputePolicy::never;
  RankLayout out;
  int64_t best_plain = INT64_MAX, best_redo = INT64_MAX;
  size_t redo_heavy = 0;
  for (size_t j = 0; j < static_cast<size_t>(c_.chunks); ++j) {
    const RankFloor f = floor(position, n, j);
    const int64_t plain = plain_ok ? f.plain : INT64_MAX, redo = redo_ok ? f.redo : INT64_MAX;
    if (plain < best_plain) best_plain = plain, out.heavy = j;
    if (redo < best_redo) best_redo = redo, redo_heavy = j;
  }
  out.fits = best_plain <= limit || best_redo <= limit;
  if (best_plain > limit && best_redo < best_plain) out.heavy = redo_heavy;
  return out;
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

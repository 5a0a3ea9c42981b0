// The link levels and per-stage transfers of a candidate's placement, shared by the bounds and rules_out.
#include "step_bound_links.hpp"

#include <algorithm>
#include <memory>
#include <mutex>
#include <numeric>
#include <tuple>
#include <utility>
#include <vector>

#include "pd2bw/planner/partition.hpp"
#include "step_bound.hpp"

namespace pd2bw::planner {

namespace detail {

LinkLevels fastest_levels(const CostModel& model, const Candidate& c) {
  const bool rep_inner = c.placement == Placement::replicas_inner;
  LinkLevels l;
  // Replicas inner: boundary s pairs rank s w + r with (s + 1) w + r, w apart; ranks 0 and w are the
  // closest such pair in the hierarchy (a level's groups are aligned), whatever the rest cross.
  l.boundary = rep_inner ? model.level_between(0, c.width) : 0;
  l.replicas = model.level_between(0, rep_inner ? c.width - 1 : (c.width - 1) * c.depth);
  return l;
}

}  // namespace detail

// Groups are contiguous rank ranges whose sizes S_k each divide the next (cumulative products of the
// levels' sizes), and every rank a candidate uses is in the last level's one group. So whether two ranks
// x and x + delta share a group below the last level depends on x mod S alone, S the second-to-last span,
// and a replica's boundary levels (delta 1 or -1 for stages-inner, +-w for replicas-inner) on its rank mod
// S: replica r + period has the same pair as r, where the ranks r d + i repeat mod S every S / gcd(d, S)
// replicas and the ranks i w + r every S.
int64_t detail::stage_period(const CostModel& model) {
  const auto levels = static_cast<int64_t>(model.cluster().levels.size());
  return levels < 2 ? 1 : model.level_span(levels - 2);
}

int64_t detail::replica_period(const CostModel& model, const Candidate& c) {
  const int64_t span = stage_period(model);
  return c.placement == Placement::replicas_inner ? span : span / std::gcd(c.depth % span, span);
}

std::shared_ptr<const StepLowerBound::PlacementLevels> StepLowerBound::placement_levels(const Candidate& c) const {
  const auto key = std::make_tuple(c.depth, c.width, static_cast<int>(c.placement));
  {
    const std::lock_guard<std::mutex> lock(shared_->levels_mutex);
    if (const auto it = shared_->levels.find(key); it != shared_->levels.end()) return it->second;
  }
  auto out = std::make_shared<PlacementLevels>();
  out->depth = c.depth;
  out->period = detail::stage_period(model_);
  const int64_t replicas = std::min(c.width, detail::replica_period(model_, c));
  // Stage i's ranks (r d + i or i w + r) are stage i - S's plus a multiple of S, S the second-to-last
  // span, so between its neighbours and across its replicas it crosses the same levels, in the same
  // order of replicas (replica_period's argument): interior stages repeat every S, and only the stages
  // with a slot of their own are walked.
  for (int64_t i = 0; i < c.depth; ++i) {
    if (detail::repeated_stage(i, c.depth, out->period) >= 0) continue;
    const auto begin = static_cast<std::ptrdiff_t>(out->pairs.size());
    out->first.push_back(out->pairs.size());
    for (int64_t r = 0; r < replicas; ++r) {
      const int64_t rank = CostModel::rank_of(c, i, r);
      const std::pair<int, int> p{
          i > 0 ? static_cast<int>(model_.level_between(CostModel::rank_of(c, i - 1, r), rank)) : -1,
          i + 1 < c.depth ? static_cast<int>(model_.level_between(rank, CostModel::rank_of(c, i + 1, r))) : -1};
      if (std::find(out->pairs.begin() + begin, out->pairs.end(), p) == out->pairs.end()) out->pairs.push_back(p);
    }
    out->ar_level.push_back(model_.allreduce_level(c, i));
  }
  out->first.push_back(out->pairs.size());
  const std::lock_guard<std::mutex> lock(shared_->levels_mutex);
  return shared_->levels.emplace(key, std::move(out)).first->second;
}

std::vector<StepLowerBound::StageLinks> StepLowerBound::stage_links(const Candidate& c) const {
  return stage_links(c, *placement_levels(c));
}

std::vector<StepLowerBound::StageLinks> StepLowerBound::stage_links(const Candidate& c,
                                                                    const PlacementLevels& levels) const {
  const auto bi = static_cast<size_t>(c.microbatch_index);
  std::vector<double> p(model_.cluster().levels.size());  // the smallest boundary tensor, per level
  for (size_t lv = 0; lv < p.size(); ++lv) p[lv] = model_.p2p_ms(min_out_[bi], static_cast<int64_t>(lv));
  auto at = [&](int lv) { return lv >= 0 ? p[static_cast<size_t>(lv)] : 0.0; };
  std::vector<StageLinks> out(static_cast<size_t>(c.depth));
  for (int64_t i = 0; i < c.depth; ++i) {
    auto& s = out[static_cast<size_t>(i)];
    if (const int64_t earlier = detail::repeated_stage(i, c.depth, levels.period); earlier >= 0) {
      s = out[static_cast<size_t>(earlier)];
      continue;
    }
    s.in_fast = i > 0 ? kInfinity : 0.0;
    const size_t slot = levels.slot(i);
    for (size_t k = levels.first[slot]; k < levels.first[slot + 1]; ++k) {
      const auto [in, o] = levels.pairs[k];
      s.lane = std::max(s.lane, 2.0 * (at(in) + at(o)));
      s.in_fast = std::min(s.in_fast, at(in));
    }
    s.ar_level = levels.ar_level[slot];
    s.latency = model_.allreduce_ms(0, c.width, s.ar_level);
  }
  return out;
}

}  // namespace pd2bw::planner

// The whole-layer lanes bound (StepLowerBound::lanes_reach, lanes_bound): every schedule's objective is
// at least its busiest lane, max_i (m t_i + h_i) (objective.hpp), so no split beats the least T at which
// d stages of whole layers, each within its own memory, can all have lanes <= T.
//
// Relaxing a stage: price stage k holding layers [a, e) as the partitioner does (price_stage.cpp), but
// with the smallest boundary tensors of the model for its input (stash and buffers) and output buffers,
// its replicas' least transfers (stage_links: the smallest tensor over each level its replicas cross) and
// its allreduce at its replicas' level. Each term then only grows when layers are added at either end:
// parameters, stash, W stash, compute, redo and update are sums over the layers, and the allreduce is
// non-decreasing in bytes. Its memory decides recompute as the policy does: when the relaxed stage fits
// without recompute its compute is the plain one, at most the real stage's; when it does not, neither
// does the real one, which must recompute (or not fit). So the relaxed lane of [a, e) is at most the real
// lane of any run of layers containing [a, e), and is non-decreasing in e.
//
// The walk: stage 0 starts at layer 0 and each stage k, starting at g_k, ends at the furthest e >= g_k
// whose relaxed lane is <= T (e = g_k, an empty stage, when not even one layer fits). If some split
// [a_0 = 0, a_1, ..., a_d = L) has every real lane <= T, then g_k >= a_k for every k: it holds at k = 0,
// and when g_k >= a_k, either g_k >= a_{k+1} or [g_k, a_{k+1}) lies inside stage k's run [a_k, a_{k+1}),
// whose real lane is <= T, so its relaxed lane is too and g_{k+1} >= a_{k+1}. Hence the walk reaches L;
// when it does not, no split has all lanes <= T.
#include <algorithm>
#include <cstdint>
#include <mutex>
#include <tuple>
#include <utility>
#include <vector>

#include "bisect.hpp"
#include "pd2bw/checked.hpp"
#include "pd2bw/pipeline/memory.hpp"
#include "pd2bw/planner/partition.hpp"
#include "prepared.hpp"
#include "step_bound.hpp"

namespace pd2bw::planner {

StepLowerBound::Relaxed::Relaxed(const StepLowerBound& bound, const Candidate& c, int64_t extra_bytes)
    : c_(c),
      statics_(bound.model_.static_factors(c.schedule)),
      cp_(bound.model_.compute_prefix(c.microbatch_index)),
      rp_(bound.model_.redo_prefix(c.microbatch_index)),
      sp_(bound.model_.stash_prefix(c.microbatch_index)),
      pp_(bound.model_.param_prefix()),
      wp_(bound.model_.weight_stash_prefix(c.microbatch_index)),
      policy_(bound.model_.constraints().recompute),
      split_(schemas::splits_backward(c.schedule)) {
  const auto bi = static_cast<size_t>(c.microbatch_index);
  input_ = bound.min_input_any_[bi];
  limit_ = saturating_add(bound.model_.memory_limit_bytes(), extra_bytes);
  min_in_ = bound.min_in_[bi];
  min_out_ = bound.min_out_[bi];
  reserve_ = bound.model_.constraints().reserve_bytes;
  shared_ = bound.shared_.get();
  {
    const std::lock_guard<std::mutex> lock(shared_->stage_pool_mutex);
    if (!shared_->stage_pool.empty()) {
      stages_ = std::move(shared_->stage_pool.back());
      shared_->stage_pool.pop_back();
    }
  }
  stages_.assign(static_cast<size_t>(std::max<int64_t>(c.depth, 0)), std::nullopt);
  smallest_ = bound.smallest_.get();
  bi_ = bi;
  // Unsaturated sums are exact when every term is far from 2^63: bytes below 2^40 (bytes_small_), counts
  // below 2^20, and the static bytes and fixed buffers below 2^60.
  bounded_ = input_ >= 0 && input_ < kSmallBytes && c.microbatches < kCounts && c.depth < kCounts;
  small_ = bound.bytes_small_[bi] != 0 && bounded_ && statics_.total(pp_.back()) < kBig;
  unit_shift_ = exact_log2(static_cast<uint64_t>(std::max<int64_t>(statics_.compute_bytes, 0)));
  state_terms_ = (statics_.master() ? 1 : 0) + 1 + statics_.moments;
}

StepLowerBound::Relaxed::~Relaxed() {
  constexpr size_t kPooled = 16;  // more than the threads that hold one at once
  const std::lock_guard<std::mutex> lock(shared_->stage_pool_mutex);
  if (stages_.capacity() > 0 && shared_->stage_pool.size() < kPooled) shared_->stage_pool.push_back(std::move(stages_));
}

StepLowerBound::Relaxed::Stage& StepLowerBound::Relaxed::stage(int64_t k) const {
  auto& slot = stages_[static_cast<size_t>(k)];
  if (slot) return *slot;
  Stage& st = slot.emplace();
  price_stage(st, k);
  return st;
}

void StepLowerBound::Relaxed::price_stage(Stage& st, int64_t k) const {
  st.fixed = saturating_add(pipeline::comm_buffer_bytes(k, c_.depth, min_in_, min_out_), reserve_);
  st.in_flight = st.ahead = st.defer = 0;
  if (split_) {
    std::tie(st.ahead, st.defer) = pipeline::split_shape(c_.schedule, c_.depth, k);
  } else {
    st.in_flight = CostModel::in_flight(c_, k);
  }
  st.filled = st.older = 0;
  st.bounded = bounded_ && st.fixed >= 0 && st.fixed < kBig && st.in_flight >= 0 && st.in_flight < kCounts &&
               st.ahead >= 0 && st.ahead < kCounts && st.defer >= 0 && st.defer < kCounts;
  st.small = small_ && st.bounded;
  st.shape_count = kShapesUnknown;
}

bool StepLowerBound::Relaxed::fits(const Stage& st, Known& known, bool redo, int64_t a, int64_t e) const {
  int64_t& ok = redo ? known.redo_ok : known.plain_ok;
  int64_t& bad = redo ? known.redo_bad : known.plain_bad;
  if (e <= ok) return true;
  if (e >= bad) return false;
  const auto ua = static_cast<size_t>(a), ue = static_cast<size_t>(e);
  const int64_t stash = sp_[ue] - sp_[ua];
  const int64_t params = pp_[ue] - pp_[ua], grads = wp_[ue] - wp_[ua];
  // Without saturation when no term can reach it (small_).
  const bool in = (st.small ? small_bytes(st, redo, params, stash, grads) : bytes(st, redo, params, stash, grads)) <= limit_;
  (in ? ok : bad) = e;
  return in;
}

// statics_.total(params) for params >= 0 below the whole model's (small_): nothing saturates, and a
// compute dtype of 2^k bytes divides by a shift.
int64_t StepLowerBound::Relaxed::plain_statics(int64_t params) const {
  const int64_t units = unit_shift_ >= 0 ? params >> unit_shift_ : params / statics_.compute_bytes;
  return statics_.versions * params + state_terms_ * (units * statics_.state_bytes);
}

// detail::choose_recompute on the stage's two byte counts, each asked only when the choice needs it: never
// and auto without recompute when the plain stage fits; auto and always with it when the stage fits
// recomputing; else no option fits.
double StepLowerBound::Relaxed::time(int64_t k, int64_t a, int64_t e) const {
  Stage& st = stage(k);
  Known* known = nullptr;
  for (size_t i = 0; i < st.filled; ++i)
    if (st.known[i].a == a) known = &st.known[i];
  if (known == nullptr) {  // a free slot, else the one filled longest ago
    if (st.filled < st.known.size()) {
      known = &st.known[st.filled++];
    } else {
      known = &st.known[st.older];
      st.older = static_cast<uint8_t>((st.older + 1) % st.known.size());
    }
    *known = Known{a, -1, INT64_MAX, -1, INT64_MAX};
  }
  const auto ua = static_cast<size_t>(a), ue = static_cast<size_t>(e);
  bool recompute = policy_ == RecomputePolicy::always;
  if (!recompute && !fits(st, *known, false, a, e)) {
    if (policy_ == RecomputePolicy::never) return kInfinity;
    recompute = true;
  }
  if (recompute && !fits(st, *known, true, a, e)) return kInfinity;
  return (cp_[ue] - cp_[ua]) + (recompute ? rp_[ue] - rp_[ua] : 0.0);
}

const StepLowerBound::PlacementLevels& StepLowerBound::Probe::levels() {
  if (!levels_) levels_ = bound.placement_levels(c);
  return *levels_;
}

const std::vector<StepLowerBound::StageLinks>& StepLowerBound::Probe::links() {
  if (links_.empty()) links_ = bound.stage_links(c, levels());
  return links_;
}

const StepLowerBound::Relaxed& StepLowerBound::Probe::relaxed() {
  if (!relaxed_) relaxed_.emplace(bound, c);
  return *relaxed_;
}

bool StepLowerBound::lanes_reach(const Candidate& c, double t) const {
  if (c.chunks > 1 || c.depth < 1) return true;
  Probe p(*this, c);
  return lanes_reach(p, t);
}

// The walk at t within the ends of the walks (Probe::lanes) at short_at < t (which did not reach) and reach_at > t:
// g_{k+1}(short_at) <= g_{k+1}(t) <= g_{k+1}(reach_at), so each stage's end is searched between them, and
// where they meet it is known without a probe. The ends are the same as a walk's from scratch.
//
// And each walk also decides an interval of t about it. One that reaches, with stage k's lane over its
// run [g_k, g_{k+1}) at most n_k (0 for an empty one), reaches at every t' >= max_k n_k: each stage still
// ends at least as far from at least as far. One that does not, with stage k's lane over [g_k, g_{k+1}]
// (one layer more) at least x_k (infinity at the last layer or out of memory), does not at any t' <
// min_k x_k: each stage still ends no further from no further. So reach_at and short_at are those
// bounds, not the t asked.
bool StepLowerBound::lanes_reach(Probe& p, double t) const {
  const Candidate& c = p.c;
  if (c.chunks > 1 || c.depth < 1) return true;
  auto& walks = p.lanes;
  if (walks.has_short && t < walks.short_at) return false;
  if (walks.has_reach && t >= walks.reach_at) return true;
  const bool at_infinity = !(t < kInfinity);
  if (at_infinity && !memory_fits(p)) {  // only memory can stop the walk: the links are not needed
    walks.ends.assign(static_cast<size_t>(c.depth), 0);
    walks.remember(false, kInfinity);
    return false;
  }
  const auto& statics = model_.static_factors(c.schedule);
  const auto& pp = model_.param_prefix();
  const auto& up = model_.update_prefix();
  const auto& cp = model_.compute_prefix(c.microbatch_index);
  const int64_t L = model_.num_layers();
  const double m = static_cast<double>(c.microbatches);
  const auto d = static_cast<size_t>(c.depth);
  walks.ends.assign(d, L);
  int64_t a = 0;
  double need = -kInfinity, next = kInfinity;  // max_k n_k and min_k x_k so far
  int64_t held = 1;                            // the layers of the stage before (at least 1)
  const auto& links = p.links();
  const Relaxed& relaxed = p.relaxed();
  for (size_t k = 0; k < d && a < L; ++k) {
    const auto& l = links[k];
    const int64_t ar_level = l.ar_level;
    const auto ua = static_cast<size_t>(a);
    const int64_t low = walks.has_short ? std::max(a, walks.short_ends[k]) : a;
    const int64_t high = walks.has_reach ? std::max(low, std::min(L, walks.reach_ends[k])) : L;
    const int64_t start = a;
    // Stage k's lane over [start, e), or a lower bound on it where that is above t (infinity: no memory).
    auto lane = [&](int64_t e) {
      const auto ue = static_cast<size_t>(e);
      const double update = up[ue] - up[ua], plain = cp[ue] - cp[ua];
      // The time is at least the plain compute and the allreduce at least 0, so the lane with those bounds
      // the lane from below: past t, no need to price the allreduce or the memory.
      const double compute = m * (plain + l.lane);
      if (const double least = compute + update; !(least <= t)) return least;
      const double allreduce = model_.allreduce_ms(statics.grads(pp[ue] - pp[ua]), c.width, ar_level);
      const double least = compute + allreduce + update;
      if (!(least <= t)) return least;
      const double time = relaxed.time(static_cast<int64_t>(k), start, e);
      return time < kInfinity ? m * (time + l.lane) + allreduce + update : kInfinity;
    };
    int64_t in_e = start, out_e = L + 1;  // the furthest end probed within t and the nearest past it
    double in_v = -kInfinity, out_v = kInfinity;
    auto ok = [&](int64_t e) {
      const double v = lane(e);
      const bool within = v < kInfinity && v <= t;
      if (within && e > in_e) std::tie(in_e, in_v) = std::make_pair(e, v);
      if (!within && e < out_e) std::tie(out_e, out_v) = std::make_pair(e, v);
      return within;
    };
    // A walk just below one that reached mostly ends its stages where that one did, and a stage mostly
    // holds as many layers as the one before: the search starts there.
    const int64_t guess = walks.has_reach ? high : std::min(high, low + held);
    a = low >= high ? low : detail::gallop_from(low, high, guess, ok);
    held = std::max<int64_t>(1, a - start);
    walks.ends[k] = a;
    if (a > start) need = std::max(need, in_e == a ? in_v : lane(a));
    if (a < L) next = std::min(next, out_e == a + 1 ? out_v : lane(a + 1));
  }
  const bool reached = a >= L;  // at infinity it does: memory_reaches said so
  walks.remember(reached, reached ? std::min(t, need) : std::max(t, next));
  return reached;
}

// The same walk with memory alone: a stage's bytes in the policy's option are at least its relaxed bytes
// (smallest boundary tensors), so a split whose every stage is within the memory plus over_bytes makes
// each relaxed run within it too, and the walk reaches the last layer as above.
bool StepLowerBound::fits_within(const Candidate& c, int64_t over_bytes) const {
  if (c.chunks > 1 || c.depth < 1) return true;
  return memory_reaches(Relaxed(*this, c, over_bytes), c.depth);
}

bool StepLowerBound::memory_fits(Probe& p) const {
  const Candidate& c = p.c;
  const auto key = std::make_tuple(c.schedule, c.microbatch_index, c.depth);
  const int64_t count = CostModel::memory_microbatches(c);
  {
    const std::lock_guard<std::mutex> lock(shared_->memory_mutex);
    if (const auto it = shared_->memory_fits.find(key); it != shared_->memory_fits.end()) {
      if (count <= it->second.fits_to) return true;
      if (count >= it->second.fails_from) return false;
    }
  }
  const bool fits = memory_reaches(p.relaxed(), c.depth);
  const std::lock_guard<std::mutex> lock(shared_->memory_mutex);
  auto& known = shared_->memory_fits[key];
  if (fits)
    known.fits_to = std::max(known.fits_to, count);
  else
    known.fails_from = std::min(known.fails_from, count);
  return fits;
}

// The walk with memory alone: each of the `depth` stages ends at the furthest layer its relaxed run fits
// to. At t = infinity it is lanes_reach's walk (a lane is finite exactly when its relaxed run fits).
bool StepLowerBound::memory_reaches(const Relaxed& relaxed, int64_t depth) const {
  const int64_t L = model_.num_layers();
  if (!relaxed.may_cover(depth)) return false;
  // Each search starts from the stage before's length (neighbouring stages hold similar runs): the same
  // ends as galloping from each start, in fewer tests.
  int64_t a = 0, held = 1;
  for (int64_t k = 0; k < depth && a < L; ++k) {
    const int64_t e = detail::gallop_from(a, L, std::min(L, a + held),
                                          [&](int64_t x) { return x == a || relaxed.time(k, a, x) < kInfinity; });
    held = std::max<int64_t>(1, e - a);
    a = e;
  }
  return a >= L;
}

}  // namespace pd2bw::planner

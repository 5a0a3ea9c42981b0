// Greedy splits (each stage as long as a busy-time threshold allows): the DP's first upper bound.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <tuple>
#include <vector>

#include "bisect.hpp"
#include "chunk_price.hpp"
#include "partition_internal.hpp"
#include "prepared.hpp"

namespace pd2bw::planner::detail {

namespace {

// A feasible split found greedily (each stage as long as allowed) with every stage's busy time <= t, or
// empty.
// `most_params`: the most parameter bytes a stage's static memory allows (static_bytes(schedule, a, e) <=
// the static cap exactly when the parameter bytes of [a, e) are at most this).
std::vector<int64_t> greedy_split(const CostModel& model, const detail::PreparedCandidate& pc, double t,
                                  int64_t most_params) {
  const int64_t L = model.num_layers();
  const int64_t d = pc.candidate.depth;
  const auto& cp = model.compute_prefix(pc.candidate.microbatch_index);
  const auto& pp = model.param_prefix();
  const double m = static_cast<double>(pc.candidate.microbatches);
  std::vector<int64_t> bounds{0};
  int64_t a = 0;
  for (int64_t i = 0; i < d; ++i) {
    const int64_t last = i == d - 1 ? L : L - (d - 1 - i);
    // The furthest end whose compute and static memory fit, then the furthest below it that fits in
    // full, by bisection (fitting is nearly monotone in the end; a greedy split only bounds from above).
    int64_t top = a;
    while (top < last && m * (cp[static_cast<size_t>(top + 1)] - cp[static_cast<size_t>(a)]) <= t &&
           pp[static_cast<size_t>(top + 1)] - pp[static_cast<size_t>(a)] <= most_params)
      ++top;
    auto fits = [&](int64_t e) {
      const auto q = detail::quick_price(model, pc, i, a, e);
      return q.feasible && q.step_ms <= t;
    };
    int64_t pick = -1;
    if (i == d - 1) {
      if (top == L && fits(L)) pick = L;
    } else if (top > a && fits(a + 1)) {
      pick = detail::last_true(a + 1, top, fits);
    }
    if (pick < 0) return {};
    bounds.push_back(pick);
    a = pick;
  }
  return bounds;
}

}  // namespace

// step_objective of `bounds`, priced through pc.
double objective_of(const CostModel& model, const detail::PreparedCandidate& pc, const std::vector<int64_t>& bounds) {
  std::vector<StageCost> stages;
  for (int64_t i = 0; i < pc.candidate.depth; ++i)
    stages.push_back(detail::price_stage(model, pc, i, bounds[static_cast<size_t>(i)], bounds[static_cast<size_t>(i + 1)]));
  return step_objective(pc.candidate, stages);
}

bool GreedyThreshold::attempt(const CostModel& model, const detail::PreparedCandidate& pc, double t) {
  auto split = greedy_split(model, pc, t, most_params_);
  if (split.empty()) return false;
  out_.bounds = std::move(split);
  return true;
}

// Without a threshold every stage is as long as memory allows: when even that finds no split, no
// threshold will (up to the rare stage that fits only when shorter), and the doublings are saved. Then
// the threshold doubles from the average stage's compute until a greedy split fits, giving up past
// `known` or after 40 doublings, and a bisection narrows it to 1e-3. A doubling that stopped at a failed
// threshold above one `known` goes on from there for a larger one: the thresholds tried are those of a
// run from scratch with it.
Split GreedyThreshold::at_most(const CostModel& model, const detail::PreparedCandidate& pc, double known) {
  if (state_ == State::fresh) {
    most_params_ = model.static_factors(pc.candidate.schedule).most_params_within(static_cap_);
    if (!attempt(model, pc, kInfinity)) {
      state_ = State::none;
    } else {
      const auto& cp = model.compute_prefix(pc.candidate.microbatch_index);
      lo_ = hi_ = static_cast<double>(pc.candidate.microbatches) * cp.back() / static_cast<double>(pc.candidate.depth);
      state_ = State::doubling;
    }
  }
  if (state_ == State::doubling) {
    while (true) {
      if (!failed_) {
        if (attempt(model, pc, hi_)) break;
        failed_ = true;  // attempt(hi_) failed and counted
        if (++doublings_ > 40) {
          state_ = State::none;
          break;
        }
      }
      if (hi_ > known) return {};  // the same threshold is tested again against a larger `known`
      hi_ *= 2.0;
      failed_ = false;
    }
    if (state_ == State::doubling) finish(model, pc);
  }
  return state_ == State::found ? out_ : Split{};
}

void GreedyThreshold::finish(const CostModel& model, const detail::PreparedCandidate& pc) {
  for (int it = 0; it < 10 && hi_ - lo_ > 1e-3 * hi_; ++it) {
    const double mid = 0.5 * (lo_ + hi_);
    (attempt(model, pc, mid) ? hi_ : lo_) = mid;
  }
  out_.step_ms = lanes_only_ ? hi_ : objective_of(model, pc, out_.bounds);
  state_ = State::found;
}

Split greedy_of(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap, double known,
                bool lanes_only) {
  return GreedyThreshold(static_cap, lanes_only).at_most(model, pc, known);
}

// An upper bound on the optimum from greedy_of, never above `known` (the DP's work grows with the gap
// between its bound and the optimum, and a greedy run is cheap).
double greedy_bound(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap, double known,
                    bool lanes_only) {
  return std::min(known, greedy_of(model, pc, static_cap, known, lanes_only).step_ms);
}

}  // namespace pd2bw::planner::detail

namespace pd2bw::planner {

// One threshold per candidate, each behind its own lock (a search asks for each candidate from one thread
// at a time, but nothing else depends on that).
struct GreedyMemo::Impl {
  struct Entry {
    std::mutex mutex;
    std::optional<detail::GreedyThreshold> threshold;
  };
  std::mutex mutex;
  std::map<std::tuple<Schedule, int64_t, int64_t, int64_t, Placement, int64_t, int64_t>, std::unique_ptr<Entry>> entries;

  detail::GreedyThreshold* entry(const Candidate& c, int64_t static_cap, std::unique_lock<std::mutex>& lock) {
    Entry* e = nullptr;
    {
      const std::lock_guard<std::mutex> guard(mutex);
      auto& slot = entries[{c.schedule, c.microbatch_index, c.depth, c.width, c.placement, c.microbatches, c.chunks}];
      if (!slot) slot = std::make_unique<Entry>();
      e = slot.get();
    }
    lock = std::unique_lock<std::mutex>(e->mutex);
    if (!e->threshold) e->threshold.emplace(static_cap, false);
    return &*e->threshold;
  }
};

GreedyMemo::GreedyMemo() : impl_(std::make_unique<Impl>()) {}
GreedyMemo::~GreedyMemo() = default;

detail::GreedyEntry::GreedyEntry(GreedyMemo* memo, const Candidate& c, int64_t static_cap) {
  if (memo == nullptr) {
    threshold_ = &own_.emplace(static_cap, false);
    return;
  }
  threshold_ = memo->impl().entry(c, static_cap, lock_);
}

}  // namespace pd2bw::planner

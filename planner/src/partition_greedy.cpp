// Greedy splits (each stage as long as a busy-time threshold allows): the DP's first upper bound.
#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "bisect.hpp"
#include "candidate_key.hpp"
#include "chunk_price.hpp"
#include "objective.hpp"
#include "partition_internal.hpp"
#include "prepared.hpp"

namespace pd2bw::planner::detail {

namespace {

// A greedy split at busy-time threshold t (each stage as long as allowed), and what it says of other
// thresholds when stage busy times grow with their ends: with a split, `most` (its busiest stage's time,
// at which the greedy finds the same split); without one, `next` (no threshold below it finds a split: the
// least of each walked stage's time with one more layer, or of what the layers left need per stage).
struct GreedyRun {
  std::vector<int64_t> bounds;  // empty: none at t
  double most = 0.0, next = kInfinity;
};

// Whether the run's test of the layers left passes at stage i: each stage that fits has m times its
// compute within t (its busy time is at least that), so when the layers left need more than the d - i
// stages left can hold, no split follows (the slack covers the rounding of the prefix differences).
bool room_left(double left, int64_t d, int64_t i, double t) {
  return !(left > static_cast<double>(d - i) * t * (1.0 + 1e-9));
}

// The greedy split at t, each stage found in `trace` when the one recorded for its position starts where
// it does and repeats at t (GreedyStage), and each stage it walks recorded there.
// `most_params`: the most parameter bytes a stage's static memory allows (static_bytes(schedule, a, e) <=
// the static cap exactly when the parameter bytes of [a, e) are at most this).
GreedyRun greedy_split(const CostModel& model, const detail::PreparedCandidate& pc, double t, int64_t most_params,
                       std::vector<GreedyStage>& trace) {
  const int64_t L = model.num_layers();
  const int64_t d = pc.candidate.depth;
  const auto& cp = model.compute_prefix(pc.candidate.microbatch_index);
  const auto& pp = model.param_prefix();
  const double m = static_cast<double>(pc.candidate.microbatches);
  GreedyRun run;
  run.bounds.reserve(static_cast<size_t>(d) + 1);  // the memo keeps the split found: no spare capacity
  run.bounds.push_back(0);
  auto fail = [&run] {
    run.bounds.clear();
    return std::move(run);
  };
  trace.resize(static_cast<size_t>(d));
  int64_t a = 0;
  for (int64_t i = 0; i < d; ++i) {
    const int64_t last = i == d - 1 ? L : L - (d - 1 - i);
    const double left = m * (cp[static_cast<size_t>(L)] - cp[static_cast<size_t>(a)]);
    if (!room_left(left, d, i, t)) {
      run.next = std::min(run.next, left / static_cast<double>(d - i));
      return fail();
    }
    GreedyStage& seen = trace[static_cast<size_t>(i)];
    if (seen.start == a && seen.lo <= t && t < seen.hi) {
      run.most = std::max(run.most, seen.picked);
      run.next = std::min(run.next, seen.hi);
      run.bounds.push_back(seen.end);
      a = seen.end;
      continue;
    }
    // The furthest end whose compute and static memory fit (both prefixes grow with the end), then the
    // furthest below it that fits in full, by bisection (fitting is nearly monotone in the end; a greedy
    // split only bounds from above).
    auto prefix_fits = [&](int64_t e) {
      return m * (cp[static_cast<size_t>(e)] - cp[static_cast<size_t>(a)]) <= t &&
             pp[static_cast<size_t>(e)] - pp[static_cast<size_t>(a)] <= most_params;
    };
    const int64_t top = detail::gallop(a, last, prefix_fits);
    // The stage one layer past the greedy's end: its compute alone past `top`, its priced time below it
    // (every probe is at or below `top`).
    double grown = top == last || pp[static_cast<size_t>(top + 1)] - pp[static_cast<size_t>(a)] > most_params
                       ? kInfinity
                       : m * (cp[static_cast<size_t>(top + 1)] - cp[static_cast<size_t>(a)]);
    double picked = 0.0;  // the time of the longest stage that fits
    double lo = m * (cp[static_cast<size_t>(top)] - cp[static_cast<size_t>(a)]);  // every test passed below
    int64_t longest = a;
    auto fits = [&](int64_t e) {
      const auto q = detail::quick_price(pc, i, a, e);
      const bool ok = q.feasible && q.step_ms <= t;
      if (ok) lo = std::max(lo, q.step_ms);
      if (ok && e > longest) {
        longest = e;
        picked = q.step_ms;
      } else if (!ok) {
        grown = std::min(grown, q.feasible ? q.step_ms : kInfinity);
      }
      return ok;
    };
    int64_t pick = -1;
    if (i == d - 1) {
      if (top == L && fits(L)) pick = L;
    } else if (top > a && fits(a + 1)) {
      pick = detail::last_true(a + 1, top, fits);
    }
    run.next = std::min(run.next, grown);
    if (pick < 0) return fail();
    run.most = std::max(run.most, picked);
    run.bounds.push_back(pick);
    seen = {a, pick, lo, grown, picked};
    a = pick;
  }
  return run;
}

}  // namespace

std::vector<int64_t> greedy_split_at(const CostModel& model, const detail::PreparedCandidate& pc, double t,
                                     int64_t static_cap, std::vector<GreedyStage>* trace) {
  const int64_t most_params = model.static_factors(pc.candidate.schedule).most_params_within(static_cap);
  std::vector<GreedyStage> fresh;
  return greedy_split(model, pc, t, most_params, trace ? *trace : fresh).bounds;
}

// step_objective of `bounds`, priced through pc (without the memory breakdowns, which it does not read).
double objective_of(const detail::PreparedCandidate& pc, const std::vector<int64_t>& bounds, double cutoff) {
  if (pc.candidate.chunks == 1) {  // folded as each stage is priced, with no StageCosts built
    // The layers before stage k hold at least their fwd + bwd (less the W's with a split backward).
    auto before = [&](int64_t k) {
      const auto a = static_cast<size_t>(bounds[static_cast<size_t>(k)]);
      return Prefix(pc.split_backward() ? pc.compute[a] - pc.weight[a] : pc.compute[a]);
    };
    return folded_objective(
        pc.candidate, pc.candidate.depth,
        [&](int64_t k) {
          return detail::quick_price(pc, k, bounds[static_cast<size_t>(k)], bounds[static_cast<size_t>(k + 1)]);
        },
        cutoff, before);
  }
  std::vector<StageCost> stages;
  stages.reserve(static_cast<size_t>(pc.candidate.depth));
  for (int64_t i = 0; i < pc.candidate.depth; ++i)
    stages.push_back(detail::stage_times(
        detail::quick_price(pc, i, bounds[static_cast<size_t>(i)], bounds[static_cast<size_t>(i + 1)])));
  return step_objective(pc.candidate, stages);
}

bool GreedyThreshold::attempt(const CostModel& model, const detail::PreparedCandidate& pc, double t) {
  GreedyRun run = greedy_split(model, pc, t, most_params_, trace_);
  if (run.bounds.empty()) {
    lo_ = std::max({lo_, t, run.next});  // no threshold below run.next finds a split (nor t itself)
    return false;
  }
  most_ = run.most;
  out_.bounds = std::move(run.bounds);
  return true;
}

// Without a threshold every stage is as long as memory allows: when even that finds no split, no
// threshold will (up to the rare stage that fits only when shorter), and the doublings are saved. Then
// the threshold doubles from the average stage's compute (or jumps to the least one a failed run leaves
// possible) until a greedy split fits, giving up past `known` or after 40 doublings, and a bisection
// narrows it to 1e-3: a split found lowers the top to its busiest stage, a failed run raises the bottom
// to its `next`. A doubling that stopped at a failed threshold above one `known` goes on from there for a
// larger one: the thresholds tried are those of a run from scratch with it.
Split GreedyThreshold::at_most(const CostModel& model, const detail::PreparedCandidate& pc, double known) {
  Split out = search(model, pc, known);
  trace_ = std::vector<GreedyStage>();  // `= {}` would keep the capacity: every memo entry would hold d stages
  return out;
}

std::optional<Split> GreedyThreshold::settled() const {
  if (state_ == State::found) return out_;
  if (state_ == State::none) return Split{};
  return std::nullopt;
}

Split GreedyThreshold::search(const CostModel& model, const detail::PreparedCandidate& pc, double known) {
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
      hi_ = std::max(2.0 * hi_, lo_);
      failed_ = false;
    }
    if (state_ == State::doubling) finish(model, pc);
  }
  return state_ == State::found ? out_ : Split{};
}

void GreedyThreshold::finish(const CostModel& model, const detail::PreparedCandidate& pc) {
  hi_ = most_;  // the doubling's split
  for (int it = 0; it < 10 && hi_ - lo_ > 1e-3 * hi_; ++it)
    if (attempt(model, pc, 0.5 * (lo_ + hi_))) hi_ = most_;  // a failure raises lo_
  out_.step_ms = lanes_only_ ? hi_ : objective_of(pc, out_.bounds);
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
    std::optional<detail::GreedySlot> slot;
  };
  std::mutex mutex;
  std::map<detail::CandidateKey, std::unique_ptr<Entry>> entries;

  detail::GreedySlot* entry(const Candidate& c, int64_t static_cap, std::unique_lock<std::mutex>& lock) {
    Entry* e = nullptr;
    {
      const std::lock_guard<std::mutex> guard(mutex);
      auto& slot = entries[detail::candidate_key(c)];
      if (!slot) slot = std::make_unique<Entry>();
      e = slot.get();
    }
    lock = std::unique_lock<std::mutex>(e->mutex);
    if (!e->slot) e->slot.emplace(static_cap);
    return &*e->slot;
  }
};

GreedyMemo::GreedyMemo() : impl_(std::make_unique<Impl>()) {}
GreedyMemo::~GreedyMemo() = default;

detail::GreedyEntry::GreedyEntry(GreedyMemo* memo, const Candidate& c, int64_t static_cap) {
  if (memo == nullptr) {
    slot_ = &own_.emplace(static_cap);
    return;
  }
  slot_ = memo->impl().entry(c, static_cap, lock_);
}

}  // namespace pd2bw::planner

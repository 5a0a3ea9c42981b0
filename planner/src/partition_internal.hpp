// What the partitioner's files share: the windows on each stage's start and end under a bound
// (partition_windows.cpp) and the greedy splits that give the DP its first bound (partition_greedy.cpp).
// Private to the planner.
#pragma once

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "pd2bw/planner/partition.hpp"
#include "prepared.hpp"

namespace pd2bw::planner::detail {

// Where each stage may start and end for splits whose objective is <= bound: hi(i, a) is the furthest
// end of stage i starting at a (its compute cap and static memory), and start_lo / start_hi bound the
// starts from which the later stages can still reach the last layer / that the earlier stages can reach.
struct Windows {
  std::vector<double> caps;
  int64_t max_params = 0;
  std::vector<int64_t> start_lo, start_hi;
  const std::vector<double>* cp = nullptr;
  const std::vector<int64_t>* pp = nullptr;

  int64_t hi(int64_t i, int64_t a) const {
    const auto& c = *cp;
    const auto by_compute = std::upper_bound(c.begin() + a, c.end(), c[static_cast<size_t>(a)] + caps[static_cast<size_t>(i)]);
    const auto& p = *pp;
    const auto by_memory = std::upper_bound(p.begin() + a, p.end(), p[static_cast<size_t>(a)] + max_params);
    return std::min(by_compute - c.begin(), by_memory - p.begin()) - 1;
  }
  // Smallest start of stage i ending at e.
  int64_t lo(int64_t i, int64_t e) const {
    const auto& c = *cp;
    const auto by_compute = std::lower_bound(c.begin(), c.begin() + e, c[static_cast<size_t>(e)] - caps[static_cast<size_t>(i)]);
    const auto& p = *pp;
    const auto by_memory = std::lower_bound(p.begin(), p.begin() + e, p[static_cast<size_t>(e)] - max_params);
    return std::max(by_compute - c.begin(), by_memory - p.begin());
  }
};

// Windows::hi for the starts of each stage visited in increasing order (as the split tables visit them):
// the same values, found by moving two cursors forward (a start's bounds never fall below the previous
// start's, the prefix sums never falling) instead of two binary searches per start.
class HiSweep {
 public:
  explicit HiSweep(const Windows& w) : w_(w) {}
  int64_t operator()(int64_t i, int64_t a) {
    if (i != stage_ || a < start_) {
      stage_ = i;
      by_compute_ = by_memory_ = a;
    }
    start_ = a;
    const auto& c = *w_.cp;
    const auto& p = *w_.pp;
    const auto n = static_cast<int64_t>(c.size());
    const double c_top = c[static_cast<size_t>(a)] + w_.caps[static_cast<size_t>(i)];
    const int64_t p_top = p[static_cast<size_t>(a)] + w_.max_params;
    by_compute_ = std::max(by_compute_, a);
    while (by_compute_ < n && !(c_top < c[static_cast<size_t>(by_compute_)])) ++by_compute_;
    by_memory_ = std::max(by_memory_, a);
    while (by_memory_ < static_cast<int64_t>(p.size()) && !(p_top < p[static_cast<size_t>(by_memory_)])) ++by_memory_;
    return std::min(by_compute_, by_memory_) - 1;
  }

 private:
  const Windows& w_;
  int64_t stage_ = -1, start_ = 0, by_compute_ = 0, by_memory_ = 0;
};

// Windows for `bound`; nullopt when no split can fit them (partition_windows.cpp).
std::optional<Windows> make_windows(const CostModel& model, const detail::PreparedCandidate& pc, double bound,
                                    int64_t static_cap, bool use_caps, bool lanes_only);

// step_objective of `bounds`, priced through pc (partition_greedy.cpp). Below `cutoff` it is the
// objective; where the objective is at or above it, possibly only a lower bound at or above it
// (folded_objective), for a caller that compares it with `cutoff` alone.
double objective_of(const detail::PreparedCandidate& pc, const std::vector<int64_t>& bounds, double cutoff = kInfinity);

// Of the splits of `c` (a 2bw candidate) whose lanes are all at most bound_ms, the one of least objective
// with 2bw's steady cycles (objective.hpp's TwoBwCycleFold: stages of t at most tau_low, ms per
// microbatch, are charged it, the others bound_ms / m), which no split's replay is below; step_ms is that
// objective. Infeasible when there is none (then every split replays above bound_ms), or for another
// schedule or an infinite bound; exhausted when its dynamic program runs out of `max_work`.
Split two_bw_cycle_split(const CostModel& model, const Candidate& c, double bound_ms, double tau_low, int64_t max_work);

// Flush's tiered split (partition_tiered.cpp): of the splits whose stages k <= d - m (their warm-up covers
// the step) hold r times the compute of each later stage, for a few r > 1, the one of least objective.
// Infeasible when none fits, or when the candidate is not flush or d < m leaves no such stage.
Split tiered_split(const CostModel& model, const detail::PreparedCandidate& pc);
// The splits a flush candidate's search starts from where its dynamic program runs out of work: the greedy
// one and the tiered one, those that fit (none for another schedule); `memo` (may be null) as best_split's.
std::vector<Split> flush_stand_ins(const CostModel& model, const Candidate& c, GreedyMemo* memo);

// The greedy split at the least busy-time threshold that has one, and the upper bound it gives, never
// above `known` (partition_greedy.cpp).
Split greedy_of(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap, double known,
                bool lanes_only = false);

// One stage of a greedy run (at position i, from layer `start`), and the thresholds its walk repeats at:
// every test the stage made (the compute of its end and of one layer more, the priced ends it probed) has
// the same answer at any threshold in [lo, hi), so a run there whose stage i starts at `start` ends it at
// `end` again without a test.
struct GreedyStage {
  int64_t start = -1, end = 0;  // start -1: none recorded
  double lo = 0, hi = 0;        // hi: the stage's `grown` (see GreedyRun)
  double picked = 0;            // its priced time
};

// The split a greedy run finds at busy-time threshold t (each stage as long as its busy time within t
// and its memory allow), or empty (partition_greedy.cpp). GreedyThreshold searches t for the least.
// `trace`, when given, holds per position the last stage walked there by runs before (with the same model
// and candidate): the stages that repeat are taken from it, with the same split as a run from scratch.
std::vector<int64_t> greedy_split_at(const CostModel& model, const detail::PreparedCandidate& pc, double t,
                                     int64_t static_cap, std::vector<GreedyStage>* trace = nullptr);

// greedy_of for one candidate asked with several `known`s: at_most(model, pc, known) == greedy_of(model, pc,
// static_cap, known, lanes_only), each threshold tried once over all the calls, which must pass the same
// model and candidate (partition_greedy.cpp). Not thread-safe.
class GreedyThreshold {
 public:
  GreedyThreshold(int64_t static_cap, bool lanes_only) : static_cap_(static_cap), lanes_only_(lanes_only) {}
  Split at_most(const CostModel& model, const detail::PreparedCandidate& pc, double known);
  // What at_most returns from now on, whatever `known`, once a call has settled it (a split found, or
  // none); nullopt before: no call so far ran to the end.
  std::optional<Split> settled() const;

 private:
  // greedy_split at t into out_.bounds and most_; whether it found one (if not, lo_ rises to what the run
  // rules out).
  bool attempt(const CostModel& model, const detail::PreparedCandidate& pc, double t);
  Split search(const CostModel& model, const detail::PreparedCandidate& pc, double known);  // at_most's work
  // The stages of the last run within one at_most call (emptied when it returns: a memo holds thousands).
  std::vector<GreedyStage> trace_;
  // The bisection once a threshold has a split, and the result's step.
  void finish(const CostModel& model, const detail::PreparedCandidate& pc);
  enum class State { fresh, doubling, found, none };
  int64_t static_cap_;
  int64_t most_params_ = -1;  // MemoryFactors::most_params_within(static_cap_), found on the first call
  bool lanes_only_;
  State state_ = State::fresh;
  double lo_ = 0, hi_ = 0;  // no threshold below lo_ finds a split; hi_: the threshold tried last in doubling, then
                            // the busiest stage of the split found at the least one
  double most_ = 0;         // the busiest stage of the last split found
  int doublings_ = 0;
  bool failed_ = false;  // attempt(hi_) was made and failed
  Split out_;
};

// A dynamic program that ran out of work: under `bound`, with or without a split known under it
// (has_split), `max_work` was not enough. The work a program needs for a given bound depends on nothing
// else (SplitTables), so any budget up to max_work runs out there again.
struct RanOut {
  double bound = 0;
  bool has_split = false;
  int64_t max_work = 0;
};

// What a search keeps of one candidate's greedy-like splits: its GreedyThreshold and flush's tiered split
// (made on first use), and where its dynamic program last ran out of work (best_split's replay rounds ask
// again under the same bound: a greedy split below both bounds is the program's bound both times).
struct GreedySlot {
  explicit GreedySlot(int64_t static_cap) : threshold(static_cap, false) {}
  GreedyThreshold threshold;
  std::optional<Split> tiered;
  std::optional<RanOut> ran_out;
};

// The GreedySlot for candidate `c`: the memo's, locked while this lives, or without a memo its own
// (partition_greedy.cpp). Every call must pass the model and candidate it was made for.
class GreedyEntry {
 public:
  GreedyEntry(GreedyMemo* memo, const Candidate& c, int64_t static_cap);
  Split at_most(const CostModel& model, const detail::PreparedCandidate& pc, double known) {
    return slot_->threshold.at_most(model, pc, known);
  }
  // min(at_most(model, pc, kInfinity), tiered(model, pc)).step_ms where earlier calls on this slot
  // settled both (greedy_step_ms on a memo that has them: nothing to price); nullopt otherwise.
  std::optional<double> settled_step_ms() const {
    const auto greedy = slot_->threshold.settled();
    if (!greedy || !slot_->tiered) return std::nullopt;
    return std::min(greedy->step_ms, slot_->tiered->step_ms);
  }
  // tiered_split(model, pc), computed once per slot.
  const Split& tiered(const CostModel& model, const detail::PreparedCandidate& pc) {
    if (!slot_->tiered) slot_->tiered = tiered_split(model, pc);
    return *slot_->tiered;
  }
  // Whether the candidate's dynamic program is known to run out of `max_work` under `bound` (RanOut).
  bool runs_out(double bound, bool has_split, int64_t max_work) const {
    const auto& r = slot_->ran_out;
    return r && r->bound == bound && r->has_split == has_split && max_work <= r->max_work;
  }
  void record_run_out(double bound, bool has_split, int64_t max_work) {
    slot_->ran_out = RanOut{bound, has_split, max_work};
  }

 private:
  std::optional<GreedySlot> own_;
  std::unique_lock<std::mutex> lock_;
  GreedySlot* slot_ = nullptr;
};

double greedy_bound(const CostModel& model, const detail::PreparedCandidate& pc, int64_t static_cap, double known,
                    bool lanes_only = false);

}  // namespace pd2bw::planner::detail

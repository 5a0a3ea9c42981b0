// The replay search: the simulator's steady step decides. Each candidate replays its best split by the
// objective and then, inside its budget, every split whose objective (a lower bound on its replay) is
// below the best replay so far; across candidates, every one whose objective could still beat the best
// replay is replayed in rounds. The per-candidate search depends on its candidate alone, so the winner
// depends neither on top_k nor on the thread count.
#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <set>

#include "parallel.hpp"
#include "partition_internal.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "replays.hpp"
#include "search_internal.hpp"

namespace pd2bw::planner::detail {

namespace {

// The simulator's input for e's split, with the recompute its stages were priced with.
SimInput replay_input(const CostModel& model, const Evaluated& e) {
  std::vector<bool> recompute;
  for (const auto& st : e.stages) recompute.push_back(st.recompute);
  return make_sim_input(model, e.candidate, e.split.bounds, recompute, default_sim_steps(e.candidate.schedule));
}

}  // namespace

int64_t replay_into(const CostModel& model, Evaluated& e) {
  const SimResult sim = simulate_steady(replay_input(model, e), false, true);
  e.analytic_step_ms = e.split.step_ms;
  e.step_ms = sim.step_ms;
  e.bubble_fraction = sim.bubble_fraction;
  e.imbalance_fraction = sim.imbalance_fraction;
  e.steady = sim.steady;
  e.breakdown = StepBreakdown{};
  const double n = static_cast<double>(sim.stages.size());
  for (const auto& s : sim.stages) {
    e.breakdown.compute_ms += s.compute_ms / n;
    e.breakdown.p2p_ms += s.p2p_ms / n;
    e.breakdown.allreduce_ms += s.allreduce_ms / n;
    e.breakdown.update_ms += s.update_ms / n;
    e.breakdown.idle_ms += s.idle_ms / n;
  }
  // The replay budgets (replay_candidate's walks) count a replay that one step proved periodic as the
  // default replay it stands for, so that which splits a walk reaches does not depend on the shortcut.
  const auto steps = static_cast<int64_t>(sim.step_end_ms.size());
  return steps == 1 ? sim.simulated_ops * default_sim_steps(e.candidate.schedule) : sim.simulated_ops;
}

namespace {

// Replayed ops an exact search inside one candidate may spend, and those its search within
// kReplayTolerance may (searches stop there and say how close they got).
constexpr int64_t kExactReplayOps = int64_t{1} << 21;
constexpr int64_t kToleranceReplayOps = int64_t{1} << 23;
constexpr int64_t kWalkNodes = int64_t{1} << 16;  // partial splits one walk over the splits may visit
// The objective is a lower bound on the replay in exact arithmetic; both are sums in different orders, so
// comparisons between them allow this relative slack (a tie is replayed rather than missed).
constexpr double kRounding = 1e-9;

// The work 2bw's cycle-split programs may do, each and in all (SplitTables' units, 2-3 ns each): their
// fold keeps three numbers, so their tables hold more states than the lanes' one (6-40 million each at
// 2,000 layers on 512 and 4,096 GPUs).
constexpr int64_t kCycleSplitWork = int64_t{1} << 26, kCycleSplitsWork = int64_t{1} << 27;

// Walks the splits of `c` whose objective is <= limit_of(best replay), replaying each once (`seen`), and
// keeps the best in `win`. Returns whether every such split was replayed within `ops` replayed ops.
template <class Limit>
bool replay_walk(const CostModel& model, const Candidate& c, Evaluated& win, std::set<std::vector<int64_t>>& seen,
                 int64_t ops, int64_t* replays, Limit&& limit_of) {
  bool stopped = false;
  const bool walked = for_each_split_within(model, c, limit_of(win.step_ms), kWalkNodes, [&](const Split& s) {
    if (!seen.insert(s.bounds).second) return limit_of(win.step_ms);
    if (ops <= 0) {
      stopped = true;
      return -1.0;
    }
    Evaluated e = evaluate_split(model, c, s);
    ops -= replay_into(model, e);
    ++*replays;
    if (e.step_ms < win.step_ms) win = std::move(e);  // ties keep the earlier one
    return limit_of(win.step_ms);
  });
  return walked && !stopped;
}

// 2bw's objective is its lanes, and at scale thousands of splits share the least busiest lane; their
// steady cycles (objective.hpp's TwoBwCycleFold) tell them apart. For each replayed 2bw candidate whose
// floor (its replay over 1 + its proven gap) is below the best replay by more than rounding, least floor
// first: the split of least cycle objective among those whose lanes are within the best replay is replayed
// (kept where faster), and that objective, below which no split of the candidate replays, raises its floor
// (also where the lanes' own program ran out of work: this one is bounded by the best replay, which it may
// finish under). The programs share kCycleSplitsWork in that order, kCycleSplitWork each at most, so what
// is learnt does not depend on the thread count; one that runs out teaches nothing.
void replay_cycle_splits(const CostModel& model, Replays& replayed, int64_t* replays) {
  double best = kInfinity;
  std::vector<std::pair<double, size_t>> order;  // (floor, candidate)
  for (size_t idx : replayed.indices()) best = std::min(best, replayed[idx]->step_ms);
  auto below = [&](double floor) { return floor < best * (1.0 - kRounding); };  // not a mere tie
  for (size_t idx : replayed.indices()) {
    const Evaluated& r = *replayed[idx];
    const double floor = r.step_ms / (1.0 + r.proven_gap);
    if (r.candidate.schedule == Schedule::two_bw && r.proven_gap > 0 && below(floor)) order.push_back({floor, idx});
  }
  std::sort(order.begin(), order.end());
  int64_t work = kCycleSplitsWork;
  for (const auto& [floor, idx] : order) {
    if (!below(floor) || work <= 0) break;
    Evaluated r = *replayed[idx];
    // The charge for a cycle's first stage below the busiest: that stage's t (fastest links; added in the
    // fold's order, so that the busiest stage itself takes it).
    double busiest = 0.0;
    for (const StageCost& st : r.stages)
      busiest = std::max(busiest, (st.in_ms + st.forward_ms + st.out_ms) + (st.out_ms + st.backward_ms + st.in_ms));
    const Split s = two_bw_cycle_split(model, r.candidate, best, busiest, std::min(work, kCycleSplitWork));
    work -= s.work;
    if (s.exhausted) continue;
    const double cycles = s.feasible() ? s.step_ms : best;  // none within the best replay: all above it
    if (s.feasible() && s.bounds != r.split.bounds) {
      Evaluated e = evaluate_split(model, r.candidate, s);
      replay_into(model, e);
      ++*replays;
      if (e.step_ms < r.step_ms * (1.0 - kRounding)) {
        r = std::move(e);
      }
    }
    const double lower = std::max(floor, cycles);
    r.proven_gap = r.step_ms <= lower * (1.0 + kRounding) ? 0.0 : r.step_ms / lower - 1.0;
    best = std::min(best, r.step_ms);
    replayed.set(idx, std::move(r), replayed.from(idx));
  }
}

}  // namespace

Evaluated replay_candidate(const CostModel& model, const Candidate& c, const Split& best, double lower_ms,
                           int64_t* replays, GreedyMemo* memo) {
  Evaluated win = evaluate_split(model, c, best);
  const int64_t cost = replay_into(model, win);  // the others cost about as much
  ++*replays;
  // A chunked candidate's stand-in split was refined for its busiest rank, which need not replay faster
  // than the equal-compute split it started from: that one is replayed too.
  // Likewise a flush candidate's: the greedy and the tiered splits (partition_tiered.cpp), whichever of the
  // two its search did not keep, since the lesser objective need not replay faster.
  const std::vector<Split> others = !best.exhausted ? std::vector<Split>{}
                                    : c.chunks > 1  ? std::vector<Split>{balanced_split(model, c)}
                                                    : flush_stand_ins(model, c, memo);  // none but flush's
  for (const Split& start : others) {
    if (!start.feasible() || start.bounds == best.bounds) continue;
    Evaluated e = evaluate_split(model, c, start);
    replay_into(model, e);
    ++*replays;
    if (e.step_ms < win.step_ms) win = std::move(e);
  }
  // No split's objective, and so no split's replay, is below the optimum, or below lower_ms when the
  // optimum is not known.
  const double lower = best.exhausted ? lower_ms : best.step_ms;
  if (win.step_ms <= lower * (1.0 + kRounding)) return win;
  if (!best.exhausted) {
    // The objectives of zb-h2 (no round trips) and of the chunked schedules (the busiest rank) are looser,
    // so more of their splits fall below a replay: their walks get a smaller share of the budget.
    const int64_t share = c.chunks > 1 ? 32 : c.schedule == Schedule::zb_h2 ? 8 : 1;
    std::set<std::vector<int64_t>> seen{best.bounds};
    auto below = [](double s) { return s * (1.0 + kRounding); };
    if (cost * 64 <= kExactReplayOps / share &&
        replay_walk(model, c, win, seen, kExactReplayOps / share, replays, below))
      return win;
    auto within = [](double s) { return s / (1.0 + kReplayTolerance); };
    // A walk may replay a few splits whatever their size, but none when one replay passes the budget.
    const bool close = win.step_ms <= lower * (1.0 + kReplayTolerance);
    if (!close && cost <= kToleranceReplayOps &&
        replay_walk(model, c, win, seen, std::max(kToleranceReplayOps / share, 4 * cost), replays, within)) {
      win.proven_gap = std::min(kReplayTolerance, win.step_ms / lower - 1.0);
      return win;
    }
  }
  win.proven_gap = win.step_ms / lower - 1.0;
  return win;
}

namespace {

// Replayed ops the rounds of replay_search may spend in all (about 1.5 s): past them the candidates that
// could still win are counted in the proven gap by their objective instead.
constexpr int64_t kRoundReplayOps = int64_t{1} << 26;
constexpr int64_t kRoundSplitWork = int64_t{1} << 26, kLeastRoundWork = int64_t{1} << 10;

// Alternatives whose replay would take more ops than this are shown only if they are replayed anyway
// (because they could win): a replay of 2^23 ops takes about 0.2 s.
constexpr int64_t kShownReplayOps = int64_t{1} << 23;

// The ops a replay of `split` of `c` would take (estimated_replay_ops).
int64_t replay_ops(const CostModel& model, const Candidate& c, const Split& split) {
  return estimated_replay_ops(replay_input(model, evaluate_split(model, c, split)));
}

bool cheap_to_replay(const CostModel& model, const Candidate& c, const Split& split) {
  return replay_ops(model, c, split) <= kShownReplayOps;
}

}  // namespace

int64_t replay_ops_of(const CostModel& model, const Evaluated& e) {
  return estimated_replay_ops(replay_input(model, e));
}

namespace {

// The replayed candidates, best first: the top `keep` and the best of each schedule.
std::vector<Evaluated> rank(const Replays& replayed, size_t keep) {
  std::vector<size_t> idx = replayed.indices();
  std::sort(idx.begin(), idx.end(),
            [&](size_t a, size_t b) { return ranks_before(*replayed[a], a, *replayed[b], b); });
  std::vector<Evaluated> out;
  std::array<bool, kSchedules> seen{};
  for (size_t k = 0; k < idx.size(); ++k) {
    const auto s = static_cast<size_t>(replayed[idx[k]]->candidate.schedule);
    if (k < keep || !seen[s]) out.push_back(*replayed[idx[k]]);
    seen[s] = true;
  }
  return out;
}

// The kept finalists that were not replayed keep their rows by their objective, a lower bound on their
// replay, among `ranked` by step time: those too large to replay for a row (they cannot win, or they would
// have been replayed) and those the rounds' replay budget left out (the proven gap counts them).
void add_unreplayed(const CostModel& model, const SearchSpace& space, const std::vector<size_t>& finalists,
                    const Replays& replayed, std::vector<Evaluated>& ranked) {
  for (size_t k = 1; k < finalists.size(); ++k) {
    const size_t idx = finalists[k];
    if (replayed[idx] || !space.known[idx].split.feasible()) continue;
    Evaluated e = evaluate_split(model, space.candidates[idx], space.known[idx].split);
    e.unreplayed = true;
    const auto at = std::upper_bound(ranked.begin() + 1, ranked.end(), e.step_ms,
                                     [](double t, const Evaluated& x) { return t < x.step_ms; });
    ranked.insert(at, std::move(e));
  }
}

}  // namespace

void replay_search(const CostModel& model, SearchSpace& space, const std::vector<size_t>& finalists,
                   std::vector<Evaluated> representatives, const SearchOptions& options, SearchResult& result) {
  const auto& cands = space.candidates;
  Replays replayed(cands.size());
  auto replay_batch = [&](const std::vector<size_t>& batch) {
    std::vector<Evaluated> out(batch.size());
    std::vector<int64_t> counts(batch.size(), 0);
    for_each_in_parallel(batch.size(), options.threads, [&](size_t k) {
      const size_t idx = batch[k];
      // An exhausted split's replay is measured from its candidate's bound (unused otherwise).
      const double lower = space.known[idx].split.exhausted ? sharpened_bound(space, idx) : space.lower_bounds[idx];
      out[k] = replay_candidate(model, cands[idx], space.known[idx].split, lower, &counts[k], space.greedy.get());
      return true;
    });
    for (size_t k = 0; k < batch.size(); ++k) {
      replayed.set(batch[k], std::move(out[k]), space.known[batch[k]].split.bounds);
      result.replayed += counts[k];
    }
  };
  // The best finalist is replayed first; the others, only there to show the alternatives, when their
  // replay is cheap (kShownReplayOps). One that could still win is replayed in the rounds below anyway.
  std::vector<size_t> shown;
  for (size_t k = 0; k < finalists.size(); ++k)
    if (k == 0 || cheap_to_replay(model, cands[finalists[k]], space.known[finalists[k]].split)) shown.push_back(finalists[k]);
  replay_batch(shown);
  // Rounds: every candidate whose lower bound, and then whose best objective, does not pass the best
  // replay so far is replayed; the best replay only falls, so this ends. A candidate whose dynamic program
  // ran out of work is tried again whenever the best replay falls below the bound it was tried under (a
  // smaller bound needs less work), so what is known of each candidate is what the last bound gives; its
  // greedy split is replayed when its objective could still win.
  std::vector<size_t> position(cands.size(), 0);
  for (size_t pos = 0; pos < space.order.size(); ++pos) position[space.order[pos]] = pos;
  // The rounds may replay kRoundReplayOps in all: a batch keeps its candidates in the order of the search
  // (by lower bound) while their estimated replays fit what is left. The others are skipped for good and
  // counted in the proven gap by what is known of them below. The estimates depend on the candidates
  // alone, so which are skipped does not depend on timing or the thread count.
  std::vector<char> skipped(cands.size(), 0);
  // Likewise the dynamic programs the rounds run again (under a lower bound, which may now finish) share
  // kRoundSplitWork: a round's candidates take their work from what is left before the round in the
  // search's order (round_work; the work a given bound needs does not depend on anything else), and what
  // they spent is taken off after it; a candidate that would get less than kLeastRoundWork keeps what is
  // known of it.
  std::vector<char> given_up(cands.size(), 0);
  int64_t split_budget = kRoundSplitWork;
  int64_t budget = kRoundReplayOps;
  auto take_within_budget = [&](std::vector<size_t>& batch) {
    std::vector<size_t> taken;
    for (size_t idx : batch) {
      const int64_t ops = budget > 0 ? replay_ops(model, cands[idx], space.known[idx].split) : 0;
      if (budget > 0 && ops <= budget) {
        budget -= ops;
        taken.push_back(idx);
      } else {
        skipped[idx] = 1;
        budget = 0;  // later (cheaper) candidates are not taken either: the order stays the search's
      }
    }
    batch = std::move(taken);
  };
  double reach = kInfinity;
  while (true) {
    double best = kInfinity;
    for (size_t idx : replayed.indices()) best = std::min(best, replayed[idx]->step_ms);
    reach = best * (1.0 + kRounding);
    auto settled = [&](const BestKnown& k) {
      if (!k.computed) return false;
      if (k.split.exhausted) return k.bound <= reach;
      return k.split.feasible() || k.bound >= reach;
    };
    std::vector<size_t> wanting;
    std::vector<int64_t> wants;
    for (size_t idx : space.searched()) {
      if (space.lower_bounds[idx] > reach) break;
      const auto& k = space.known[idx];
      if (given_up[idx] || settled(k) || (replayed[idx] && !k.split.exhausted)) continue;
      wanting.push_back(idx);
      wants.push_back(std::max(k.work, split_work_at(position[idx], space.depth_rank[idx])));
    }
    const std::vector<int64_t> given = round_work(wants, split_budget);
    std::vector<size_t> unknown;
    std::vector<int64_t> work;
    for (size_t k = 0; k < wanting.size(); ++k) {
      if (given[k] < kLeastRoundWork && space.known[wanting[k]].computed) {  // what is known of it stays:
        given_up[wanting[k]] = 1;                                            // its greedy split, its bound
        continue;
      }
      unknown.push_back(wanting[k]);
      work.push_back(given[k]);
    }
    std::atomic<int64_t> evaluated{0};
    for_each_in_parallel(unknown.size(), options.threads, [&](size_t k) {
      const size_t idx = unknown[k];
      if (space.ruled_out(idx, reach)) {  // no split can come this low: none is <= reach
        space.known[idx] = {true, reach, Split{}};
      } else {
        space.known[idx] = {true, reach, best_split(model, cands[idx], reach, work[k], space.greedy.get()), work[k]};
        ++evaluated;
      }
      const auto& now = space.known[idx].split;
      // A replay stands while the search's split it started from does (a stand-in kept again).
      if (replayed[idx] && (!now.exhausted || replayed.from(idx) != now.bounds)) replayed.reset(idx);
      return true;
    });
    result.evaluated += evaluated;
    for (size_t idx : unknown) split_budget -= std::min(split_budget, space.known[idx].split.work);
    std::vector<size_t> batch;
    for (size_t idx : space.searched()) {
      if (space.lower_bounds[idx] > reach) break;
      const auto& k = space.known[idx];
      if (!replayed[idx] && !skipped[idx] && k.computed && k.split.feasible() && k.split.step_ms <= reach)
        batch.push_back(idx);
    }
    take_within_budget(batch);
    if (batch.empty()) break;
    replay_batch(batch);
  }
  replay_cycle_splits(model, replayed, &result.replayed);
  const size_t keep = static_cast<size_t>(std::max<int64_t>(options.top_k, 0) + 1);
  result.ranked = rank(replayed, keep);
  if (result.ranked.empty()) return;
  add_unreplayed(model, space, finalists, replayed, result.ranked);
  // Schedules still missing are shown by their representatives, replayed once, after the rest.
  for_each_in_parallel(representatives.size(), options.threads, [&](size_t k) {
    replay_into(model, representatives[k]);
    return true;
  });
  for (auto& r : representatives)
    if (std::none_of(result.ranked.begin(), result.ranked.end(),
                     [&](const Evaluated& e) { return e.candidate.schedule == r.candidate.schedule; })) {
      result.ranked.push_back(std::move(r));
      ++result.replayed;
    }
  const double win = result.ranked.front().step_ms;
  for (size_t idx : replayed.indices()) {  // the representatives' candidates are among these when they could win
    const Evaluated& r = *replayed[idx];
    result.proven_gap = std::max(result.proven_gap, win * (1.0 + r.proven_gap) / r.step_ms - 1.0);
  }
  if (result.unsearched.floor_ms < win)  // the left-out ones: search() adds them once bound_left_out is done
    result.proven_gap = std::max(result.proven_gap, win / result.unsearched.floor_ms - 1.0);
  // A coarse bound (sharpened_bound) is narrowed where it would widen the gap so far.
  auto gap_from_bound = [&](size_t idx) {
    if (win / space.lower_bounds[idx] - 1.0 > result.proven_gap)
      result.proven_gap = std::max(result.proven_gap, win / sharpened_bound(space, idx) - 1.0);
  };
  for (size_t idx : space.searched()) {  // skipped by the replay budget: the objective bounds its replays
    if (!skipped[idx] || replayed[idx]) continue;
    ++result.unreplayed;
    const auto& k = space.known[idx];
    if (k.split.exhausted)
      gap_from_bound(idx);
    else if (k.split.step_ms < win)
      result.proven_gap = std::max(result.proven_gap, win / k.split.step_ms - 1.0);
  }
  for (size_t idx : space.searched()) {  // unfinished and not replayed: only the lower bound is known
    if (space.lower_bounds[idx] > reach) break;
    if (!space.known[idx].split.exhausted) continue;
    // A coarse bound at or below reach whose bracket leaves the limit undecided is narrowed.
    if (space.tried && reach < (*space.tried)[idx].in_from && sharpened_bound(space, idx) > reach) continue;
    ++result.unproven;
    if (!replayed[idx]) gap_from_bound(idx);
  }
}

}  // namespace pd2bw::planner::detail

namespace pd2bw::planner {

void replay_evaluated(const CostModel& model, Evaluated& e) {
  detail::replay_into(model, e);
}

}  // namespace pd2bw::planner

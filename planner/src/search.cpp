// The search over candidates by the objective: enumerate, bound from below, evaluate the promising ones
// with the DP partitioner in order of their lower bounds, keep the best overall and the best of each
// schedule; then hand the finalists to the replay search (replay.cpp).
#include "pd2bw/planner/search.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <future>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <utility>

#include "chunk_price.hpp"
#include "parallel.hpp"
#include "partition_overage.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "prepared.hpp"
#include "search_internal.hpp"
#include "step_bound_order.hpp"

namespace pd2bw::planner {

namespace {

// The kept set: the best `keep` overall, and of the other entries the best of each schedule.
class Leaderboard {
 public:
  explicit Leaderboard(size_t keep) : keep_(keep) {}

  // The objective a candidate must not exceed to enter the kept `keep`. The threshold comes from exact
  // entries and from upper bounds (seeds) of other candidates; the two lists are kept apart so that no
  // candidate is counted twice.
  double bound() const {
    return std::min(kth(entries_.size(), [&](size_t i) { return entries_[i].e.step_ms; }),
                    kth(seeds_.size(), [&](size_t i) { return seeds_[i]; }));
  }

  // Records that some candidate has a split no slower than `upper_ms`.
  void seed(double upper_ms) {
    if (!(upper_ms < kInfinity)) return;
    seeds_.insert(std::upper_bound(seeds_.begin(), seeds_.end(), upper_ms), upper_ms);
  }

  // Whether an entry of step `step_ms` (an objective, the evaluated step to rounding) would leave the kept
  // ones at once: they are full and it is slower than the last of them by more than rounding.
  bool passes_over(double step_ms) const {
    return entries_.size() >= keep_ && step_ms > entries_[keep_ - 1].e.step_ms * (1.0 + 1e-6);
  }

  // Whether schedule s has an entry among the kept ones.
  bool has(Schedule s) const {
    const auto end = entries_.begin() + static_cast<std::ptrdiff_t>(std::min(keep_, entries_.size()));
    return std::any_of(entries_.begin(), end, [&](const Entry& x) { return x.e.candidate.schedule == s; });
  }

  void add(Evaluated e, size_t index) {
    Entry entry{std::move(e), index};
    auto pos = std::find_if(entries_.begin(), entries_.end(), [&](const Entry& x) {
      return detail::ranks_before(entry.e, entry.index, x.e, x.index);
    });
    entries_.insert(pos, std::move(entry));
    // Only the first `keep` are ever read (bound, has, kept): the rest go, with their stages.
    if (entries_.size() > keep_) entries_.pop_back();
  }

  // The candidate indices of the top `keep` entries, best first. Only these are exact whatever the
  // timing: an entry past them may have come in under a looser bound in one run and not in another.
  std::vector<size_t> kept() const {
    std::vector<size_t> out;
    for (size_t i = 0; i < std::min(keep_, entries_.size()); ++i) out.push_back(entries_[i].index);
    return out;
  }

 private:
  struct Entry {
    Evaluated e;
    size_t index;
  };
  template <class At>
  double kth(size_t size, At&& at) const {
    return size < keep_ ? kInfinity : at(keep_ - 1);
  }

  size_t keep_;
  std::vector<Entry> entries_;
  std::vector<double> seeds_;  // ascending
};

}  // namespace

Evaluated evaluate_split(const CostModel& model, const Candidate& c, const Split& split) {
  Evaluated e;
  e.candidate = c;
  e.split = split;
  if (c.chunks > 1) {
    e.stages = detail::ChunkPricer(model, c).price(split.bounds, &e.step_ms);
    e.split.step_ms = e.step_ms;
    return e;
  }
  const auto pc = detail::prepare(model, c);
  for (int64_t i = 0; i < c.depth; ++i)
    e.stages.push_back(
        detail::price_stage(pc, i, split.bounds[static_cast<size_t>(i)], split.bounds[static_cast<size_t>(i + 1)]));
  e.step_ms = e.split.step_ms = step_objective(c, e.stages);
  return e;
}

namespace {

// A schedule with no candidate in the kept set is represented by a replayed split of one of its
// candidates, so that every schedule searched has a row: of its most promising candidates by lower bound
// (the first kLooked, searched or not), the first kRepresentatives whose split with the least busiest-stage
// time replays in at most kRepresentativeOps, the one with the least objective. It is an upper bound on the
// schedule's best plan, and says so. Empty when the schedule has a kept candidate or no such split was found.
std::vector<Evaluated> representatives(const CostModel& model, const detail::SearchSpace& space,
                                       const Leaderboard& board) {
  constexpr int kRepresentatives = 3, kLooked = 16;
  constexpr int64_t kRepresentativeOps = int64_t{1} << 21;  // about 0.05 s of replay
  std::vector<Evaluated> out;
  for (Schedule s : searched_schedules(model)) {
    if (board.has(s)) continue;
    std::optional<Evaluated> best;
    int looked = 0, kept = 0;
    for (size_t idx : space.order) {
      const auto& c = space.candidates[idx];
      if (c.schedule != s) continue;
      if (space.lower_bounds[idx] == kInfinity || looked == kLooked || kept == kRepresentatives) break;
      ++looked;
      // Past the budget with one replica already: no split of it is needed to tell.
      if (replay_ops({c.schedule, c.depth, c.microbatches, 1, c.width, c.chunks}, 1) > kRepresentativeOps) continue;
      const Split split = balanced_split(model, c);
      if (!split.feasible()) continue;
      Evaluated e = evaluate_split(model, c, split);
      if (detail::replay_ops_of(model, e) > kRepresentativeOps) continue;
      ++kept;
      e.representative = true;
      if (!best || e.step_ms < best->step_ms) best = std::move(e);
    }
    if (best) out.push_back(std::move(*best));
  }
  return out;
}

// Evaluates the searched candidates from position `from` on: each whose lower bound and rules_out leave
// it a chance of the kept set gets its best split under the leaderboard's bound, with the work its
// position allows (split_work_at), and enters the leaderboard when it has one.
void evaluate_positions(const CostModel& model, const SearchOptions& options, detail::SearchSpace& space,
                        Leaderboard& board, size_t from, std::atomic<int64_t>& evaluated) {
  std::mutex board_mutex;
  const auto& lb = space.lower_bounds;
  detail::for_each_in_parallel(space.searched().size() - from, options.threads, [&](size_t k) {
    const size_t pos = from + k, idx = space.order[pos];
    if (lb[idx] == kInfinity) return false;
    const auto& c = space.candidates[idx];
    double bound = 0.0;
    {
      const std::lock_guard<std::mutex> lock(board_mutex);
      bound = board.bound();
    }
    if (lb[idx] > bound || space.ruled_out(idx, bound)) return true;
    ++evaluated;
    const int64_t work = detail::split_work_at(pos, space.depth_rank[idx]);
    Split split = best_split(model, c, bound, work, space.greedy.get());
    space.known[idx] = {true, bound, split, work};  // each index is written by one worker only
    if (!split.feasible()) return true;
    {
      const std::lock_guard<std::mutex> lock(board_mutex);
      if (board.passes_over(split.step_ms)) return true;  // not worth pricing in full: add() would drop it
    }
    Evaluated e = evaluate_split(model, c, split);
    const std::lock_guard<std::mutex> lock(board_mutex);
    board.add(std::move(e), idx);
    return true;
  });
}

// When nothing was found, the candidates whose reduced budget (split_work_at) found no split at all, for
// their greedy split does not fit, get the full budget in the search's order until one has a split: a
// search never calls a space infeasible that it did not prove so.
void force_one_split(const CostModel& model, detail::SearchSpace& space, Leaderboard& board, SearchResult& result) {
  for (size_t idx : space.searched()) {
    auto& k = space.known[idx];
    if (!k.computed || !k.split.exhausted || k.split.feasible() || k.work >= kSplitWork) continue;
    k = {true, k.bound, best_split(model, space.candidates[idx], k.bound, kSplitWork, space.greedy.get()), kSplitWork};
    ++result.evaluated;
    if (k.split.feasible()) {
      board.add(evaluate_split(model, space.candidates[idx], k.split), idx);
      return;
    }
  }
}

// Sets left.floor_ms to the least bound of the left-out candidates (least_refined_bound, under the ceiling
// the search gave them) and empties left.candidates.
void bound_left_out(const detail::SearchSpace& space, int64_t threads, LeftOut& left,
                    const std::atomic<double>* stop_at = nullptr) {
  if (left.candidates.empty()) return;
  left.floor_ms =
      detail::least_refined_bound(*space.bound, left.candidates, left.floor_ms, space.left_out_ceiling, threads, stop_at);
  left.candidates = std::vector<Candidate>();
}

// Moves the searched candidates to the front of `order` (which is by lower bound), keeping that order among
// them and among the rest: the first kMaxSearched, of which at most kMaxChunkedSearched chunked.
void choose_searched(const std::vector<Candidate>& candidates, const std::vector<double>& lb, std::vector<size_t>& order,
                     size_t& count) {
  std::vector<size_t> chosen, rest;
  size_t chunked = 0;
  // A search of the chunked schedules alone (one pinned) has no other candidates to make room for.
  const bool mixed = std::any_of(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.chunks == 1; });
  const size_t cap = mixed ? kMaxChunkedSearched : kMaxPinnedChunkedSearched;
  for (size_t idx : order) {
    const bool is_chunked = candidates[idx].chunks > 1;
    if (chosen.size() < kMaxSearched && lb[idx] < kInfinity && (!is_chunked || chunked < cap)) {
      chosen.push_back(idx);
      chunked += is_chunked ? 1 : 0;
    } else {
      rest.push_back(idx);
    }
  }
  count = chosen.size();
  order = std::move(chosen);
  order.insert(order.end(), rest.begin(), rest.end());
}

// Each candidate's cheap bound into lb: those options.share holds from there, the others computed (on
// options.threads, each thread with a copy of the bound: its memos are not all thread-safe, and the values
// do not depend on them) and added to it.
void cheap_bounds(const StepLowerBound& bound, const std::vector<Candidate>& candidates, const SearchOptions& options,
                  std::vector<double>& lb) {
  lb.assign(candidates.size(), 0.0);
  std::vector<size_t> missing;
  SearchShare* share = options.share.get();
  if (share) {
    const std::lock_guard<std::mutex> lock(share->mutex);
    for (size_t i = 0; i < candidates.size(); ++i) {
      const auto it = share->cheap.find(detail::candidate_key(candidates[i]));
      if (it != share->cheap.end())
        lb[i] = it->second;
      else
        missing.push_back(i);
    }
  } else {
    missing.resize(candidates.size());
    std::iota(missing.begin(), missing.end(), size_t{0});
  }
  const auto own_bound = [&] { return StepLowerBound(bound); };
  detail::for_each_in_parallel_with(missing.size(), options.threads, own_bound, [&](StepLowerBound& own, size_t k) {
    lb[missing[k]] = own(candidates[missing[k]]);
    return true;
  });
  if (!share) return;
  const std::lock_guard<std::mutex> lock(share->mutex);
  share->cheap.reserve(share->cheap.size() + missing.size());
  for (size_t i : missing) share->cheap.emplace(detail::candidate_key(candidates[i]), lb[i]);
}

// The search by the objective: fills `space` and returns the kept candidates' indices, best first, and
// the schedules' representatives.
std::pair<std::vector<size_t>, std::vector<Evaluated>> search_objective(const CostModel& model,
                                                                        const SearchOptions& options,
                                                                        detail::SearchSpace& space,
                                                                        SearchResult& result) {
  space.candidates = enumerate_candidates(model, &result.left_out);
  const auto& candidates = space.candidates;
  result.candidates = static_cast<int64_t>(candidates.size());
  std::shared_ptr<StepLowerBound::Shared> memos;
  if (options.share) {
    const std::lock_guard<std::mutex> lock(options.share->mutex);
    if (!options.share->bound_memos) options.share->bound_memos = std::make_shared<StepLowerBound::Shared>();
    memos = options.share->bound_memos;
  }
  StepLowerBound lower_bound(model, memos);
  auto& lb = space.lower_bounds;
  cheap_bounds(lower_bound, candidates, options, lb);
  if (options.share) space.greedy = options.share->greedy;
  auto& order = space.order;
  order.resize(candidates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lb[a] < lb[b]; });
  const auto keep = static_cast<size_t>(std::max<int64_t>(options.top_k, 0) + 1);
  Leaderboard board(keep);
  const auto seeded = detail::seed_candidates(candidates, order, lb, model.constraints().schedule.has_value());
  GreedyMemo* memo = space.greedy.get();
  for (double u : detail::greedy_objectives(model, candidates, seeded, options.threads, memo)) board.seed(u);
  // The first candidates of each group may fit no memory, or fit it only with poor greedy splits (deep
  // zb-h1: a ceiling 8 times the best one, and twice the search's time): the first candidates in the
  // search's order that can fit at all add `keep` more (a few greedy runs when the first of them fit).
  for (double u : detail::seeds_that_fit(model, lower_bound, candidates, order, lb, seeded, keep, options.threads, memo))
    board.seed(u);
  // The candidates under the seeds' bound get their finer bounds (refine_lower_bounds), and so do the
  // left-out points, where each one's own bound is above the common floor (bound_left_out, once the
  // search has its finalists: they only enter the proven gap).
  // What the refinement's tests showed of each candidate seeds the memo of ruled_out below. The
  // bisections stop at the coarse tolerance: the few bounds an answer reports are narrowed later
  // (sharpened_bound), and ruled_out decides the rest where the search asks.
  auto tried = std::make_shared<std::vector<StepLowerBound::RuleBracket>>(candidates.size());
  detail::refine_lower_bounds(lower_bound, candidates, lb, order, kMaxSearched, board.bound(), options.threads,
                              tried.get(), StepLowerBound::kCoarseTolerance);
  space.tried = tried;
  space.fine_bounds.assign(candidates.size(), std::numeric_limits<double>::quiet_NaN());
  space.bound = std::make_shared<const StepLowerBound>(lower_bound);
  space.left_out_ceiling = board.bound();
  choose_searched(candidates, lb, order, space.searched_count);
  space.depth_rank = detail::depth_ranks(candidates, order);
  space.known.resize(candidates.size());
  // Memoised as the interval of limits not yet decided (ruled out at or below out_to, not at or above
  // in_from); a candidate is tested by one worker at a time (the one evaluating it), so no lock is needed.
  space.ruled_out = [&space, bounds = std::make_shared<StepLowerBound>(lower_bound)](size_t idx, double limit) {
    return bounds->rules_out(space.candidates[idx], limit, (*space.tried)[idx]);
  };

  // Workers take candidates in bound order. The leaderboard's bounds only fall as entries arrive and
  // every pruning decision is exact, so the kept set does not depend on timing or worker count.
  std::atomic<int64_t> evaluated{0};
  for (size_t from = 0;;) {
    evaluate_positions(model, options, space, board, from, evaluated);
    if (board.kept().empty()) force_one_split(model, space, board, result);
    // Nothing fits among the searched ones (memory rules them out): the next kMaxSearched are searched.
    const size_t next = space.searched_count;
    if (!board.kept().empty() || next >= space.order.size() || space.lower_bounds[space.order[next]] == kInfinity)
      break;
    from = next;
    space.searched_count = std::min(space.order.size(), next + kMaxSearched);
  }
  result.evaluated += evaluated;
  result.searched = static_cast<int64_t>(space.searched_count);
  // Past the searched ones (choose_searched), candidates are only summed up (result.unsearched); in the
  // order of their coarse bounds, each one below the floor so far is sharpened.
  for (size_t pos = space.searched_count; pos < order.size() && lb[order[pos]] < kInfinity; ++pos) {
    ++result.unsearched.count;
    if (lb[order[pos]] < result.unsearched.floor_ms)
      result.unsearched.floor_ms = std::min(result.unsearched.floor_ms, detail::sharpened_bound(space, order[pos]));
  }
  return {board.kept(), representatives(model, space, board)};
}

}  // namespace

std::shared_ptr<SearchShare> make_search_share() {
  return std::make_shared<SearchShare>();
}

SearchResult objective_search(const CostModel& model, const SearchOptions& options) {
  SearchResult result;
  detail::SearchSpace space;
  for (size_t idx : search_objective(model, options, space, result).first)
    result.ranked.push_back(evaluate_split(model, space.candidates[idx], space.known[idx].split));
  bound_left_out(space, options.threads, result.left_out);
  return result;
}

SearchResult search(const CostModel& model, const SearchOptions& options) {
  SearchResult result;
  detail::SearchSpace space;
  const auto [finalists, stand_ins] = search_objective(model, options, space, result);
  if (finalists.empty())
    result.left_out.not_ruled_out = detail::first_not_ruled_out(*space.bound, result.left_out.candidates);
  // The left-out candidates' floor only enters the proven gap, and only below the winner's step: with more
  // than one thread it is found beside the replays (the winner's replay runs alone on one) and stops at the
  // winner's step once that is known; with one, after them. Either way it is exact below the winner's step
  // and the winner's step otherwise, whatever the timing.
  LeftOut left = std::move(result.left_out);
  if (!options.bound_left_out && !left.candidates.empty()) {
    left.floor_ms = 0.0;
    left.candidates = std::vector<Candidate>();
  }
  std::atomic<double> stop_at{kInfinity};
  auto winner_ms = [&] { return result.ranked.empty() ? kInfinity : result.ranked.front().step_ms; };
  std::future<void> floor;
  if (detail::worker_count(options.threads) > 1)
    floor = std::async(std::launch::async, [&] { bound_left_out(space, 1, left, &stop_at); });
  detail::replay_search(model, space, finalists, stand_ins, options, result);
  stop_at = winner_ms();
  if (floor.valid())
    floor.get();
  else
    bound_left_out(space, 1, left, &stop_at);
  result.left_out = std::move(left);
  const double win = winner_ms();
  result.left_out.floor_ms = std::min(result.left_out.floor_ms, win);
  if (result.left_out.floor_ms < win)
    result.proven_gap = std::max(result.proven_gap, win / result.left_out.floor_ms - 1.0);
  return result;
}

}  // namespace pd2bw::planner

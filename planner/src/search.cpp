// The search over candidates by the objective: enumerate, bound from below, evaluate the promising ones
// with the DP partitioner in order of their lower bounds, keep the best overall and the best of each
// schedule; then hand the finalists to the replay search (replay.cpp).
#include "pd2bw/planner/search.hpp"

#include <algorithm>
#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <utility>

#include "chunk_price.hpp"
#include "parallel.hpp"
#include "prepared.hpp"
#include "search_internal.hpp"
#include "step_bound.hpp"

namespace pd2bw::planner {

std::vector<Schedule> searched_schedules(const CostModel& model) {
  const auto& k = model.constraints();
  if (k.schedule) return {*k.schedule};
  if (model.split_backward())
    return {Schedule::two_bw, Schedule::flush,  Schedule::gpipe, Schedule::zb_h1,
            Schedule::interleaved, Schedule::zb_h2, Schedule::zb_v};
  return {Schedule::two_bw, Schedule::flush, Schedule::gpipe, Schedule::interleaved};
}

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

// Gives the leaderboard cheap upper bounds before any exact evaluation: greedy splits of the most
// promising candidates of each (schedule, width), so that different pipeline depths are represented; 8
// per group, so that a group of near-equal depths alone can set the bound for the --top kept.
// Without them the first exact evaluations run with loose bounds and cost the most.
void seed_with_greedy(const CostModel& model, const std::vector<Candidate>& candidates,
                      const std::vector<size_t>& order, const std::vector<double>& lb, Leaderboard& board) {
  constexpr int kPerGroup = 8;
  std::map<std::pair<size_t, int64_t>, int> seeded;
  for (size_t idx : order) {
    if (lb[idx] == kInfinity) break;
    const auto& c = candidates[idx];
    if (c.chunks > 1) continue;  // a chunked split is priced per rank, too dear for a seed
    int& n = seeded[{static_cast<size_t>(c.schedule), c.width}];
    if (n < kPerGroup) {
      ++n;
      board.seed(greedy_step_ms(model, c));
    }
  }
}

}  // namespace

namespace {

// The divisors of n in ascending order (O(sqrt n); n is at most kMaxGlobalBatch).
std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> low, high;
  for (int64_t q = 1; q * q <= n; ++q)
    if (n % q == 0) {
      low.push_back(q);
      if (q != n / q) high.push_back(n / q);
    }
  low.insert(low.end(), high.rbegin(), high.rend());
  return low;
}

// The chunks per rank searched for schedule s on d ranks of a model of `layers` layers: interleaved 2, 4,
// 8, ... while every chunk keeps a layer, zb-v 2, the others 1; `pinned` (> 0) keeps that one alone.
std::vector<int64_t> chunk_options(Schedule s, int64_t d, int64_t layers, int64_t pinned) {
  std::vector<int64_t> out;
  if (s == Schedule::interleaved) {
    for (int64_t v = 2; v <= layers / d; v *= 2) out.push_back(v);
  } else {
    out.push_back(s == Schedule::zb_v ? 2 : 1);
    if (d * out.back() > layers) out.clear();
  }
  if (pinned > 0) {
    const bool allowed = pipeline::chunks_allowed(s, pinned) && d * pinned <= layers;
    out.assign(allowed ? 1 : 0, pinned);
  }
  return out;
}

}  // namespace

std::vector<Candidate> enumerate_candidates(const CostModel& model, LeftOut* left_out) {
  const auto& k = model.constraints();
  const auto& sizes = model.profile().microbatch_sizes;
  const int64_t devices = model.cluster().total_devices();
  int64_t max_d = std::min(model.num_layers(), devices);
  if (k.max_depth > 0) max_d = std::min(max_d, k.max_depth);
  if (left_out) *left_out = {};
  std::vector<double> heaviest(sizes.size(), 0.0);  // fwd + bwd of the heaviest layer, per microbatch size
  for (size_t bi = 0; bi < sizes.size(); ++bi) {
    const auto& cp = model.compute_prefix(static_cast<int64_t>(bi));
    for (size_t j = 0; j + 1 < cp.size(); ++j) heaviest[bi] = std::max(heaviest[bi], cp[j + 1] - cp[j]);
  }
  auto per_stage = [&](size_t bi, int64_t d) {
    return model.compute_prefix(static_cast<int64_t>(bi)).back() / static_cast<double>(d);
  };
  std::vector<Candidate> out;
  for (Schedule s : searched_schedules(model)) {
    for (size_t bi = 0; bi < sizes.size(); ++bi) {
      const int64_t b = sizes[bi];
      if (k.microbatch && *k.microbatch != b) continue;
      if (k.global_batch % b != 0) continue;
      // b * w divides the global batch: w runs over the divisors of global_batch / b, never over devices.
      const auto widths = divisors(k.global_batch / b);
      for (int64_t d = 1; d <= max_d; ++d) {
        if (k.depth > 0 && d != k.depth) continue;
        for (int64_t w : widths) {
          if (w > devices / d) break;
          if (k.width > 0 && w != k.width) continue;
          const int64_t m = k.global_batch / (b * w);
          if (m < pipeline::min_microbatches(s, d) || m % pipeline::microbatch_multiple(s, d) != 0) continue;
          // One stage: zb-h1 and zb-h2 run flush's ops exactly. (Chunks on one rank differ from flush: a
          // recomputing rank rebuilds one chunk's stash at a time.)
          if ((s == Schedule::zb_h1 || s == Schedule::zb_h2) && d == 1 && !k.schedule) continue;
          for (int64_t v : chunk_options(s, d, model.num_layers(), k.chunks)) {
            if (m > (v > 1 ? kMaxChunkedMicrobatches : kMaxReplayedMicrobatches) / (d * v)) {
              if (left_out) {
                left_out->count += w > 1 && d > 1 ? 2 : 1;
                // Some stage runs m microbatches of at least the average compute, and of the heaviest layer.
                const double floor = static_cast<double>(m) * std::max(heaviest[bi], per_stage(bi, d));
                left_out->floor_ms = std::min(left_out->floor_ms, floor * (1.0 - 1e-9));
              }
              continue;
            }
            Candidate c{s, static_cast<int64_t>(bi), b, w, d, m, Placement::replicas_inner, v};
            out.push_back(c);
            if (w > 1 && d > 1) {
              c.placement = Placement::stages_inner;
              out.push_back(c);
            }
          }
        }
      }
    }
  }
  return out;
}

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
    e.stages.push_back(detail::price_stage(model, pc, i, split.bounds[static_cast<size_t>(i)],
                                           split.bounds[static_cast<size_t>(i + 1)]));
  e.step_ms = e.split.step_ms = step_objective(c, e.stages);
  return e;
}

namespace {

// A schedule with no candidate in the kept set is represented by its most promising candidates' (the
// first kRepresentatives by lower bound) splits with the least busiest-stage time, the one with the least
// objective, so that the plan can say what the schedule would cost without searching it exactly. Empty
// when the schedule has a kept candidate or no feasible split was found.
std::vector<Evaluated> representatives(const CostModel& model, const detail::SearchSpace& space,
                                       const Leaderboard& board) {
  constexpr int kRepresentatives = 3;
  std::vector<Evaluated> out;
  for (Schedule s : searched_schedules(model)) {
    if (board.has(s)) continue;
    std::optional<Evaluated> best;
    int tried = 0;
    for (size_t idx : space.searched()) {
      const auto& c = space.candidates[idx];
      if (c.schedule != s) continue;
      if (space.lower_bounds[idx] == kInfinity || tried == kRepresentatives) break;
      ++tried;
      const Split split = balanced_split(model, c);
      if (!split.feasible()) continue;
      Evaluated e = evaluate_split(model, c, split);
      e.representative = true;
      if (!best || e.step_ms < best->step_ms) best = std::move(e);
    }
    if (best) out.push_back(std::move(*best));
  }
  return out;
}

// Moves the searched candidates to the front of `order` (which is by lower bound), keeping that order among
// them and among the rest: the first kMaxSearched, of which at most kMaxChunkedSearched chunked.
void choose_searched(const std::vector<Candidate>& candidates, const std::vector<double>& lb, std::vector<size_t>& order,
                     size_t& count) {
  std::vector<size_t> chosen, rest;
  size_t chunked = 0;
  // A search of the chunked schedules alone (one pinned) has no other candidates to make room for.
  const bool mixed = std::any_of(candidates.begin(), candidates.end(), [](const Candidate& c) { return c.chunks == 1; });
  const size_t cap = mixed ? kMaxChunkedSearched : kMaxSearched;
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

// The search by the objective: fills `space` and returns the kept candidates' indices, best first, and
// the schedules' representatives.
std::pair<std::vector<size_t>, std::vector<Evaluated>> search_objective(const CostModel& model,
                                                                        const SearchOptions& options,
                                                                        detail::SearchSpace& space,
                                                                        SearchResult& result) {
  space.candidates = enumerate_candidates(model, &result.left_out);
  const auto& candidates = space.candidates;
  result.candidates = static_cast<int64_t>(candidates.size());
  StepLowerBound lower_bound(model);
  auto& lb = space.lower_bounds;
  lb.resize(candidates.size());
  for (size_t i = 0; i < candidates.size(); ++i) lb[i] = lower_bound(candidates[i]);
  auto& order = space.order;
  order.resize(candidates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lb[a] < lb[b]; });
  // The candidates that would be searched get their finer bounds (a few); those rise and others move up,
  // until the first kMaxSearched are all refined.
  std::vector<char> refined(candidates.size(), 0);
  for (bool again = true; again;) {
    again = false;
    for (size_t pos = 0; pos < std::min(order.size(), kMaxSearched); ++pos) {
      const size_t idx = order[pos];
      if (refined[idx] || !lower_bound.refinable(candidates[idx])) continue;
      refined[idx] = 1;
      const double finer = lower_bound.refined(candidates[idx]);
      if (finer > lb[idx]) {
        lb[idx] = finer;
        again = true;
      }
    }
    if (again) std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return lb[a] < lb[b]; });
  }
  choose_searched(candidates, lb, order, space.searched_count);
  space.known.resize(candidates.size());
  // Memoised as the interval of limits not yet decided; a candidate is tested by one worker at a time (the
  // one evaluating it), so no lock is needed.
  struct Decided {
    double out_to = 0, in_from = kInfinity;  // ruled out at or below out_to, not at or above in_from
  };
  space.ruled_out = [&space, bounds = std::make_shared<StepLowerBound>(model),
                     memo = std::make_shared<std::vector<Decided>>(candidates.size())](size_t idx, double limit) {
    Decided& m = (*memo)[idx];
    if (limit <= m.out_to) return true;
    if (limit >= m.in_from) return false;
    const bool out = bounds->rules_out(space.candidates[idx], limit);
    (out ? m.out_to : m.in_from) = limit;
    return out;
  };

  const auto keep = static_cast<size_t>(std::max<int64_t>(options.top_k, 0) + 1);
  Leaderboard board(keep);
  seed_with_greedy(model, candidates, order, lb, board);

  // Workers take candidates in bound order. The leaderboard's bounds only fall as entries arrive and
  // every pruning decision is exact, so the kept set does not depend on timing or worker count.
  std::mutex board_mutex;
  std::atomic<int64_t> evaluated{0};
  // Past the searched ones (choose_searched), candidates are only summed up (result.unsearched).
  for (size_t pos = space.searched_count; pos < order.size() && lb[order[pos]] < kInfinity; ++pos) {
    ++result.unsearched.count;
    result.unsearched.floor_ms = std::min(result.unsearched.floor_ms, lb[order[pos]]);
  }
  detail::for_each_in_parallel(space.searched().size(), options.threads, [&](size_t pos) {
    const size_t idx = order[pos];
    if (lb[idx] == kInfinity) return false;
    const auto& c = candidates[idx];
    double bound = 0.0;
    {
      const std::lock_guard<std::mutex> lock(board_mutex);
      bound = board.bound();
    }
    if (lb[idx] > bound || space.ruled_out(idx, bound)) return true;
    ++evaluated;
    Split split = best_split(model, c, bound);
    space.known[idx] = {true, bound, split};  // each index is written by one worker only
    if (!split.feasible()) return true;
    Evaluated e = evaluate_split(model, c, split);
    const std::lock_guard<std::mutex> lock(board_mutex);
    board.add(std::move(e), idx);
    return true;
  });
  result.evaluated = evaluated;
  return {board.kept(), representatives(model, space, board)};
}

}  // namespace

SearchResult objective_search(const CostModel& model, const SearchOptions& options) {
  SearchResult result;
  detail::SearchSpace space;
  for (size_t idx : search_objective(model, options, space, result).first)
    result.ranked.push_back(evaluate_split(model, space.candidates[idx], space.known[idx].split));
  return result;
}

SearchResult search(const CostModel& model, const SearchOptions& options) {
  SearchResult result;
  detail::SearchSpace space;
  const auto [finalists, stand_ins] = search_objective(model, options, space, result);
  detail::replay_search(model, space, finalists, stand_ins, options, result);
  return result;
}

Evaluated closest_infeasible(const CostModel& model) {
  Evaluated best;
  int64_t best_over = INT64_MAX;
  for (const auto& c : enumerate_candidates(model)) {
    const int64_t lb = model.static_bytes(c.schedule, 0, model.num_layers()) / c.depth +
                       model.constraints().reserve_bytes - model.memory_limit_bytes();
    if (lb >= best_over) continue;
    const auto o = least_overage_split(model, c, best_over);
    if (o.bounds.empty() || o.over_bytes >= best_over) continue;
    best_over = o.over_bytes;
    Split s;
    s.bounds = o.bounds;
    best = evaluate_split(model, c, s);
  }
  return best;
}

}  // namespace pd2bw::planner

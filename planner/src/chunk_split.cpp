// The chunked schedules' splits: a depth-first walk over the chunk boundaries in lexicographic order,
// pricing each rank once its last chunk is placed, pruned by the ranks' partial times (which only grow)
// and by the room the unfinished ranks have left for the layers still unplaced.
#include <algorithm>
#include <cmath>
#include <optional>

#include "chunk_fit.hpp"
#include "chunk_floor.hpp"
#include "chunk_price.hpp"

namespace pd2bw::planner::detail {

namespace {

class Walk {
 public:
  Walk(const CostModel& model, const Candidate& c, double limit, int64_t max_nodes,
       const std::function<double(const Split&)>& visit)
      : pricer_(model, c), m_(static_cast<double>(c.microbatches)), limit_(limit), nodes_left_(max_nodes),
        visit_(visit), L_(model.num_layers()), n_(pricer_.chunks_total()), cp_(model.compute_prefix(c.microbatch_index)) {
    bounds_.assign(static_cast<size_t>(n_ + 1), 0);
    bounds_.back() = L_;
    lane_.assign(static_cast<size_t>(c.depth), 0.0);
    open_.assign(static_cast<size_t>(c.depth), 1);
    recompute_.assign(static_cast<size_t>(c.depth), 0);
  }
  // Whether every split within the limit was visited (false: out of nodes, or visit stopped the walk).
  bool run() {
    if (n_ > L_) return true;  // no split: nothing to visit
    place(0);
    return !stopped_;
  }
  const ChunkPricer& pricer() const { return pricer_; }

 private:
  void place(int64_t k) {
    if (stopped_) return;
    if (--nodes_left_ < 0) {
      stopped_ = true;
      return;
    }
    const int64_t b = bounds_[static_cast<size_t>(k)];
    const int64_t last_end = k + 1 == n_ ? L_ : L_ - (n_ - 1 - k);
    const auto p = static_cast<size_t>(pricer_.position_of(k));
    for (int64_t e = k + 1 == n_ ? L_ : b + 1; e <= last_end && !stopped_; ++e) {
      if (lane_[p] + pricer_.compute_lane(b, e) > limit_ * (1.0 + 1e-12)) break;  // grows with e
      const double share = pricer_.least_lane(k, b, e);
      if (lane_[p] + share > limit_ * (1.0 + 1e-12)) continue;
      bounds_[static_cast<size_t>(k + 1)] = e;
      const double saved = lane_[p];
      lane_[p] += share;
      if (pricer_.completes(k)) {
        bool redo = false;
        const double lane = pricer_.position_lane(static_cast<int64_t>(p), bounds_, &redo);
        recompute_[p] = redo ? 1 : 0;
        if (lane <= limit_ * (1.0 + 1e-12)) {
          lane_[p] = lane;
          open_[p] = 0;
          descend(k);
          open_[p] = 1;
        }
      } else {
        descend(k);
      }
      lane_[p] = saved;
    }
  }
  void descend(int64_t k) {
    if (k + 1 == n_) return leaf();
    // The layers still unplaced need at least m x their compute of room on the unfinished ranks.
    double room = 0.0;
    for (size_t q = 0; q < lane_.size(); ++q)
      if (open_[q]) room += std::max(0.0, limit_ * (1.0 + 1e-12) - lane_[q]);
    const int64_t e = bounds_[static_cast<size_t>(k + 1)];
    if (room < m_ * (cp_.back() - cp_[static_cast<size_t>(e)]) * (1.0 - 1e-12)) return;
    place(k + 1);
  }
  void leaf() {
    Split s;
    s.bounds = bounds_;
    s.step_ms = pricer_.objective(bounds_, lane_, recompute_);
    if (s.step_ms > limit_) return;
    limit_ = visit_(s);
    if (limit_ < 0.0) stopped_ = true;
  }

  ChunkPricer pricer_;
  double m_, limit_;
  int64_t nodes_left_;
  const std::function<double(const Split&)>& visit_;
  int64_t L_, n_;
  const std::vector<double>& cp_;
  std::vector<int64_t> bounds_;
  std::vector<double> lane_;  // per position: the placed chunks' least lanes, or the rank's price once done
  std::vector<char> open_;
  std::vector<char> recompute_;  // per position, once it is priced
  bool stopped_ = false;
};

// Chunks of equal compute: chunk k ends at the layer whose prefix is nearest (k + 1) / n of the total,
// each chunk keeping at least one layer.
std::vector<int64_t> equal_chunks(const CostModel& model, const Candidate& c) {
  const int64_t L = model.num_layers(), n = c.depth * c.chunks;
  const auto& cp = model.compute_prefix(c.microbatch_index);
  std::vector<int64_t> bounds{0};
  for (int64_t k = 0; k + 1 < n; ++k) {
    const double target = cp.back() * static_cast<double>(k + 1) / static_cast<double>(n);
    auto e = static_cast<int64_t>(std::lower_bound(cp.begin(), cp.end(), target) - cp.begin());
    if (e > 0 && target - cp[static_cast<size_t>(e - 1)] < cp[static_cast<size_t>(e)] - target) --e;
    e = std::clamp(e, bounds.back() + 1, L - (n - 1 - k));
    bounds.push_back(e);
  }
  bounds.push_back(L);
  return bounds;
}

Split priced(const ChunkPricer& pricer, std::vector<int64_t> bounds) {
  Split s;
  pricer.price(bounds, &s.step_ms);
  s.bounds = std::move(bounds);
  return s;
}

// A chunked candidate's pricer, built on first use.
class LazyPricer {
 public:
  LazyPricer(const CostModel& model, const Candidate& c) : model_(model), c_(c) {}
  const ChunkPricer& operator*() {
    if (!pricer_) pricer_.emplace(model_, c_);
    return *pricer_;
  }

 private:
  const CostModel& model_;
  const Candidate& c_;
  std::optional<ChunkPricer> pricer_;
};

// The equal-compute split, priced; one the memory floor rules out (chunk_floor.hpp) does not fit: it is
// not priced (nor the pricer built).
Split equal_split(const CostModel& model, const Candidate& c, LazyPricer& pricer) {
  auto bounds = equal_chunks(model, c);
  if (chunked_split_may_fit(model, c, bounds)) return priced(*pricer, std::move(bounds));
  Split s;
  s.bounds = std::move(bounds);
  return s;
}

}  // namespace

Split chunked_balanced_split(const CostModel& model, const Candidate& c) {
  if (c.depth * c.chunks > model.num_layers()) return {};
  LazyPricer pricer(model, c);
  return equal_split(model, c, pricer);
}

bool chunked_for_each_split_within(const CostModel& model, const Candidate& c, double limit_ms, int64_t max_nodes,
                                   const std::function<double(const Split&)>& visit) {
  if (!chunked_may_fit(model, c)) return true;
  Walk walk(model, c, limit_ms, max_nodes, visit);
  return walk.run();
}

namespace {

// log2 of the number of splits of L layers into n non-empty chunks, C(L - 1, n - 1).
double log2_splits(int64_t L, int64_t n) {
  const auto lg = [](double x) { return std::lgamma(x + 1.0); };
  return (lg(static_cast<double>(L - 1)) - lg(static_cast<double>(n - 1)) - lg(static_cast<double>(L - n))) /
         std::log(2.0);
}

// Moves single chunk boundaries by a layer or more while that lowers the objective (first improvement,
// at most kMoves tries): a cheap refinement of the equal-compute split where the exact walk cannot
// finish. A move re-prices only the two ranks whose chunks it changes.
Split refined(const ChunkPricer& pricer, Split s) {
  constexpr int kMoves = 2048;
  const auto n = static_cast<size_t>(pricer.chunks_total());
  const auto d = static_cast<size_t>(pricer.positions());
  std::vector<double> lanes(d), held(d);
  std::vector<char> redo(d);
  const auto price_at = [&](const std::vector<int64_t>& bounds, size_t p, std::vector<double>& l, std::vector<char>& r,
                            std::vector<double>& h) {
    bool rc = false;
    l[p] = pricer.position_lane(static_cast<int64_t>(p), bounds, &rc);
    r[p] = rc ? 1 : 0;
    h[p] = pricer.held_time(p, bounds);
  };
  for (size_t p = 0; p < d; ++p) price_at(s.bounds, p, lanes, redo, held);
  int tries = 0;
  for (bool moved = true; moved && tries < kMoves;) {
    moved = false;
    for (size_t k = 1; k < n && tries < kMoves; ++k)
      for (int64_t step : {1, -1, 4, -4}) {
        auto bounds = s.bounds;
        bounds[k] += step;
        if (bounds[k] <= bounds[k - 1] || bounds[k] >= bounds[k + 1]) continue;
        ++tries;
        auto l = lanes;
        auto r = redo;
        auto h = held;
        const auto a = static_cast<size_t>(pricer.position_of(static_cast<int64_t>(k) - 1));
        const auto b = static_cast<size_t>(pricer.position_of(static_cast<int64_t>(k)));
        price_at(bounds, a, l, r, h);
        if (b != a) price_at(bounds, b, l, r, h);
        const double objective = pricer.objective(bounds, l, r, s.step_ms, &h);
        if (objective < s.step_ms) {
          s.bounds = std::move(bounds);
          s.step_ms = objective;
          lanes = std::move(l);
          redo = std::move(r);
          held = std::move(h);
          moved = true;
        }
      }
  }
  return s;
}

// A lower bound on the objective of split `bounds` without a stash walk: the ranks' lanes recompute only
// where the memory floor (chunk_floor.hpp) rules out keeping the stash. Above `cutoff` it only says so.
double least_objective(const CostModel& model, const Candidate& c, const ChunkPricer& pricer, const RankFloors& floors,
                       const std::vector<int64_t>& bounds, double cutoff) {
  const auto policy = model.constraints().recompute;
  std::vector<double> lanes;
  std::vector<char> redo;
  for (int64_t p = 0; p < c.depth; ++p) {
    const bool must = policy == RecomputePolicy::always ||
                      (policy != RecomputePolicy::never && floors(bounds, p).plain > model.memory_limit_bytes());
    redo.push_back(must ? 1 : 0);
    lanes.push_back(pricer.lane_with(p, bounds, must));
  }
  return pricer.objective(bounds, lanes, redo, cutoff);
}

// Where the equal-compute split does not fit (the middle ranks of zb-v hold the most microbatches in
// flight): a split that gives each rank at most the layers its memory takes, laid out one layer per
// chunk but one that holds the rest, chosen by the rank's memory floor (RankLayouts::best). The caps
// start at what each rank holds in that layout by its floor (at most the proof's cap, chunk_floor.hpp);
// a rank that still does not fit on the split gives up 1, 2, 4, ... layers a round: first by its floor
// on the split (no stash walk), then by its price. Empty when no fitting split was found within the
// rounds, and, unpriced, when the first split the floor passes has a least objective above
// `upper_bound_ms` (the later rounds move layers from the ranks that do not fit to those that do, which
// rarely lowers it).
std::vector<int64_t> memory_fitted(const CostModel& model, const Candidate& c, LazyPricer& pricer,
                                   double upper_bound_ms) {
  constexpr int kRounds = 16;
  const int64_t L = model.num_layers(), limit = model.memory_limit_bytes();
  const auto policy = model.constraints().recompute;
  const RankFloors floors(model, c);
  const RankLayouts layouts(model, c, floors);
  std::vector<int64_t> caps, cut(static_cast<size_t>(c.depth), 0);
  const auto proven = chunked_rank_capacities(model, c);
  for (int64_t p = 0; p < c.depth; ++p) {
    const RankFloor f = proven[static_cast<size_t>(p)];
    caps.push_back(layouts.capacity(p, std::min(L, std::max(f.plain, f.redo))));
  }
  bool bounded = false;  // the least objective was checked
  for (int round = 0; round < kRounds; ++round) {
    const auto counts = water_filled(caps, L, c.chunks);
    if (counts.empty()) return {};
    std::vector<size_t> heavy;
    for (int64_t p = 0; p < c.depth; ++p) heavy.push_back(layouts.best(p, counts[static_cast<size_t>(p)]).heavy);
    auto bounds = laid_out(c, counts, heavy);
    std::vector<char> over(caps.size(), 0);
    bool fits = true;
    for (size_t p = 0; p < caps.size(); ++p) {
      over[p] = !fits_under(policy, floors(bounds, static_cast<int64_t>(p)), limit);
      fits = fits && !over[p];
    }
    if (fits && !bounded) {
      bounded = true;
      if (least_objective(model, c, *pricer, floors, bounds, upper_bound_ms) > upper_bound_ms) return {};
    }
    for (size_t p = 0; fits && p < caps.size(); ++p)
      over[p] = !((*pricer).position_lane(static_cast<int64_t>(p), bounds) < kInfinity);
    if (std::none_of(over.begin(), over.end(), [](char o) { return o != 0; })) return bounds;
    for (size_t p = 0; p < caps.size(); ++p)
      if (over[p]) {
        cut[p] = std::max<int64_t>(1, 2 * cut[p]);
        caps[p] = counts[p] - cut[p];
      }
  }
  return {};
}

// The split the refinement starts from, priced: the equal-compute split (equal_split) or, where that does
// not fit, a memory-fitted one; `equal` says which. Infeasible, with
// the equal split's bounds, when neither fits.
Split chunked_start(const CostModel& model, const Candidate& c, LazyPricer& pricer, double upper_bound_ms,
                    bool* equal) {
  Split start = equal_split(model, c, pricer);
  *equal = true;
  if (start.feasible()) return start;
  auto bounds = memory_fitted(model, c, pricer, upper_bound_ms);
  if (bounds.empty()) return start;
  *equal = false;
  return priced(*pricer, std::move(bounds));
}

// The refined start, marked exhausted; a memory-fitted start is refined only when it is within the bound
// (refining costs as much as a few hundred rank prices and the search drops what is above the bound).
Split refined_start(LazyPricer& pricer, const Split& start, bool equal, double upper_bound_ms) {
  Split out = start.feasible() && (equal || start.step_ms <= upper_bound_ms) ? refined(*pricer, start) : start;
  out.exhausted = true;
  return out;
}

}  // namespace

// The least objective, ties to the lexicographically first bounds: the same whatever the upper bound.
// Where the splits are too many to walk (2^20 and more), the equal-compute split (or, when it does not fit,
// a memory-fitted one) refined by single moves.
Split chunked_best_split(const CostModel& model, const Candidate& c, double upper_bound_ms, int64_t max_work) {
  if (c.depth * c.chunks > model.num_layers() || !chunked_may_fit(model, c)) return {};
  LazyPricer pricer(model, c);
  bool equal = true;
  const Split start = chunked_start(model, c, pricer, upper_bound_ms, &equal);
  if (log2_splits(model.num_layers(), c.depth * c.chunks) > 20.0)
    return refined_start(pricer, start, equal, upper_bound_ms);
  Split best;
  if (start.step_ms <= upper_bound_ms) best = start;
  const std::function<double(const Split&)> keep = [&](const Split& s) {
    if (s.step_ms < best.step_ms || (s.step_ms == best.step_ms && s.bounds < best.bounds)) best = s;
    return best.step_ms;
  };
  const bool complete = chunked_for_each_split_within(model, c, std::min(upper_bound_ms, best.step_ms),
                                                      std::min(max_work, kChunkedSplitWork), keep);
  return complete ? best : refined_start(pricer, start, equal, upper_bound_ms);
}

OverageSplit chunked_least_overage_split(const CostModel& model, const Candidate& c, int64_t bound_bytes) {
  OverageSplit out;
  if (c.depth * c.chunks > model.num_layers()) return out;
  const auto bounds = equal_chunks(model, c);
  // The floor proves the split over by more than bound_bytes: it is not priced.
  if (!chunked_split_may_fit(model, c, bounds, bound_bytes)) return out;
  const ChunkPricer pricer(model, c);
  int64_t over = 0;
  for (const auto& sc : pricer.price(bounds, nullptr)) over = std::max(over, sc.over_bytes);
  if (over <= bound_bytes) out = {bounds, over};
  return out;
}

}  // namespace pd2bw::planner::detail

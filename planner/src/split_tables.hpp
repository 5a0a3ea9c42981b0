// The partitioner's dynamic program: for every stage i and start layer a, the non-dominated fold states
// (objective.hpp) of the ways stages i..d-1 can cover layers [a, L), built from the last stage to the
// first. Exact: a fold state that another beats in every entry can never lead to a better split, and
// every other one is kept, unless the work budget runs out first (then the tables say so and hold
// nothing usable). Private to the planner (partition.cpp and partition_overage.cpp instantiate it).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include "objective.hpp"

namespace pd2bw::planner::detail {

template <class Fold>
class SplitTables {
 public:
  using State = FoldState<Fold::K>;
  struct Label {
    State v;
    int32_t next = 0;  // where stage i ends (the next stage's start; L for the last stage)
    int32_t from = -1;  // the label of stage i + 1 at `next` this one extends (-1 for the last stage)
  };

  // Windows: stage i starts in [start_lo[i], start_hi[i]] (start_hi[0] = 0) and, starting at a, ends at
  // most at hi(i, a). price(i, a, e) prices stage i = [a, e) (nullopt: does not fit);
  // stage_floor(i, a, e) is a lower bound on any objective with that stage, non-decreasing in e;
  // fb(i, a) what stages 0..i-1 holding layers [0, a) add at least (a Prefix, or their fwd + bwd alone). Fold states whose floor passes `bound` are dropped (with
  // a relative slack of 1e-9: floors add the same terms in another order, and rounding must not prune
  // a state whose objective is the bound itself). `max_work` caps the starts visited, the stages
  // priced and the states folded and compared; past it construction stops and exhausted() is true. So
  // does a construction whose rows so far project past it (projected_past): a program that needs many
  // times its budget mostly spends it on its first tenth of rows. The work done for a given bound never
  // depends on anything else, and a smaller bound never needs more (a state it keeps is kept under any
  // larger bound, and so is every state that dominates it), nor is projected further.
  template <class Hi, class Price, class StageFloor, class Fb>
  SplitTables(int64_t layers, int64_t depth, double m, double bound, const std::vector<int64_t>& start_lo,
              const std::vector<int64_t>& start_hi, Hi&& hi, Price&& price, StageFloor&& stage_floor, Fb&& fb,
              int64_t max_work = INT64_MAX)
      : L_(layers), d_(depth), m_(m), rows_(static_cast<size_t>(depth)) {
    bound += 1e-9 * std::abs(bound);
    std::vector<Label> scratch;
    for (int64_t i = d_ - 1; i >= 0; --i) {
      Row& row = rows_[static_cast<size_t>(i)];
      row.lo = start_lo[static_cast<size_t>(i)];
      row.hi = std::max(row.lo - 1, start_hi[static_cast<size_t>(i)]);
      row.off.assign(static_cast<size_t>(row.hi - row.lo + 2), 0);
      const Row* next = i + 1 < d_ ? &rows_[static_cast<size_t>(i + 1)] : nullptr;
      if (next) row.labels.reserve(next->labels.size() + next->labels.size() / 4 + 16);  // rows grow slowly
      for (int64_t a = row.lo; a <= row.hi; ++a) {
        if (++work_ > max_work) {  // each start costs a search for its window's end
          exhaust(max_work);
          return;
        }
        scratch.clear();
        int64_t e_first = a + 1, e_last = std::min(hi(i, a), L_ - (d_ - 1 - i));
        if (next) {
          e_first = std::max(e_first, next->lo);
          e_last = std::min(e_last, next->hi);
        } else if (e_last == L_) {
          e_first = L_;
        } else {
          e_first = e_last + 1;  // the last stage must reach L
        }
        const Prefix floor_a = fb(i, a);
        double limit = bound;
        for (int64_t e = e_first; e <= e_last; ++e) {
          // Over the ends with no states of stage i + 1: stage_floor is non-decreasing in e, so the loop
          // breaks where stepping over them one by one would
          if (next && (e = next->first_filled(e)) > e_last) break;
          if (stage_floor(i, a, e) > limit) break;
          if (++work_ > max_work) {
            exhaust(max_work);
            return;
          }
          const std::optional<StageTerms> s = price(i, a, e);
          if (!s) continue;
          if (!next) {
            insert(scratch, {Fold::prepend(Fold::empty(), *s, m), static_cast<int32_t>(e), -1}, nullptr);
          } else {
            const Label* from = next->at(e);
            work_ += next->count(e) * static_cast<int64_t>(1 + scratch.size());
            for (int64_t j = 0; j < next->count(e); ++j) {
              const State x = Fold::prepend(from[j].v, *s, m);
              if (Fold::floor(x, floor_a, m, static_cast<double>(i)) > bound) continue;
              insert(scratch, {x, static_cast<int32_t>(e), static_cast<int32_t>(j)}, next);
            }
          }
          if constexpr (Fold::K == 1)  // one entry: nothing above the best so far can matter
            if (!scratch.empty()) limit = std::min(bound, scratch.front().v[0] * (1.0 + 1e-9));
        }
        row.labels.insert(row.labels.end(), scratch.begin(), scratch.end());
        row.off[static_cast<size_t>(a - row.lo + 1)] = static_cast<uint32_t>(row.labels.size());
      }
      row.index_filled();
      if (row.labels.empty()) return;  // no stages i..d-1 under the bound: no split is, and best() says so
      if (i > 0 && projected_past(d_ - i, max_work)) {
        exhaust(max_work);
        return;
      }
    }
  }

  // A budgeted construction stops once the work of its first `rows` rows (at least kProjectedRows), spread
  // over all d rows, passes kProjectedFactor times max_work. A projection, not a proof: rows mostly grow as
  // the stages before are folded in, so a program projected this far past its budget runs out of it
  // anyway. On the planner's tests and benchmarks the programs that finished within their budget were
  // projected at most 2.6 times it (those left with an empty row, which end early whatever their work, up
  // to 8 times: of those this can stop some short of saying that no split is under the bound).
  static constexpr int64_t kProjectedRows = 4;
  static constexpr double kProjectedFactor = 4.0;

  // Whether the work budget ran out (then best() is nullptr and the tables must not be walked).
  bool exhausted() const { return exhausted_; }
  // The work construction spent (starts visited, stages priced, states folded and compared): work_past
  // (max_work) when the budget ran out, whatever the last fold added.
  int64_t work() const { return work_; }
  // What a program that runs out of `max_work` reports as its work (one unit past it), built or not.
  static int64_t work_past(int64_t max_work) { return max_work + 1; }
  // The starts the construction visits (each a unit of work) unless a row is left without states first:
  // over max_work, a construction that leaves none empty (a split under the bound exists) runs out.
  static int64_t starts(const std::vector<int64_t>& start_lo, const std::vector<int64_t>& start_hi) {
    int64_t n = 0;
    for (size_t i = 0; i < start_lo.size(); ++i) n += std::max<int64_t>(0, start_hi[i] - start_lo[i] + 1);
    return n;
  }

  // The best fold state of the whole split (stage 0 starting at layer 0), or nullptr when none is below
  // the bound. Ties (equal objectives) go to the lexicographically smallest state.
  const Label* best() const {
    if (exhausted_) return nullptr;
    const Row& r = rows_.front();
    if (r.count(0) == 0) return nullptr;
    const Label* ls = r.at(0);
    const Label* out = ls;
    for (int64_t j = 1; j < r.count(0); ++j)
      if (ls[j].v < out->v) out = ls + j;
    return out;
  }

  // The bounds of the split `l` (a label of stage 0 at layer 0) stands for.
  std::vector<int64_t> bounds(const Label* l) const {
    std::vector<int64_t> b{0};
    for (int64_t i = 0; i < d_; ++i) {
      b.push_back(l->next);
      if (i + 1 < d_) l = rows_[static_cast<size_t>(i + 1)].at(l->next) + l->from;
    }
    return b;
  }

  // The labels of stage i starting at layer a (count, pointer).
  int64_t count(int64_t i, int64_t a) const { return rows_[static_cast<size_t>(i)].count(a); }
  const Label* at(int64_t i, int64_t a) const { return rows_[static_cast<size_t>(i)].at(a); }
  double microbatches() const { return m_; }

 private:
  struct Row {
    int64_t lo = 0, hi = -1;
    std::vector<uint32_t> off;  // labels of start a: [off[a - lo], off[a - lo + 1])
    std::vector<Label> labels;
    int64_t count(int64_t a) const {
      if (a < lo || a > hi) return 0;
      return off[static_cast<size_t>(a - lo + 1)] - off[static_cast<size_t>(a - lo)];
    }
    const Label* at(int64_t a) const { return labels.data() + off[static_cast<size_t>(a - lo)]; }
    // The least start >= a (lo <= a <= hi + 1) with a state, hi + 1 when none: zb-h1's rows are mostly
    // empty starts, which the fold loop would otherwise step over one by one.
    int64_t first_filled(int64_t a) const { return lo + filled[static_cast<size_t>(a - lo)]; }
    void index_filled() {
      filled.assign(off.size(), static_cast<uint32_t>(hi - lo + 1));
      for (int64_t a = hi; a >= lo; --a) {
        const auto k = static_cast<size_t>(a - lo);
        filled[k] = count(a) > 0 ? static_cast<uint32_t>(k) : filled[k + 1];
      }
    }
    std::vector<uint32_t> filled;  // first_filled(a) - lo, for a in [lo, hi + 1]
  };

  bool projected_past(int64_t rows, int64_t max_work) const {
    if (max_work == INT64_MAX || rows < kProjectedRows) return false;
    return static_cast<double>(work_) * static_cast<double>(d_) >
           kProjectedFactor * static_cast<double>(max_work) * static_cast<double>(rows);
  }

  void exhaust(int64_t max_work) {
    exhausted_ = true;
    work_ = work_past(max_work);
  }

  static bool dominates(const State& a, const State& b) {
    for (int k = 0; k < Fold::K; ++k)
      if (a[static_cast<size_t>(k)] > b[static_cast<size_t>(k)]) return false;
    return true;
  }

  // Among equal states the canonical one: the earlier end, then the smaller state it extends. It does
  // not depend on the bound, so the chosen split does not either.
  static bool preferred(const Label& x, const Label& y, const Row* next) {
    if (x.next != y.next) return x.next < y.next;
    if (!next || x.from == y.from) return false;
    return next->at(x.next)[x.from].v < next->at(y.next)[y.from].v;
  }

  // Adds x to the non-dominated set unless a state there dominates it (the first such state gives way
  // when it equals x and x is preferred), and drops the states x dominates, keeping the order of the
  // others. One pass looks for both; inlined into the fold loop, with the rarer ends out of line.
  [[gnu::always_inline]] static void insert(std::vector<Label>& set, const Label& x, const Row* next) {
    const size_t n = set.size();
    size_t first = n;  // the first state x dominates
    for (size_t k = 0; k < n; ++k) {
      Label& y = set[k];
      if (dominates(y.v, x.v)) {  // x is not kept, and nothing is dropped
        if (y.v == x.v) keep_preferred(y, x, next);
        return;
      }
      if (first == n && dominates(x.v, y.v)) first = k;
    }
    if (first < n) drop_dominated(set, x, first);
    set.push_back(x);
  }

  [[gnu::noinline]] static void keep_preferred(Label& y, const Label& x, const Row* next) {
    if (preferred(x, y, next)) y = x;
  }

  // Drops the states x dominates, set[first] the first of them, keeping the order of the others.
  [[gnu::noinline]] static void drop_dominated(std::vector<Label>& set, const Label& x, size_t first) {
    size_t kept = first;
    for (size_t k = first + 1; k < set.size(); ++k)
      if (!dominates(x.v, set[k].v)) set[kept++] = set[k];
    set.resize(kept);
  }

  int64_t L_, d_;
  double m_;
  std::vector<Row> rows_;
  bool exhausted_ = false;
  int64_t work_ = 0;
};

}  // namespace pd2bw::planner::detail

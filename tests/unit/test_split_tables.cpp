// The split tables (planner/src/split_tables.hpp) against the plain form of the same dynamic program: per
// start, every folded state compared with the kept ones one by one (a dominated one dropped, equal ones
// resolved by the same preference), the same work counted, and a budgeted program stopped where its
// first rows project past its budget. Small integer stage times make equal and
// dominated states common. Every row's states, their order and what they extend, the work and whether
// it ran out must be the same, for each fold, under loose and tight bounds and budgets. Also HiSweep
// (partition_internal.hpp) against Windows::hi, which it stands in for.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <random>
#include <vector>

#include "objective.hpp"
#include "partition_internal.hpp"
#include "split_tables.hpp"

namespace {

namespace detail = pd2bw::planner::detail;

// A random instance: L layers, d stages, stage i = [a, e) priced from small integers (or not fitting).
struct Instance {
  int64_t L = 0, d = 0, max_len = 0;
  double m = 1;
  std::vector<int64_t> start_lo, start_hi;
  std::vector<double> work;  // per-layer compute, prefix-summed, for the stage floors
  uint64_t seed = 0;

  int64_t hi(int64_t, int64_t a) const { return std::min(L, a + max_len); }
  std::optional<detail::StageTerms> price(int64_t i, int64_t a, int64_t e) const {
    std::mt19937_64 g(seed * 1000003u + static_cast<uint64_t>((i * 131 + a) * 131 + e));
    if (g() % 11 == 0) return std::nullopt;  // does not fit
    auto small = [&](int top) { return static_cast<double>(g() % static_cast<uint64_t>(top)); };
    detail::StageTimes x;
    x.forward = static_cast<double>(e - a) + small(3);
    x.backward = 2.0 * static_cast<double>(e - a) + small(3);
    x.weight = small(2);
    x.backward += x.weight;
    x.compute = x.forward + x.backward;
    x.in = i > 0 ? small(2) : 0.0;
    x.out = i + 1 < d ? small(2) : 0.0;
    x.p2p = 2.0 * (x.in + x.out);
    x.allreduce = small(4);
    return detail::stage_terms(m, i, d, x, i);
  }
  double floor(int64_t a, int64_t e) const { return m * (work[static_cast<size_t>(e)] - work[static_cast<size_t>(a)]); }
};

// `deep`: 17 to 24 stages over 40 to 59 layers, where a budget's projection (kProjectedRows of d rows)
// can stop a program before its budget runs out.
Instance make_instance(uint64_t seed, bool deep = false) {
  std::mt19937_64 g(seed);
  Instance in;
  in.seed = seed;
  in.L = deep ? 40 + static_cast<int64_t>(g() % 20) : 6 + static_cast<int64_t>(g() % 20);
  in.d = deep ? 17 + static_cast<int64_t>(g() % 8)
              : 1 + static_cast<int64_t>(g() % static_cast<uint64_t>(std::min<int64_t>(in.L, 7)));
  in.max_len = 1 + (in.L + in.d - 1) / in.d + static_cast<int64_t>(g() % 4);
  in.m = static_cast<double>(1 + g() % 6);
  in.work.assign(static_cast<size_t>(in.L + 1), 0.0);
  for (int64_t j = 0; j < in.L; ++j) in.work[static_cast<size_t>(j + 1)] = in.work[static_cast<size_t>(j)] + 1.0;
  for (int64_t i = 0; i < in.d; ++i) {
    in.start_lo.push_back(i == 0 ? 0 : std::max<int64_t>(i, in.L - (in.d - i) * in.max_len));
    in.start_hi.push_back(i == 0 ? 0 : std::min(in.L - (in.d - i), i * in.max_len));
  }
  return in;
}

// The plain dynamic program.
template <class Fold>
struct Plain {
  using State = detail::FoldState<Fold::K>;
  struct Label {
    State v;
    int32_t next = 0, from = -1;
  };
  std::vector<std::vector<std::vector<Label>>> rows;  // [stage][start - start_lo]
  const Instance& in;
  int64_t work = 0, priced = 0;                // and the stages priced (Instance::price calls)
  bool exhausted = false, projected = false;  // ran out; of which stopped by the projection

  static bool below(const State& a, const State& b) {
    for (int k = 0; k < Fold::K; ++k)
      if (a[static_cast<size_t>(k)] > b[static_cast<size_t>(k)]) return false;
    return true;
  }
  const std::vector<Label>& at(int64_t i, int64_t a) const {
    static const std::vector<Label> none;
    if (i >= in.d || a < in.start_lo[static_cast<size_t>(i)] || a > in.start_hi[static_cast<size_t>(i)]) return none;
    return rows[static_cast<size_t>(i)][static_cast<size_t>(a - in.start_lo[static_cast<size_t>(i)])];
  }
  // Equal states: the earlier end, then the smaller state extended.
  bool preferred(int64_t i, const Label& x, const Label& y) const {
    if (x.next != y.next) return x.next < y.next;
    if (i + 1 >= in.d || x.from == y.from) return false;
    return at(i + 1, x.next)[static_cast<size_t>(x.from)].v < at(i + 1, y.next)[static_cast<size_t>(y.from)].v;
  }
  void add(int64_t i, std::vector<Label>& set, const Label& x) const {
    for (auto& y : set)
      if (below(y.v, x.v)) {
        if (y.v == x.v && preferred(i, x, y)) y = x;
        return;
      }
    std::vector<Label> kept;
    for (const auto& y : set)
      if (!below(x.v, y.v)) kept.push_back(y);
    kept.push_back(x);
    set = kept;
  }

  // A program that runs out of work reports the budget and one unit, whatever its last fold added.
  void run_out(int64_t max_work) {
    exhausted = true;
    work = max_work + 1;
  }

  Plain(const Instance& instance, double bound, int64_t max_work) : in(instance) {
    bound += 1e-9 * std::abs(bound);
    rows.resize(static_cast<size_t>(in.d));
    for (int64_t i = in.d - 1; i >= 0; --i) {
      const int64_t lo = in.start_lo[static_cast<size_t>(i)], hi = in.start_hi[static_cast<size_t>(i)];
      for (int64_t a = lo; a <= hi; ++a) {
        if (++work > max_work) {
          run_out(max_work);
          return;
        }
        std::vector<Label> set;
        double limit = bound;
        const bool last = i == in.d - 1;
        for (int64_t e = a + 1; e <= std::min(in.hi(i, a), in.L - (in.d - 1 - i)); ++e) {
          if (last && e != in.L) continue;
          if (in.floor(a, e) > limit) break;
          if (!last && at(i + 1, e).empty()) continue;
          if (++work > max_work) {
            run_out(max_work);
            return;
          }
          const auto s = in.price(i, a, e);
          ++priced;
          if (!s) continue;
          if (last) {
            add(i, set, {Fold::prepend(Fold::empty(), *s, in.m), static_cast<int32_t>(e), -1});
          } else {
            const auto& from = at(i + 1, e);
            work += static_cast<int64_t>(from.size() * (1 + set.size()));
            for (size_t j = 0; j < from.size(); ++j) {
              const State x = Fold::prepend(from[j].v, *s, in.m);
              if (Fold::floor(x, in.work[static_cast<size_t>(a)], in.m, static_cast<double>(i)) > bound) continue;
              add(i, set, {x, static_cast<int32_t>(e), static_cast<int32_t>(j)});
            }
          }
          if (Fold::K == 1 && !set.empty()) limit = std::min(bound, set.front().v[0] * (1.0 + 1e-9));
        }
        rows[static_cast<size_t>(i)].push_back(set);
      }
      if (std::all_of(rows[static_cast<size_t>(i)].begin(), rows[static_cast<size_t>(i)].end(),
                      [](const auto& r) { return r.empty(); }))
        return;
      // A budgeted program whose rows so far, spread over all d, project past kProjectedFactor budgets.
      using Tables = detail::SplitTables<Fold>;
      const int64_t built = in.d - i;
      if (i > 0 && max_work != INT64_MAX && built >= Tables::kProjectedRows &&
          static_cast<double>(work) * static_cast<double>(in.d) >
              Tables::kProjectedFactor * static_cast<double>(max_work) * static_cast<double>(built)) {
        run_out(max_work);
        projected = true;
        return;
      }
    }
  }
};

// Builds both and compares them; returns the best objective (infinity when none).
template <class Fold>
double compare(const Instance& in, double bound, int64_t max_work) {
  const Plain<Fold> want(in, bound, max_work);
  int64_t priced = 0;  // where construction stopped, when it ran out
  const detail::SplitTables<Fold> got(
      in.L, in.d, in.m, bound, in.start_lo, in.start_hi, [&](int64_t i, int64_t a) { return in.hi(i, a); },
      [&](int64_t i, int64_t a, int64_t e) {
        ++priced;
        return in.price(i, a, e);
      },
      [&](int64_t, int64_t a, int64_t e) { return in.floor(a, e); },
      [&](int64_t, int64_t a) { return in.work[static_cast<size_t>(a)]; }, max_work);
  CHECK(got.work() == want.work);
  CHECK(priced == want.priced);
  REQUIRE(got.exhausted() == want.exhausted);
  if (want.exhausted) return pd2bw::planner::kInfinity;
  bool reached = true;
  for (int64_t i = in.d - 1; i >= 0 && reached; --i) {
    reached = false;
    for (int64_t a = in.start_lo[static_cast<size_t>(i)]; a <= in.start_hi[static_cast<size_t>(i)]; ++a) {
      const auto& w = want.at(i, a);
      REQUIRE(got.count(i, a) == static_cast<int64_t>(w.size()));
      reached |= !w.empty();
      for (size_t j = 0; j < w.size(); ++j) {
        const auto& l = got.at(i, a)[j];
        CHECK(l.v == w[j].v);
        CHECK(l.next == w[j].next);
        CHECK(l.from == w[j].from);
      }
    }
  }
  const auto* best = got.best();
  return best ? best->v[0] : pd2bw::planner::kInfinity;
}

template <class Fold>
void compare_all(int64_t& compared, int64_t& tight, int64_t& projected) {
  for (uint64_t seed = 1; seed <= 150; ++seed) {
    const Instance in = make_instance(seed);
    CAPTURE(seed);
    const double best = compare<Fold>(in, pd2bw::planner::kInfinity, INT64_MAX);
    const Plain<Fold> loose(in, pd2bw::planner::kInfinity, INT64_MAX);
    ++compared;
    if (best == pd2bw::planner::kInfinity) continue;
    compare<Fold>(in, best, INT64_MAX);  // the optimum as the bound: the floors and folds prune
    compare<Fold>(in, best * 1.1, INT64_MAX);
    for (const int64_t budget : {loose.work / 3, loose.work - 1, loose.work}) compare<Fold>(in, best, budget);
    ++tight;
  }
  for (uint64_t seed = 1; seed <= 30; ++seed) {  // deep: budgets the projection may cut short
    const Instance in = make_instance(seed, true);
    CAPTURE(seed);
    const Plain<Fold> loose(in, pd2bw::planner::kInfinity, INT64_MAX);
    for (const int64_t budget : {loose.work / 2, loose.work / 4, loose.work / 8, loose.work / 16}) {
      compare<Fold>(in, pd2bw::planner::kInfinity, budget);
      if (Plain<Fold>(in, pd2bw::planner::kInfinity, budget).projected) ++projected;
    }
    // A budget the program needs, or twice that, is never cut short by the projection here.
    for (const int64_t budget : {loose.work, 2 * loose.work})
      CHECK_FALSE(Plain<Fold>(in, pd2bw::planner::kInfinity, budget).exhausted);
  }
}

}  // namespace

TEST_CASE("the split tables keep the plain dynamic program's states, order, work and budget, for every fold") {
  int64_t compared = 0, tight = 0, projected = 0;
  compare_all<detail::FlushFold>(compared, tight, projected);
  compare_all<detail::GpipeFold>(compared, tight, projected);
  compare_all<detail::ZbH1Fold>(compared, tight, projected);
  compare_all<detail::ZbH2Fold>(compared, tight, projected);
  compare_all<detail::TwoBwFold>(compared, tight, projected);
  MESSAGE("compared " << compared << " instances, " << tight << " under tight bounds and budgets; " << projected
                      << " deep programs stopped by their projection");
  CHECK(compared == 750);
  CHECK(tight >= 500);
  CHECK(projected >= 25);
}

TEST_CASE("HiSweep gives Windows::hi for starts in increasing order, and after a restart") {
  std::mt19937_64 g(7);
  for (int round = 0; round < 200; ++round) {
    const int64_t L = 5 + static_cast<int64_t>(g() % 60);
    std::vector<double> cp{0.0};
    std::vector<int64_t> pp{0};
    for (int64_t j = 0; j < L; ++j) {
      cp.push_back(cp.back() + static_cast<double>(1 + g() % 4));  // ties between layers' sums are common
      pp.push_back(pp.back() + static_cast<int64_t>(g() % 3));
    }
    detail::Windows w;
    w.cp = &cp;
    w.pp = &pp;
    w.max_params = static_cast<int64_t>(g() % 12);
    for (int i = 0; i < 3; ++i) w.caps.push_back(static_cast<double>(g() % 15));
    detail::HiSweep sweep(w);
    for (int pass = 0; pass < 2; ++pass)  // the second pass restarts each stage from its first start
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t a = static_cast<int64_t>(g() % 3); a <= L; a += 1 + static_cast<int64_t>(g() % 2)) {
          CAPTURE(a);
          REQUIRE(sweep(i, a) == w.hi(i, a));
        }
  }
}

// Lower bounds on a candidate's step time, cheap enough to compute for every point of the search
// space; the search evaluates candidates in the order of these bounds and skips those whose bound
// cannot beat what it already has. Private to the planner.
#pragma once

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <tuple>
#include <utility>
#include <vector>

#include "forced_redo.hpp"
#include "pd2bw/planner/cost_model.hpp"
#include "pd2bw/planner/partition.hpp"

namespace pd2bw::planner {

class StepLowerBound {
 public:
  explicit StepLowerBound(const CostModel& model);
  // The thread-safe memos below (Shared), given (null: new ones). They read the model's memory, links
  // and recompute policy, never its pinned schedule (each is keyed by the schedule it is for), so bounds
  // of models that differ only there may share them (SearchShare).
  struct Shared;
  StepLowerBound(const CostModel& model, std::shared_ptr<Shared> memos);
  // A copy shares the original's thread-safe memos (placement levels, plain runs, the depths memory rules
  // out) and has its own of the others: a search gives each of its threads a copy of one bound, and what
  // one thread learns of the placements the others reuse. Copying is O(L) (the per-layer tables).
  StepLowerBound(const StepLowerBound&) = default;
  // The cost model it bounds.
  const CostModel& model() const { return model_; }

  // Never above the least step time of any split of `c`; infinity when no split can fit in memory.
  double operator()(const Candidate& c);
  // Whether refined(c) can be above operator()(c), and that further bound (0 when not refinable): the
  // larger of the two is a lower bound. It adds zb-h1's round trips with the links each stage's replicas
  // really cross (O(d x w) for the first candidate of a depth, width and placement) and the whole-layer
  // lanes bound (lanes_bound), bisected between `from` and `ceiling`: when the lanes reach at neither,
  // the result is `ceiling` (about O(d log L) for that answer, 20 times that for a bisection), and infinity
  // when no whole-layer split fits in memory at all (memory_fits). For the chunked candidates
  // (interleaved, zb-v) it is chunked_bound, whatever `from` and `ceiling`.
  bool refinable(const Candidate& c) const;
  // What rules_out(c, t) answered for the limits refined() tried: true at or below out_to, false at or
  // above in_from (it is monotone in t), so that a caller asking rules_out again can skip those tests.
  struct RuleBracket {
    double out_to = 0.0, in_from = kInfinity;
    // Records rules_out's answer `ruled` at limit t.
    void record(double t, bool ruled) {
      if (ruled)
        out_to = std::max(out_to, t);
      else
        in_from = std::min(in_from, t);
    }
  };
  // With a `guess` (0: none), limits near it are tested first and the bisection skips every midpoint
  // they decide: the same result (rules_out is monotone in t), in fewer tests when the guess is close.
  // The bisection ends within `tolerance` (relative) of the least limit its test passes (within
  // kFineTolerance for d = 1, whose test is one stage's).
  double refined(const Candidate& c, double from = 0.0, double ceiling = kInfinity, RuleBracket* tried = nullptr,
                 double guess = 0.0, double tolerance = kFineTolerance);
  // True only if refined(c, from, ceiling) > t for every from and every ceiling >= t (1 + kAboveMargin): one
  // test at that limit instead of a bisection, for a caller that needs the refined bound only where it is
  // below t. False for the chunked candidates. Thread-safe.
  bool refines_above(const Candidate& c, double t) const;
  // refined()'s bisection ends within kFineTolerance of the least limit its test passes, so a test
  // passing this far above t leaves its result above t.
  static constexpr double kAboveMargin = 1e-4;
  // refined()'s tolerances: the fine one every bound that reaches an answer has; the coarse one the search
  // refines its candidates with before it knows which bounds matter (detail::sharpened_bound narrows those).
  static constexpr double kFineTolerance = 1e-5, kCoarseTolerance = 1e-3;

  // Whether d stages of whole layers, each priced within its own memory (its in-flight stashes, or its
  // split backward's) with the least transfers its replicas allow, can all have lanes m t_i + h_i <= t
  // (step_bound_lanes.cpp, with the proof). False rules out every split of `c` at t; at t = infinity,
  // false says that no split fits in memory. O(d log L).
  bool lanes_reach(const Candidate& c, double t) const;
  // Whether d stages of whole layers, relaxed as lanes_reach prices them, can each fit in the device
  // memory plus `over_bytes` (in the option the recompute policy takes): false proves that every split of
  // `c` has a stage more than `over_bytes` over the memory (least_overage_split). O(d log L).
  bool fits_within(const Candidate& c, int64_t over_bytes) const;

  // For a chunked candidate (interleaved, zb-v; 0 for the others): the busiest rank's lane when each rank
  // holds at most the layers its memory floor allows (chunk_floor.hpp), priced at the largest layers and
  // with the recompute it forces (step_bound_chunked.cpp, with the proof), or the climb of one microbatch
  // through the model (chunked_climb_floor) or, for interleaved, its cycle with the ranks' waits for the
  // microbatches' first trips (interleaved_wait_bound) where those are more; infinity when the floors
  // prove that no split fits. refined() returns it for them. O(L + d (v + log L)) plus a bisection of O(d)
  // steps for the first candidate of a schedule, depth, chunk count, walked m and microbatch size;
  // O(levels) after.
  double chunked_bound(const Candidate& c);

  // A finer test for a candidate about to be evaluated: true when no split of `c` has an objective <=
  // `limit` because the d stages, each with the links and allreduce latency its replicas really have,
  // cannot hold all compute within it (and for flush, with the drain and refill above each stage and its
  // round trips below it). O(d) after the first call for a depth, width and placement. Thread-safe.
  bool rules_out(const Candidate& c, double limit) const;
  // The same through `memo`, what rules_out answered of c before (RuleBracket): a limit it decides is not
  // tested again, and a tested one is recorded there. Thread-safe for distinct memos.
  bool rules_out(const Candidate& c, double limit, RuleBracket& memo) const;
  // Flush and gpipe (step_bound_flush.cpp, with the proof): never above the compute with recompute,
  // sum_j (f_j + b_j), of any split of `c` whose objective is within `t` (its lanes, and flush's cycles
  // through stage 0); the model's fwd + bwd for the other schedules. Non-increasing in t. O(d) after
  // plain_runs' O(L) for each new in-flight count. Thread-safe.
  double least_busy(const Candidate& c, double t) const;

 private:
  friend struct StepLowerBoundProbeTest;  // tests/unit/test_step_bound_probe.cpp: a probe against fresh calls
  // Per stage: the least per-microbatch transfers of its slowest replica (2 per boundary), the least one
  // transfer over its input boundary on its fastest replica, and its allreduce latency.
  struct StageLinks {
    double lane = 0, in_fast = 0, latency = 0;
    int64_t ar_level = -1;  // the level its allreduce spans (PlacementLevels)
  };
  std::vector<StageLinks> stage_links(const Candidate& c) const;
  // The levels behind stage_links, shared by the candidates with the same depth, width and placement:
  // per stage the distinct (input, output) levels its replicas cross (-1 at an end) and the level its
  // allreduce spans. Interior stages repeat every stage period (detail::repeated_stage), so only the
  // first period's stages and the last are kept: slot(i) is stage i's entry, and the cache of every
  // shape at 4,096 GPUs holds a few MB instead of one entry per stage of every shape.
  struct PlacementLevels {
    std::vector<std::pair<int, int>> pairs;  // slot s's: [first[s], first[s + 1]) (one block: no small vectors)
    std::vector<size_t> first;
    std::vector<int64_t> ar_level;  // per slot
    int64_t depth = 0, period = 1;
    size_t slot(int64_t i) const {
      if (i <= period) return static_cast<size_t>(i);
      return static_cast<size_t>(i + 1 == depth ? period + 1 : 1 + (i - 1) % period);
    }
  };
  std::shared_ptr<const PlacementLevels> placement_levels(const Candidate& c) const;
  std::vector<StageLinks> stage_links(const Candidate& c, const PlacementLevels& levels) const;
  // The bound from the average stage: all compute with `redo` (ForcedRedo), the cheapest boundary
  // transfers and allreduces.
  double average_bound(const Candidate& c, double redo) const;
  // The bound from stage capacities: the least step time T at which d stages can hold all compute.
  double capacity_bound(const Candidate& c, double redo);
  // Flush's cycle through every stage: all compute with the forced `redo`, every boundary twice, stage
  // 0's allreduce and update, and (m - 1) more forwards or backwards of the busiest stage.
  double fill_bound(const Candidate& c, double redo) const;
  // Every boundary crossed twice (one way each), each at the fastest level: what the fill and drain of
  // flush and gpipe pass at least.
  double least_fill_p2p(const Candidate& c) const;
  // Sum over stages of the compute each can hold when its compute budget is x (ms per microbatch).
  double capacity_sum(const Candidate& c, double x);
  // Per microbatch index: the sums of the n largest per-layer fwd + bwd, n = 0..L (memoised).
  const std::vector<double>& top_layers(size_t bi);
  std::vector<std::vector<double>> top_layers_;
  // chunked_bound's x*, the least compute per microbatch of the busiest rank (infinity: no split fits),
  // memoised by schedule, depth, chunks, walked microbatches (pipeline::walk_microbatches) and microbatch index.
  // With it, how many layers the ranks that recompute hold at least on every split: those past the plain
  // options' caps (L when no rank has a plain option).
  struct ChunkedLeast {
    double x = 0;
    int64_t redone = 0;
  };
  ChunkedLeast chunked_least_x(const Candidate& c);
  std::map<std::tuple<Schedule, int64_t, int64_t, int64_t, int64_t>, ChunkedLeast> chunked_least_x_;
  // The chunked candidates' climb through the model (objective.hpp: chunked_climb) on any split, less rank
  // 0's allreduces and update, when at least `redone` layers sit on recomputing ranks
  // (step_bound_chunked.cpp, with the proof). Memoised by microbatch index, m, whether W is apart and
  // `redone`; O(L) for a new one.
  double chunked_climb_floor(const Candidate& c, int64_t redone);
  std::map<std::tuple<int64_t, int64_t, bool, int64_t>, double> chunked_climb_;
  // Interleaved: interleaved_floor.hpp's bound with the compute and recompute of any split when at least
  // `redone` layers sit on recomputing ranks. Memoised by depth, chunks, m, microbatch index and `redone`.
  double interleaved_wait_bound(const Candidate& c, int64_t redone);
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>, double> wait_bound_;
  // Per microbatch index: the sums of the n smallest per-layer recomputes, n = 0..L (memoised).
  const std::vector<double>& least_redo_layers(size_t bi);
  std::vector<std::vector<double>> least_redo_layers_;
  // The least allreduce of `bytes` across `width` replicas at any level whose groups hold `width` devices
  // (0 for one replica).
  double least_allreduce_ms(int64_t width, int64_t bytes = 0) const;
  // The least allreduce and update of one chunk of a chunked candidate: it holds at least one layer, so
  // at least the gradients of the layer with the fewest parameters (allreduce_ms never falls as bytes
  // grow) and the cheapest layer's update.
  double least_chunk_held(const Candidate& c) const;
  // The least p2p of a stage with a neighbour (d > 1; 0 for d = 1), per microbatch: both ways of the
  // smallest boundary tensor at the fastest level a boundary of `c` can cross.
  double least_stage_p2p_ms(const Candidate& c) const;
  // The least fwd + bwd of k consecutive layers at microbatch index bi (memoised).
  double least_window_ms(size_t bi, int64_t k);
  // The lane of the stage holding the most layers: some stage holds a run of at least ceil(L / d), and
  // its lane m (t + p2p) + allreduce + update is at least the sum of each term's least over any run of
  // that many (each term only grows with a layer more): the least compute, the least transfers of a stage
  // with a neighbour (d > 1), the allreduce of the least gradients at any level, the least update.
  double crowded_bound(const Candidate& c);
  // Sum of plain_capacity over f = 1..n, each term clipped to [low, high].
  double clipped_prefix(bool two_versions, size_t bi, int64_t n, double low, double high);

  // The stages of `c` relaxed (step_bound_lanes.cpp): time(k, a, e) is stage k's compute per microbatch
  // holding layers [a, e), with its recompute where its memory needs it, priced with the model's smallest
  // boundary tensors; never above the real compute of any run containing [a, e); infinity when no such
  // run fits in memory. O(d) to build (a flag per stage: each stage is priced on its first call), O(1) per call.
  // Per microbatch index, two sets of layers: all of them, and all but a few outliers (the two smallest
  // of each kind, which would otherwise let every stage of a deep pipeline hold "one layer" as small as
  // the embedding). For each set, the sums of its n smallest layers' parameter bytes, stashes and W
  // stashes, each kind sorted on its own, n = 0..size (saturating): at most the bytes of any n of its
  // layers, in a row or not.
  struct SmallestSums {
    struct Kinds {
      std::vector<int64_t> params, stash, grads;  // [n]
    };
    std::vector<std::array<Kinds, 2>> sets;  // [microbatch index][all, all but the outliers]
    // [microbatch index]: the three prefix sums are non-decreasing (no layer has negative bytes), which
    // makes each sum non-decreasing in n.
    std::vector<char> ordered;
  };
  static std::shared_ptr<const SmallestSums> smallest_sums(const CostModel& model);
  class Relaxed {
   public:
    // `extra_bytes` widens the device memory (fits_within).
    Relaxed(const StepLowerBound& bound, const Candidate& c, int64_t extra_bytes = 0);
    Relaxed(const Relaxed&) = delete;
    Relaxed& operator=(const Relaxed&) = delete;
    ~Relaxed();  // hands its stage table back to the pool (Shared::stage_pool)
    // Not thread-safe: it remembers what it learnt of each stage's memory (one Relaxed per thread).
    double time(int64_t k, int64_t a, int64_t e) const;

   private:
    friend class StepLowerBound;
    // What is known of a stage's runs from start `a`: its bytes without recompute fit up to end plain_ok
    // and not from plain_bad on (they only grow with the end), and so for its bytes with recompute.
    struct Known {
      int64_t a, plain_ok, plain_bad, redo_ok, redo_bad;
    };
    // Written field by field by stage() (a table of them is built for every candidate, so nothing is
    // zeroed first; `known` holds `filled` slots).
    struct Stage {
      Stage() {}  // NOLINT: leaves the fields to stage()
      int64_t fixed;                        // boundary buffers and the reserve
      int64_t in_flight, ahead, defer;      // its stashes (split backward: ahead and defer)
      // Its counts and fixed bytes, and the candidate's (bounded_), are far from 2^63: with bytes of layers
      // below kSmallBytes plain integer sums equal the saturating ones. `small` when every run's are.
      bool bounded, small;
      uint8_t filled, older;                // slots of `known` in use; the one filled longest ago
      // A split backward's pipeline::for_each_deferred_shape (activations, deferred W's), on the first small_bytes
      // that needs them (kShapesUnknown until then): many stages priced are never asked their bytes.
      mutable uint8_t shape_count;
      mutable std::array<std::array<int32_t, 2>, 4> shapes;
      std::array<Known, 4> known;           // the last starts asked
    };
    // Stage k, priced on its first call. Most walks do reach most stages; what this saves is zeroing a
    // whole record per stage up front in a table that was cold (the table now comes from the pool).
    Stage& stage(int64_t k) const;
    void price_stage(Stage& st, int64_t k) const;  // stage()'s fields of stage k, `known` left empty
    // Whether stage k's run [a, e) fits, with or without recompute, in limit_ bytes: remembered in `known`.
    bool fits(const Stage& st, Known& known, bool redo, int64_t a, int64_t e) const;
    int64_t plain_statics(int64_t params) const;
    // Stage st's bytes with `params`, `stash` and `grads` (W stash) bytes of layers, saturating; and the
    // same without saturation, for a stage `bounded` and bytes of layers below kSmallBytes.
    int64_t bytes(const Stage& st, bool redo, int64_t params, int64_t stash, int64_t grads) const;
    int64_t small_bytes(const Stage& st, bool redo, int64_t params, int64_t stash, int64_t grads) const;
    void with_shapes(const Stage& st) const;  // a split stage's `shapes`, on first use
    std::pair<int64_t, int64_t> small_split_bytes(const Stage& st, int64_t params, int64_t stash, int64_t grads) const;
    // Whether n layers of a set could fit stage st in an option the policy allows, priced with the set's
    // n smallest layers' bytes of each kind (SmallestSums): true whenever a run of the stage that fits holds
    // n layers of the set; monotone in n when the set's sums are (SmallestSums::ordered).
    bool could_hold(const Stage& st, int64_t n, const SmallestSums::Kinds& sums) const;
    // False only if no walk of `depth` stages reaches the last layer: for each set of SmallestSums, stage k
    // holds at most n_k of its layers by could_hold, and they sum to less than the set. O(depth + L) once
    // the stages are priced; true without a test when some layer has negative bytes.
    bool may_cover(int64_t depth) const;
    const Candidate& c_;
    const StaticFactors& statics_;
    const std::vector<double>&cp_, &rp_;
    const std::vector<int64_t>&sp_, &pp_, &wp_;
    int64_t input_ = 0, limit_ = 0;
    int64_t min_in_ = 0, min_out_ = 0, reserve_ = 0;  // the smallest boundary tensors; the reserve
    int unit_shift_ = -1;                             // log2 of the compute dtype's bytes (-1: no power of 2)
    int64_t state_terms_ = 0;                         // master, gradients and moments: elements per parameter
    RecomputePolicy policy_;
    bool split_ = false;
    // The candidate's own terms are far from 2^63 (bounded_; each stage adds its own, Stage::bounded),
    // and so are the sums of the whole model's bytes (small_).
    bool bounded_ = false, small_ = false;
    static constexpr uint8_t kShapesUnknown = 0xff;
    static constexpr int64_t kCounts = int64_t{1} << 20, kBig = int64_t{1} << 60, kSmallBytes = int64_t{1} << 40;
    const SmallestSums* smallest_ = nullptr;
    size_t bi_ = 0;
    mutable std::vector<std::optional<Stage>> stages_;
    Shared* shared_ = nullptr;
  };
  // What rules_out and lanes_reach read of one candidate at every limit, built once for all the limits
  // refined() asks (step_bound_lanes.cpp), and lanes_reach's walks nearest to the limits asked: the
  // ends g_{k+1}(t) of its stages are non-decreasing in t (each stage's relaxed lane is non-decreasing
  // in its end and non-increasing in its start, exactly so in doubles: sums and differences of
  // non-decreasing prefix sums), so a walk at t between them ends each stage between their ends.
  struct Probe {
    Probe(const StepLowerBound& owner, const Candidate& cand) : bound(owner), c(cand) {}
    const StepLowerBound& bound;
    const Candidate& c;
    // Built on first use (a walk answered by memory_fits' memo needs neither).
    const PlacementLevels& levels();
    const std::vector<StageLinks>& links();
    const Relaxed& relaxed();

   private:
    std::shared_ptr<const PlacementLevels> levels_;
    std::vector<StageLinks> links_;
    std::optional<Relaxed> relaxed_;

   public:
    // The walks nearest to the limits asked on either side: one that did not reach the last layer (below)
    // and one that did (above), each with its stage ends (per stage k, g_{k+1}; L once reached, and a walk
    // that stopped at stage k holds its start there for the later stages). A walk's ends only grow with
    // its limit, so a walk between the two ends each stage between theirs.
    struct WalkBrackets {
      bool has_short = false, has_reach = false;
      double short_at = 0, reach_at = 0;  // the limits from which on each decides (below: under it)
      std::vector<int64_t> short_ends, reach_ends;
      std::vector<int64_t> ends;  // the walk in progress
      // Whether a walk that decides from `at` on is nearer than the one kept on its side.
      bool nearer(bool reached, double at) const {
        return reached ? !has_reach || at < reach_at : !has_short || at > short_at;
      }
      // Keeps the walk in progress (`ends`) on its side, deciding from `at` on.
      void remember(bool reached, double at) {
        (reached ? reach_ends : short_ends).swap(ends);
        (reached ? has_reach : has_short) = true;
        (reached ? reach_at : short_at) = at;
      }
    };
    // lanes_reach's: no walk at t < short_at reaches, every walk at t >= reach_at does (the interval each
    // walk decides, lanes_reach's comment). RuleWalks::zb_reaches': the limits of the walks themselves.
    WalkBrackets lanes, zb;
    // The whole-layer walk of rules_out that last ruled a limit out (0 lanes, 1 flush's, 2 the cycles', 3
    // gpipe's): the next test starts with it. The first starts with the schedule's own walk, cheaper than
    // the lanes' and at 4,096 GPUs the one that most often decides (flush 7%, gpipe 9% faster).
    int last_out = first_walk(c.schedule);
    static int first_walk(Schedule s) {
      switch (s) {
        case Schedule::flush: return 1;
        case Schedule::zb_h1:
        case Schedule::zb_h2: return 2;
        case Schedule::gpipe: return 3;
        default: return 0;
      }
    }
    // rules_out's limit-free parts (filled on its first call): per stage the plain capacity at its in-flight
    // count and the sum of 2 in_fast over the later stages, stage 0's allreduce and update; flush's W(f).
    std::vector<double> plain, ins_after, runs;
    double h0 = 0;
  };
  bool lanes_reach(Probe& p, double t) const;
  bool memory_reaches(const Relaxed& relaxed, int64_t depth) const;
  // lanes_reach at infinity: whether some split of whole layers can fit in memory at all (false proves
  // that none does). Memoised in Shared::memory_fits for the candidates that share what it reads.
  bool memory_fits(Probe& p) const;
  static constexpr int kRuleWalks = 4;  // rules_out's whole-layer walks (Probe::last_out)
  bool rules_out(Probe& p, double limit) const;
  // rules_out's tests of one candidate at one limit (step_bound_rules.cpp): the stages' capacities and
  // the whole-layer walks of flush, zb-h1 / zb-h2 and gpipe.
  class RuleWalks;
  void prepare_rules(Probe& p) const;
  // With `redo_test`, it may stop at a lower bound on its value (its first pass) that already passes
  // flush_redo_rules_out(p, t, ·), for a caller that asks only that then.
  double least_busy(Probe& p, double t, bool redo_test = false) const;
  // The schedules least_busy counts (flush, gpipe): their probes get the stages' W(f_j).
  static bool counts_busy(Schedule s) { return s == Schedule::flush || s == Schedule::gpipe; }
  // The constructor's per-microbatch-size tables at index bi, appended in order: max_layer_ms_, bwd_share_,
  // the totals, the smallest boundary tensors and inputs; weight_share_ and weight_excess_ms_; cp_sorted_,
  // y_sorted_ and bytes_small_.
  void add_layer_extremes(size_t bi);
  void add_weight_share(size_t bi);
  void add_prefix_flags(size_t bi);
  // Whether compute_prefix(bi) and compute less weight prefix (zb's Y) are non-decreasing as doubles: then
  // a test "prefix[e] <= bound" holds on a prefix of e, and a gallop finds the same end as a bisection.
  std::vector<char> cp_sorted_, y_sorted_;
  // Per microbatch index: stash, W-stash and parameter prefixes are non-decreasing and below 2^40 bytes.
  std::vector<char> bytes_small_;

  // W(f) for f = 1..most: the most fwd + bwd (ms per microbatch) of a run of whole layers whose static
  // bytes and f stashes fit the device less the reserve, what a stage keeping f microbatches holds at most
  // without recomputing; non-increasing in f. Memoised per schedule and microbatch index (O(L) per new f);
  // thread-safe. W(f[j]) for each j, into out (f[j] >= 1).
  void plain_runs(Schedule s, size_t bi, const std::vector<int64_t>& f, std::vector<double>& out) const;
  // Whether flush's round trips with `busy` = least_busy(p.c, t) rule out every split of p.c with an
  // objective <= t (p prepared: prepare_rules).
  bool flush_redo_rules_out(const Probe& p, double t, double busy) const;

  const CostModel& model_;
  std::shared_ptr<const SmallestSums> smallest_;  // shared by copies (read only)
  int64_t cap_bytes_ = 0;                       // device memory minus the reserve
  std::vector<double> max_layer_ms_;            // per microbatch index: largest fwd + bwd
  std::vector<double> bwd_share_;               // per microbatch index: the least bwd / (fwd + bwd) of a layer
  std::vector<double> total_fwd_ms_, total_bwd_ms_;  // per microbatch index: all layers, no recompute
  // zb-h1, per microbatch index: the model's W share of its fwd + bwd, and the W of each layer above that
  // share of its own fwd + bwd, summed (see zb_cycle_bound).
  std::vector<double> weight_share_, weight_excess_ms_;
  // ZB-H1's cycles through stage 0 and its round trips with `transfers` ms of boundary transfers on them
  // (step_bound.cpp); ZB-H2's cycles alone, with its trailing W counts; memoised per microbatch index, m
  // and schedule.
  double zb_cycle_bound(const Candidate& c, double transfers);
  // The W's stage k runs after its last B in the cycle (objective.hpp): min(defer + 1, m).
  static double zb_trailing(const Candidate& c, int64_t k);
  // The first stage k whose warm-up w_k leaves m >= w_k + 2: max(1, d - m + 1).
  static int64_t zb_round_trip_stage(const Candidate& c);
  std::map<std::tuple<size_t, int64_t, Schedule>, std::vector<double>> zb_held_;
  std::vector<int64_t> min_out_, min_in_;       // per microbatch index: smallest boundary tensors
  std::vector<int64_t> min_input_any_;          // per microbatch index: smallest input of any layer
  std::array<int64_t, kSchedules> max_layer_static_{};   // per schedule
  int64_t total_grad_bytes_ = 0, first_grad_bytes_ = 0;  // fp32 gradients of all layers / of layer 0
  int64_t least_layer_params_ = 0;                       // the fewest parameter bytes of any layer
  double least_layer_update_ = kInfinity;                // the cheapest layer's update_ms
  // plain_capacity by f (index 0 unused) and its prefix sums, [versions][bi], grown on demand.
  std::array<std::vector<std::vector<double>>, 2> capacity_vals_, capacity_sums_;
  std::vector<std::vector<double>> least_window_;  // [bi][k], -1 until computed
  std::vector<int64_t> least_params_;              // [k]: the fewest parameter bytes of k layers in a row (-1: not yet)
  std::vector<double> least_update_;               // [k]: the least update of k layers in a row (-1: not yet)
  ForcedRedo forced_redo_;
  std::shared_ptr<Shared> shared_;
};

// The thread-safe memos, shared by a bound and its copies.
struct StepLowerBound::Shared {
  std::mutex runs_mutex;
  std::map<std::pair<Schedule, size_t>, std::vector<double>> plain_runs;  // [f - 1]
  // Per (schedule, microbatch index, depth): what is known of whether the relaxed stages can hold every
  // layer at some limit (lanes_reach at infinity, memory_fits) by CostModel::memory_microbatches: they
  // can at every count up to fits_to and at none from fails_from on. The walk reads nothing else of a
  // candidate (not its width or placement, nor m past that), and a stage's stashes only grow with the
  // microbatches (in flight min(d - i, m), all m for gpipe, a split backward's largest deferred shape
  // over m B's), so one walk answers every count on one side of its own.
  struct MemoryRange {
    int64_t fits_to = -1, fails_from = INT64_MAX;
  };
  std::mutex memory_mutex;
  std::map<std::tuple<Schedule, int64_t, int64_t>, MemoryRange> memory_fits;
  std::mutex levels_mutex;
  std::map<std::tuple<int64_t, int64_t, int>, std::shared_ptr<const PlacementLevels>> levels;
  // The stage tables of ended Relaxeds, which the next ones reuse: memory still in the cache, where a
  // new table of a deep candidate's stages would miss on every line of it.
  std::mutex stage_pool_mutex;
  std::vector<std::vector<std::optional<Relaxed::Stage>>> stage_pool;
};

}  // namespace pd2bw::planner

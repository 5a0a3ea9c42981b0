// The analytic cost and memory model of one pipeline stage (DESIGN.md section 5). Pure arithmetic over a
// profile and a cluster: the planner's search, the brute-force reference and the simulator all price a
// stage through this one function, so they agree by construction.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "pd2bw/pipeline/memory.hpp"
#include "pd2bw/pipeline/shape.hpp"
#include "pd2bw/pipeline/stash.hpp"
#include "pd2bw/planner/link_curve.hpp"
#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::planner {

using schemas::Cluster;
using schemas::MemoryBreakdown;
using schemas::Optimizer;
using schemas::Placement;
using schemas::Profile;
using schemas::Schedule;

// Limits on the work one search may take, each refused with a UsageError that names it: the search
// enumerates every depth and replays every microbatch of the plans it keeps.
inline constexpr int64_t kMaxGlobalBatch = int64_t{1} << 24;  // samples per step
inline constexpr int64_t kMaxLayers = int64_t{1} << 16;       // layers in a profile
inline constexpr int64_t kMaxDepth = int64_t{1} << 12;        // pipeline stages (--depth, --max-depth)

// The schedules, for tables indexed by Schedule (2bw, flush, gpipe, zb-h1, interleaved, zb-h2, zb-v).
inline constexpr size_t kSchedules = 7;

// auto_: recompute a stage only when it does not fit otherwise. never / always: pinned.
enum class RecomputePolicy { auto_, never, always };

// What the user fixes; everything unset is searched.
struct Constraints {
  int64_t global_batch = 512;           // samples per optimizer step, = b * m * w
  std::optional<Schedule> schedule;     // pin the schedule
  std::optional<int64_t> microbatch;    // pin b (must be one of the profiled sizes)
  RecomputePolicy recompute = RecomputePolicy::auto_;
  int64_t max_depth = 0;                // largest d to consider; 0 = no limit
  int64_t depth = 0;                    // pin d; 0 = search
  int64_t width = 0;                    // pin w; 0 = search
  int64_t chunks = 0;                   // pin v, model chunks per rank (interleaved, zb-v); 0 = search
  Optimizer optimizer = Optimizer::adamw;
  int64_t reserve_bytes = int64_t{1} << 30;  // subtracted from each device's memory
};

// The memory terms that depend only on the parameters a stage holds (param_bytes in the compute
// dtype): weight versions, fp32 master weights, fp32 gradients and fp32 optimizer moments. The pipeline
// library's memory model, with fp32 state.
using StaticFactors = pipeline::MemoryFactors;

// One point of the search space before the layers are split into stages: a pipeline::PipelineShape
// without its split (bounds, recompute), with the placement that yields its rank table.
namespace detail {
struct FloorTable;  // the chunked memory floor's per-profile table (planner/src/chunk_floor.hpp)
}  // namespace detail

struct Candidate {
  Schedule schedule = Schedule::two_bw;
  int64_t microbatch_index = 0;  // index into Profile::microbatch_sizes
  int64_t microbatch = 0;        // b
  int64_t width = 0;             // w, replicas per stage
  int64_t depth = 0;             // d, stages
  int64_t microbatches = 0;      // m = global_batch / (b * w)
  Placement placement = Placement::replicas_inner;
  int64_t chunks = 1;            // v, model chunks per rank (interleaved >= 2, zb-v 2, else 1): a split
                                 // has d v + 1 bounds, chunk c on position chunk_position(schedule, d, c)
};

// The price of layers [begin, end) placed as stage `stage` of a candidate.
struct StageCost {
  bool feasible = false;     // fits in device memory minus the reserve
  bool recompute = false;    // chosen per the policy (auto_: only when needed)
  int64_t in_flight = 0;     // stashed microbatches at this position
  double compute_ms = 0;     // per microbatch: forward + backward (+ the recomputed forward)
  double p2p_ms = 0;         // per microbatch: the boundary transfers (2 per boundary) of the slowest replica
  double allreduce_ms = 0;   // per step
  double update_ms = 0;      // per step: the optimizer step over the stage's parameters (profiled)
  double step_ms = 0;        // the stage's busy time per step, m (compute + p2p) + allreduce + update, on its
                             // slowest replica: no schedule finishes a step faster
  // The stage's part in the pipeline's fill and drain, per microbatch, on the fastest replica's links:
  double forward_ms = 0;     // forward
  double backward_ms = 0;    // backward, plus the recomputed forward when recomputing
  double weight_ms = 0;      // zb-h1: the weight-gradient half W of backward_ms (0 for other schedules)
  double in_ms = 0;          // one transfer over the input boundary (0 for the first stage)
  double out_ms = 0;         // one transfer over the output boundary (0 for the last stage)
  int64_t over_bytes = 0;    // total - limit of the least-memory option when infeasible, else 0
  MemoryBreakdown memory;    // of the chosen option (or of the least-memory option when infeasible)
};

// The search's objective: the step time of a candidate split into `stages` (their StageCosts, in order),
// a proven lower bound on the steady step the simulator replays (README "How the planner decides"):
// - 2bw: the largest stage step_ms (the slowest stage's busy time per step);
// - flush: the largest, over stages k and stages i <= k, of m x stage k's time per microbatch, plus the
//   drain and refill through stages i..k-1, plus stage i's allreduce and update;
// - gpipe: the largest, over stages i, of one microbatch's forward and backward through stages i..d-1,
//   plus (m - 1) x (the slowest forward + the slowest backward among them), plus stage i's allreduce and
//   update (and never below the largest step_ms).
// - zb-h1: flush's, with the input-gradient halves B on the drain's critical path and each stage's
//   trailing weight-gradient halves W (min(i + 1, m) of them at stage i) after its last B.
// Infinity when a stage is infeasible. The partitioner minimises exactly this.
double step_objective(const Candidate& c, const std::vector<StageCost>& stages);

class CostModel {
 public:
  // Throws UsageError when the constraints cannot apply to this profile/cluster (e.g. a pinned
  // microbatch size that was not profiled, a global batch <= 0, a reserve >= device memory), when a limit
  // above is passed, or when the profile's byte counts overflow 64-bit arithmetic (naming the sum).
  CostModel(const Profile& profile, const Cluster& cluster, const Constraints& constraints);

  const Profile& profile() const { return profile_; }
  const Cluster& cluster() const { return cluster_; }
  const Constraints& constraints() const { return constraints_; }
  int64_t num_layers() const { return static_cast<int64_t>(profile_.layers.size()); }
  int64_t memory_limit_bytes() const;  // one device's memory (the reserve is a term of the total)

  // Prices layers [begin, end) as stage `stage` (0-based) of `c`. Requires 0 <= begin < end <= layers.
  StageCost stage_cost(const Candidate& c, int64_t stage, int64_t begin, int64_t end) const;

  // Microbatches stashed at once at stage `stage`: min(d - stage, m) for 2bw, flush and zb-h1, m for
  // gpipe, min(2 (d - stage) - 1, m) for zb-h2; for a chunked candidate, over all chunks of position
  // `stage` (pipeline::in_flight).
  static int64_t in_flight(const Candidate& c, int64_t stage) {
    return pipeline::in_flight(c.schedule, c.depth, c.microbatches, stage, c.chunks);
  }
  // The microbatches per step a stage's memory depends on: all m for gpipe and the chunked schedules, else
  // min(m, 2 d) (in flight min(d - stage, m); a split backward's deferred shapes have ahead + defer < 2 d),
  // so candidates that differ only past it hold the same bytes.
  static int64_t memory_microbatches(const Candidate& c) {
    const bool all = c.schedule == Schedule::gpipe || c.chunks > 1;
    return all ? c.microbatches : std::min(c.microbatches, 2 * c.depth);
  }
  // Rank of (stage, replica) under the candidate's placement (pipeline::placement_rank).
  static int64_t rank_of(const Candidate& c, int64_t stage, int64_t replica) {
    return pipeline::placement_rank(c.placement, c.depth, c.width, stage, replica);
  }
  // Index of the topology level two ranks talk over (0 = inside a node).
  int64_t level_between(int64_t rank_a, int64_t rank_b) const;
  // Devices in one group of topology level `level` (the product of the sizes of levels 0..level): ranks
  // r and s share a level-`level` group exactly when r / level_span(level) == s / level_span(level).
  int64_t level_span(int64_t level) const { return level_span_[static_cast<size_t>(level)]; }

  // Per-layer compute (fwd + bwd) at microbatch index bi, prefix-summed: compute_prefix(bi)[j] is
  // the sum over layers [0, j).
  const std::vector<double>& compute_prefix(int64_t bi) const { return compute_prefix_[bi]; }
  // Memory that does not depend on the schedule position (weights, master, grads, optimizer) of
  // layers [begin, end) for a schedule; a lower bound on any stage's memory holding those layers.
  int64_t static_bytes(Schedule s, int64_t begin, int64_t end) const {
    return static_factors(s).total(param_prefix_[static_cast<size_t>(end)] - param_prefix_[static_cast<size_t>(begin)]);
  }
  const StaticFactors& static_factors(Schedule s) const { return statics_[static_cast<size_t>(s)]; }
  // Prefix sums over layers [0, j) of forward time, of the recomputed forward (the profile's
  // recompute_ms, or fwd_ms where it is not recorded), of stash bytes (at microbatch index bi) and of
  // parameter bytes.
  const std::vector<double>& fwd_prefix(int64_t bi) const { return fwd_prefix_[static_cast<size_t>(bi)]; }
  const std::vector<double>& redo_prefix(int64_t bi) const { return redo_prefix_[static_cast<size_t>(bi)]; }
  // Prefix sums over layers [0, j) of the profiled optimizer step time (LayerProfile::update_ms; 0 where
  // not recorded). A stage pays its layers' sum once per step.
  const std::vector<double>& update_prefix() const { return update_prefix_; }
  // Whether every layer's backward is timed in halves at every microbatch size (LayerTiming::split):
  // zb-h1 can be priced only then.
  bool split_backward() const { return split_backward_; }
  // Throws UsageError, naming `what` (e.g. "--schedule zb-h1") and the first layer without the halves,
  // unless split_backward().
  void require_split_backward(std::string_view what) const;
  // zb-h1's pricing of the halves, prefix-summed over layers [0, j) at microbatch index bi: the W part of
  // each layer's bwd_ms, bwd_ms x bwd_weight_ms / (bwd_input_ms + bwd_weight_ms) (the fused backward's
  // time divided in the measured ratio, so every schedule is priced with the same total compute), and
  // bwd_weight_stash_bytes. All 0 without the split.
  const std::vector<double>& weight_prefix(int64_t bi) const { return weight_prefix_[static_cast<size_t>(bi)]; }
  const std::vector<int64_t>& weight_stash_prefix(int64_t bi) const {
    return weight_stash_prefix_[static_cast<size_t>(bi)];
  }
  // The measured halves summed over all layers and microbatch sizes, over the fused backwards summed
  // the same way (1 without the split): how far the priced halves are from the measured ones.
  double split_overhead() const { return split_overhead_; }
  const std::vector<int64_t>& stash_prefix(int64_t bi) const { return stash_prefix_[bi]; }
  const std::vector<int64_t>& param_prefix() const { return param_prefix_; }
  // Per layer at microbatch index bi: the activation entering / leaving it (bytes), and p2p_ms of the
  // leaving tensor over level `level`: a boundary after layer j moves output_bytes[j] each way, as the
  // simulator and the executor do (tabulated: the partitioner reads them in its innermost loop).
  const std::vector<int64_t>& input_bytes(int64_t bi) const { return input_bytes_[static_cast<size_t>(bi)]; }
  const std::vector<int64_t>& output_bytes(int64_t bi) const { return output_bytes_[static_cast<size_t>(bi)]; }
  // The least of output_p2p_ms(bi, level) over the layers a boundary can follow (all but the last).
  double least_boundary_p2p_ms(int64_t bi, int64_t level) const {
    return least_boundary_p2p_[static_cast<size_t>(bi)][static_cast<size_t>(level)];
  }
  const std::vector<double>& output_p2p_ms(int64_t bi, int64_t level) const {
    return output_p2p_[static_cast<size_t>(bi)][static_cast<size_t>(level)];
  }

  // Most compute (fwd + bwd, ms per microbatch at microbatch index bi) a stage that keeps f microbatches
  // in flight can hold without recomputing under schedule s: (memory - reserve) times the largest
  // (fwd + bwd) / (static + f * stash) of any layer; infinity when some layer needs no memory.
  // Tabulated for f up to min(layers, devices); safe to call from several threads.
  double plain_capacity_ms(Schedule s, int64_t bi, int64_t f) const;
  // Smallest redo / (fwd + bwd) of any layer at microbatch index bi (redo: the recomputed forward): a
  // stage that recomputes spends at least (1 + this) times its compute.
  double min_redo_share(int64_t bi) const { return min_redo_share_[static_cast<size_t>(bi)]; }
  // The least redo (ms per microbatch at microbatch index bi) of layers holding `compute` ms of fwd + bwd,
  // fractions of layers allowed: the layers by redo share ascending (each share capped at 1), a
  // fractional knapsack. Convex and non-decreasing in `compute`, with slope at most 1. O(log L).
  double least_redo_ms(int64_t bi, double compute) const;
  // The same, starting the search at `segment` (0 at first) and leaving there the piece `compute` fell in:
  // a caller whose `compute` rarely falls pays O(1) amortised per call.
  double least_redo_ms(int64_t bi, double compute, size_t& segment) const;

  // Time to move `bytes` point to point over level `level` (ms): read off the level's p2p_curve when it
  // has one (LinkCurve::ms_at), else bytes / bandwidth + latency.
  // Defined inline: the partitioner calls both in its innermost loop.
  double p2p_ms(int64_t bytes, int64_t level) const {
    const auto lv = static_cast<size_t>(level);
    if (!p2p_curves_[lv].empty()) return p2p_curves_[lv].ms_at(bytes);
    const auto& l = cluster_.levels[lv];
    return static_cast<double>(bytes) / (l.p2p_gbps * 1e6) + l.p2p_latency_ms;
  }
  // Ring allreduce of `bytes` over `width` ranks spanning level `level`:
  // 2 (w - 1) / w * bytes / busbw + latency (ms); 0 when width is 1. With an allreduce_curve, the
  // curve's time at this size scaled by the ring factor (curve_allreduce_ms); the measured times hold
  // the latency already. Non-decreasing in bytes either way.
  double allreduce_ms(int64_t bytes, int64_t width, int64_t level) const {
    return width <= 1 ? 0.0 : allreduce_at(width, level)(bytes);
  }
  // allreduce_ms(bytes, width, level) at a fixed width > 1 and level, what does not depend on the bytes
  // worked out once (the same value, bit for bit: the ring factor is the same double either way). The
  // partitioner keeps one per level (PreparedCandidate) and asks it in its inner loops. It points into
  // this model's curves: valid while the model lives, and only for it.
  struct AllreduceAt {
    const LinkCurve* curve = nullptr;  // the level's measured curve, or the ring formula's terms below
    int64_t ranks = 0, width = 2;
    double ring = 0, busbw = 1, latency = 0;  // 2 (w - 1) / w, the bus bandwidth in bytes per ms
    double operator()(int64_t bytes) const {
      if (curve) return curve_allreduce_ms(*curve, ranks, bytes, width);  // latency included
      return ring * static_cast<double>(bytes) / busbw + latency;
    }
  };
  AllreduceAt allreduce_at(int64_t width, int64_t level) const {
    const auto lv = static_cast<size_t>(level);
    const auto& l = cluster_.levels[lv];
    AllreduceAt at;
    at.width = width;
    if (!allreduce_curves_[lv].empty()) {
      at.curve = &allreduce_curves_[lv];
      at.ranks = l.allreduce_ranks;
      return at;
    }
    const double w = static_cast<double>(width);
    at.ring = 2.0 * (w - 1.0) / w;
    at.busbw = l.allreduce_busbw_gbps * 1e6;
    at.latency = l.p2p_latency_ms;
    return at;
  }
  // The stash walks (pipeline::stash_walk) of every position of candidate c's schedule, without and with
  // recompute: (*result)[position][recompute ? 1 : 0]. They depend on (schedule, d, m, v) only and cost
  // O(m v) per position, so they are memoised (thread-safe; copies of the model share the memo).
  using PositionWalks = std::vector<std::array<pipeline::StashWalk, 2>>;
  std::shared_ptr<const PositionWalks> position_walks(const Candidate& c) const;
  // The chunked memory floor's table for schedule `kind` at microbatch index `microbatch_index`
  // (detail::make_floor_table): O(L log L) to build, so memoised the same way (thread-safe; shared by
  // copies of the model).
  std::shared_ptr<const detail::FloorTable> floor_table(Schedule kind, int64_t microbatch_index) const;
  // A lower bound (ms) on the summed allreduce_ms of `parts` stages whose gradients add up to `bytes`,
  // each over `width` ranks at level `level`. Exact for the scalar model, which is affine in bytes:
  // parts * latency + (allreduce_ms(bytes) - latency). A curve is only known to be non-decreasing, so
  // then: the largest stage (>= bytes / parts) pays allreduce_ms(bytes / parts), the others allreduce_ms(0).
  double allreduce_sum_floor(int64_t bytes, int64_t parts, int64_t width, int64_t level) const;
  // The levels the replicas' links between stages left_stage and left_stage + 1 cross, one entry per
  // replica (replica order).
  std::vector<int64_t> boundary_levels(const Candidate& c, int64_t left_stage) const;
  // Level spanned by the replicas of `stage`.
  int64_t allreduce_level(const Candidate& c, int64_t stage) const;

 private:
  // Appends least_redo_ms's tables of microbatch index bi (called for bi = 0, 1, ... once its compute_prefix
  // and redo_prefix are built).
  void build_redo_shares(size_t bi);

  struct WalkMemo;  // cost_model.cpp
  std::shared_ptr<WalkMemo> walks_;
  Profile profile_;
  Cluster cluster_;
  Constraints constraints_;
  std::vector<int64_t> level_span_;                 // devices per group at each level
  std::vector<int> level_shift_;                    // log2 of each span, -1 where it is no power of two
  std::vector<LinkCurve> p2p_curves_, allreduce_curves_;  // per level; empty when not measured
  // Fills p2p_curves_ and allreduce_curves_ from the cluster; throws UsageError on a malformed curve or
  // an allreduce curve without allreduce_ranks >= 2 (clusters built in code skip the readers' checks).
  void prepare_curves();
  // Fills the split-backward tables (weight_prefix_, ...); throws UsageError when zb-h1 is pinned and the
  // profile lacks the halves (require_split_backward).
  void prepare_split();
  // Throws UsageError when the whole model's weights and optimizer state overflow 64-bit bytes.
  void check_state_bytes() const;
  std::array<StaticFactors, kSchedules> statics_;    // per schedule
  std::vector<int64_t> param_prefix_;               // bytes
  std::vector<std::vector<double>> compute_prefix_;  // [microbatch index][layer + 1]
  std::vector<std::vector<double>> fwd_prefix_, redo_prefix_;
  std::vector<double> update_prefix_;                // [layer + 1], ms
  bool split_backward_ = false;
  double split_overhead_ = 1.0;
  std::vector<std::vector<double>> weight_prefix_;          // [microbatch index][layer + 1], ms
  std::vector<std::vector<int64_t>> weight_stash_prefix_;  // [microbatch index][layer + 1], bytes
  std::vector<std::vector<int64_t>> stash_prefix_;
  std::vector<double> min_redo_share_;               // [microbatch index]
  // least_redo_ms's tables per microbatch index: prefix sums of the layers' compute and capped redo, by
  // redo share ascending.
  std::vector<std::vector<double>> by_share_compute_, by_share_redo_;
  std::vector<std::vector<int64_t>> input_bytes_, output_bytes_;        // [microbatch index][layer]
  std::vector<std::vector<std::vector<double>>> output_p2p_;  // [mb index][level][layer]
  std::vector<std::vector<double>> least_boundary_p2p_;       // [mb index][level]
  std::array<std::vector<int64_t>, 2> layer_static_;  // static bytes per layer, [1 or 2 weight versions]
  // The layers that can attain plain_capacity_ms's maximum, [1 or 2 versions][mb index].
  std::array<std::vector<std::vector<size_t>>, 2> capacity_front_;
  std::vector<size_t> capacity_front(size_t versions, size_t bi) const;
  double compute_plain_capacity(size_t versions, size_t bi, int64_t f) const;
  // plain_capacity_ms by [1 or 2 versions][mb index][f], f = 0 .. min(layers, devices).
  std::array<std::vector<std::vector<double>>, 2> capacity_cache_;
};

}  // namespace pd2bw::planner

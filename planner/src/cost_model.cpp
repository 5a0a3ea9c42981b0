// The analytic stage cost and memory model (DESIGN.md section 5); step_objective over the priced stages
// is in step_objective.cpp.
#include "pd2bw/planner/cost_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <mutex>
#include <tuple>

#include "pd2bw/checked.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/planner/runtime_costs.hpp"
#include "chunk_floor.hpp"
#include "objective.hpp"
#include "prepared.hpp"

namespace pd2bw::planner {

namespace {

void check_constraints(const Profile& profile, const Cluster& cluster, const Constraints& k) {
  if (k.global_batch <= 0)
    throw UsageError(fmt::format("--global-batch must be > 0 samples, got {}", k.global_batch));
  if (k.global_batch > kMaxGlobalBatch)
    throw UsageError(fmt::format("--global-batch {} is above the planner's limit of {} samples per step",
                                 k.global_batch, kMaxGlobalBatch),
                     "plan a smaller global batch; the planner replays every microbatch of a step");
  if (static_cast<int64_t>(profile.layers.size()) > kMaxLayers)
    throw UsageError(fmt::format("the profile has {} layers, above the planner's limit of {}", profile.layers.size(),
                                 kMaxLayers),
                     "merge layers in the profile (e.g. one entry per transformer block)");
  if (k.depth < 0 || k.width < 0) throw UsageError("--depth and --width must be >= 0 (0 = search)");
  if (k.max_depth < 0)
    throw UsageError(fmt::format("--max-depth must be >= 0 (0 = no limit), got {}", k.max_depth));
  if (k.reserve_bytes < 0)
    throw UsageError("--reserve must be >= 0 bytes");
  if (k.reserve_bytes >= cluster.device.memory_bytes)
    throw UsageError(fmt::format("--reserve ({}) leaves no device memory (device has {})",
                                 schemas::format_bytes(k.reserve_bytes),
                                 schemas::format_bytes(cluster.device.memory_bytes)),
                     "lower --reserve or raise --device-memory");
  if (cluster.total_devices() < 1) throw UsageError("the cluster has no devices");
  if (cluster.levels.size() > 8)  // the partitioner's link tables hold up to 8 levels per boundary
    throw UsageError(fmt::format("the cluster has {} topology levels; the planner handles at most 8",
                                 cluster.levels.size()));
  if (k.depth > kMaxDepth || k.max_depth > kMaxDepth)
    throw UsageError(fmt::format("--depth and --max-depth must be <= {} stages (the planner's limit), got {}", kMaxDepth,
                                 std::max(k.depth, k.max_depth)));
  if (k.microbatch) {
    const auto& sizes = profile.microbatch_sizes;
    if (std::find(sizes.begin(), sizes.end(), *k.microbatch) == sizes.end()) {
      std::string list;
      for (auto b : sizes) {
        if (!list.empty()) list += ',';
        list += std::to_string(b);
      }
      throw UsageError(fmt::format("--microbatch {} was not profiled", *k.microbatch),
                       fmt::format("the profile has microbatch sizes {}; pick one of them or re-profile",
                                   list));
    }
  }
}

// The planner prices a layer's optimizer state as AdamW's two fp32 moments of its parameters
// (MemoryFactors); a profile that records another optimizer_bytes would be silently ignored, so it is refused.
void check_optimizer_bytes(const Profile& profile) {
  const int64_t size = schemas::dtype_bytes(profile.model.dtype);
  for (size_t j = 0; j < profile.layers.size(); ++j) {
    const auto& l = profile.layers[j];
    if (l.optimizer_bytes == 0) continue;
    const int64_t priced = saturating_mul(l.param_bytes / size, 8);
    if (l.optimizer_bytes != priced)
      throw SchemaError(fmt::format("/layers/{}/optimizer_bytes: is {} but the planner prices this layer's optimizer "
                                    "state as two fp32 moments of its {} parameters ({} param_bytes / {} bytes): {}",
                                    j, l.optimizer_bytes, l.param_bytes / size, l.param_bytes, size, priced),
                        "re-profile with `pd2bw profile`, or drop optimizer_bytes (the planner computes it from "
                        "param_bytes)");
  }
}

// Step times are sums of the layers' times over the microbatches of a step: a profile whose sums do not fit
// a double at any microbatch size is refused here, instead of every plan looking infeasible (issue 28).
void check_time_sums(const Profile& profile, int64_t global_batch) {
  double least = std::numeric_limits<double>::infinity();
  for (size_t bi = 0; bi < profile.microbatch_sizes.size(); ++bi) {
    double sum = 0;
    for (const auto& l : profile.layers) {
      const auto& t = l.per_microbatch[bi];
      sum += t.fwd_ms + t.bwd_ms + std::max(t.recompute_ms, t.fwd_ms) + l.update_ms;
    }
    const int64_t b = profile.microbatch_sizes[bi];
    least = std::min(least, sum * static_cast<double>(std::max<int64_t>(1, global_batch / b)));
  }
  if (!std::isfinite(least))
    throw SchemaError(fmt::format("/layers: the layers' times (fwd_ms + bwd_ms + recompute) summed over a step of "
                                  "global batch {} do not fit a double at any microbatch size: time overflows",
                                  global_batch),
                      "check the profile's times (milliseconds per microbatch), or re-profile with `pd2bw profile`");
}

}  // namespace

struct CostModel::WalkMemo {
  std::mutex mutex;
  std::map<std::tuple<Schedule, int64_t, int64_t, int64_t>, std::shared_ptr<const PositionWalks>> walks;
  std::map<std::pair<Schedule, int64_t>, std::shared_ptr<const detail::FloorTable>> floors;
};

std::shared_ptr<const detail::FloorTable> CostModel::floor_table(Schedule kind, int64_t microbatch_index) const {
  const auto key = std::make_pair(kind, microbatch_index);
  {
    const std::lock_guard<std::mutex> lock(walks_->mutex);
    if (const auto it = walks_->floors.find(key); it != walks_->floors.end()) return it->second;
  }
  auto table = detail::make_floor_table(*this, kind, microbatch_index);  // outside the lock: O(L log L)
  const std::lock_guard<std::mutex> lock(walks_->mutex);
  return walks_->floors.emplace(key, std::move(table)).first->second;
}

std::shared_ptr<const CostModel::PositionWalks> CostModel::position_walks(const Candidate& c) const {
  // Candidates whose m walks alike (pipeline::walk_microbatches) share one entry.
  const int64_t m = pipeline::walk_microbatches(c.schedule, c.depth, c.microbatches);
  const auto key = std::make_tuple(c.schedule, c.depth, m, c.chunks);
  {
    const std::lock_guard<std::mutex> lock(walks_->mutex);
    if (const auto it = walks_->walks.find(key); it != walks_->walks.end()) return it->second;
  }
  auto out = std::make_shared<PositionWalks>();
  const pipeline::ScheduleSpec spec{c.schedule, c.depth, m, 1, 1, c.chunks};
  for (int64_t p = 0; p < c.depth; ++p) {
    auto [plain, redo] = pipeline::stash_walks(spec, p);
    out->push_back({std::move(plain), std::move(redo)});
  }
  const std::lock_guard<std::mutex> lock(walks_->mutex);
  if (walks_->walks.size() >= 1024) walks_->walks.clear();  // a bound on the memo, far above one search's use
  return walks_->walks.emplace(key, std::move(out)).first->second;
}

CostModel::CostModel(const Profile& profile, const Cluster& cluster, const Constraints& constraints)
    : walks_(std::make_shared<WalkMemo>()),
      profile_(with_runtime_costs(profile)),
      cluster_(cluster),
      constraints_(constraints) {
  check_constraints(profile_, cluster_, constraints_);
  for (size_t i = 0; i < kSchedules; ++i) {  // fp32 state
    const auto s = static_cast<Schedule>(i);
    statics_[static_cast<size_t>(s)] =
        pipeline::memory_factors(s, constraints_.optimizer, schemas::dtype_bytes(profile_.model.dtype), 4);
  }
  int64_t span = 1;
  for (const auto& level : cluster_.levels) {
    span = checked_mul(span, level.size, "the cluster's device count");
    level_span_.push_back(span);
    level_shift_.push_back(exact_log2(static_cast<uint64_t>(span)));
  }
  prepare_curves();
  const size_t n = profile_.layers.size();
  const size_t nb = profile_.microbatch_sizes.size();
  param_prefix_.assign(n + 1, 0);
  update_prefix_.assign(n + 1, 0.0);
  compute_prefix_.assign(nb, std::vector<double>(n + 1, 0.0));
  fwd_prefix_.assign(nb, std::vector<double>(n + 1, 0.0));
  redo_prefix_.assign(nb, std::vector<double>(n + 1, 0.0));
  stash_prefix_.assign(nb, std::vector<int64_t>(n + 1, 0));
  for (size_t j = 0; j < n; ++j) {
    const auto& layer = profile_.layers[j];
    param_prefix_[j + 1] = checked_add(param_prefix_[j], layer.param_bytes, "the model's param_bytes summed over layers");
    update_prefix_[j + 1] = update_prefix_[j] + layer.update_ms;
    for (size_t bi = 0; bi < nb; ++bi) {
      const auto& t = layer.per_microbatch[bi];
      compute_prefix_[bi][j + 1] = compute_prefix_[bi][j] + (t.fwd_ms + t.bwd_ms);
      fwd_prefix_[bi][j + 1] = fwd_prefix_[bi][j] + t.fwd_ms;
      redo_prefix_[bi][j + 1] = redo_prefix_[bi][j] + (t.recompute_ms > 0 ? t.recompute_ms : t.fwd_ms);
      stash_prefix_[bi][j + 1] = checked_add(stash_prefix_[bi][j], t.stash_bytes, "the model's stash_bytes summed over layers");
    }
  }
  check_state_bytes();
  check_optimizer_bytes(profile_);
  check_time_sums(profile_, constraints_.global_batch);
  prepare_split();
  input_bytes_.assign(nb, {});
  output_bytes_.assign(nb, {});
  output_p2p_.assign(nb, std::vector<std::vector<double>>(cluster_.levels.size()));
  for (size_t bi = 0; bi < nb; ++bi)
    for (const auto& l : profile_.layers) {
      const auto& t = l.per_microbatch[bi];
      input_bytes_[bi].push_back(t.input_bytes);
      output_bytes_[bi].push_back(t.output_bytes);
      for (size_t lv = 0; lv < cluster_.levels.size(); ++lv)
        output_p2p_[bi][lv].push_back(p2p_ms(t.output_bytes, static_cast<int64_t>(lv)));
    }
  least_boundary_p2p_.assign(nb, std::vector<double>(cluster_.levels.size(), 0.0));
  for (size_t bi = 0; bi < nb; ++bi)
    for (size_t lv = 0; lv < cluster_.levels.size(); ++lv) {
      const auto& t = output_p2p_[bi][lv];
      least_boundary_p2p_[bi][lv] = *std::min_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(std::max<size_t>(n - 1, 1)));
    }
  for (size_t bi = 0; bi < nb; ++bi) {
    double share = 1.0;
    for (const auto& l : profile_.layers) {
      const auto& t = l.per_microbatch[bi];
      share = std::min(share, (t.recompute_ms > 0 ? t.recompute_ms : t.fwd_ms) / (t.fwd_ms + t.bwd_ms));
    }
    min_redo_share_.push_back(share);
    build_redo_shares(bi);
  }
  for (auto& per_b : capacity_cache_) per_b.assign(nb, {});
  for (int64_t j = 0; j < num_layers(); ++j) {
    layer_static_[0].push_back(static_bytes(Schedule::flush, j, j + 1));
    layer_static_[1].push_back(static_bytes(Schedule::two_bw, j, j + 1));
  }
  // In-flight counts up to the deepest pipeline are tabulated; larger ones (GPipe's m) are computed on
  // demand. The table is never written after construction, so concurrent searches may read it.
  const int64_t deepest = std::min(num_layers(), cluster_.total_devices());
  for (size_t v = 0; v < 2; ++v)
    for (size_t bi = 0; bi < nb; ++bi) {
      capacity_front_[v].push_back(capacity_front(v, bi));
      auto& cache = capacity_cache_[v][bi];
      for (int64_t f = 0; f <= deepest; ++f) cache.push_back(compute_plain_capacity(v, bi, f));
    }
}

// The largest memory any stage can need is that of all layers on one stage: if the weights, master copy,
// gradients and optimizer state of the whole model fit in 64 bits, every stage's do, so the partitioner's
// inner loops can add them unchecked. Too large a profile is refused here, with the numbers.
void CostModel::check_state_bytes() const {
  const int64_t params = param_prefix_.back();
  const StaticFactors& f = statics_[static_cast<size_t>(Schedule::two_bw)];  // the most versions
  const int64_t state = checked_mul(params / f.compute_bytes, f.state_bytes, "the model's fp32 state bytes");
  int64_t total = checked_mul(f.versions, params, "the model's weight versions");
  total = checked_add(total, state, "the model's weights and master copy");
  total = checked_add(total, state, "the model's weights and gradients");
  (void)checked_add(total, checked_mul(f.moments, state, "the model's optimizer state"),
                    "the model's weights, gradients and optimizer state");
}

void CostModel::prepare_split() {
  const size_t n = profile_.layers.size(), nb = profile_.microbatch_sizes.size();
  weight_prefix_.assign(nb, std::vector<double>(n + 1, 0.0));
  weight_stash_prefix_.assign(nb, std::vector<int64_t>(n + 1, 0));
  split_backward_ = n > 0 && std::all_of(profile_.layers.begin(), profile_.layers.end(), [](const auto& layer) {
    return std::all_of(layer.per_microbatch.begin(), layer.per_microbatch.end(), [](const auto& t) { return t.split; });
  });
  if (constraints_.schedule && schemas::splits_backward(*constraints_.schedule))
    require_split_backward(fmt::format("--schedule {}", schemas::to_string(*constraints_.schedule)));
  if (!split_backward_) return;  // zb-h1 cannot be priced: the tables stay 0
  double halves = 0.0, fused = 0.0;
  for (size_t j = 0; j < n; ++j)
    for (size_t bi = 0; bi < nb; ++bi) {
      const auto& t = profile_.layers[j].per_microbatch[bi];
      const double measured = t.bwd_input_ms + t.bwd_weight_ms;
      const double w = measured > 0 ? t.bwd_ms * (t.bwd_weight_ms / measured) : 0.0;
      weight_prefix_[bi][j + 1] = weight_prefix_[bi][j] + w;
      weight_stash_prefix_[bi][j + 1] = saturating_add(weight_stash_prefix_[bi][j], t.bwd_weight_stash_bytes);
      halves += measured;
      fused += t.bwd_ms;
    }
  if (fused > 0) split_overhead_ = halves / fused;
}

void CostModel::require_split_backward(std::string_view what) const {
  if (split_backward_) return;
  for (const auto& layer : profile_.layers)
    for (const auto& t : layer.per_microbatch)
      if (!t.split)
        throw UsageError(fmt::format("{} needs the backward timed in halves, and the profile's layer '{}' does not "
                                     "have them at microbatch {}",
                                     what, layer.name, t.microbatch),
                         "re-profile with 'pd2bw profile' (it records bwd_input_ms, bwd_weight_ms and "
                         "bwd_weight_stash_bytes for every layer), or plan another schedule");
  throw UsageError(fmt::format("{} needs the backward timed in halves, and the profile has no layers", what));
}

void CostModel::prepare_curves() {
  for (const auto& level : cluster_.levels) {
    const std::string what = fmt::format("cluster level \"{}\"", level.name);
    // the innermost level's at the runtime's measured boundary work (runtime_costs.hpp)
    p2p_curves_.emplace_back(p2p_curves_.empty() ? runtime_p2p_curve(profile_, level) : level.p2p_curve,
                             what + " p2p_curve");
    allreduce_curves_.emplace_back(level.allreduce_curve, what + " allreduce_curve");
    if (!level.allreduce_curve.empty() && level.allreduce_ranks < 2)
      throw UsageError(fmt::format("{}: allreduce_ranks must be >= 2 with an allreduce_curve, got {}", what,
                                   level.allreduce_ranks),
                       "give the number of ranks the allreduce curve was measured over");
  }
}

double CostModel::allreduce_sum_floor(int64_t bytes, int64_t parts, int64_t width, int64_t level) const {
  const double d = static_cast<double>(parts);
  const double latency = allreduce_ms(0, width, level);
  if (allreduce_curves_[static_cast<size_t>(level)].empty())
    return d * latency + (allreduce_ms(bytes, width, level) - latency);
  return (d - 1.0) * latency + allreduce_ms(bytes / std::max<int64_t>(parts, 1), width, level);
}

// plain_capacity_ms maximises (fwd + bwd) / (static + f * stash) over layers, i.e. minimises
// static / c + f * stash / c with c = fwd + bwd. A layer beaten on both terms by another never attains
// the maximum for any f >= 0, so only the Pareto front of (static / c, stash / c) is kept.
std::vector<size_t> CostModel::capacity_front(size_t versions, size_t bi) const {
  struct Point {
    double a, b;
    size_t j;
  };
  std::vector<Point> pts;
  for (size_t j = 0; j < profile_.layers.size(); ++j) {
    const auto& t = profile_.layers[j].per_microbatch[bi];
    const double c = t.fwd_ms + t.bwd_ms;
    pts.push_back({static_cast<double>(layer_static_[versions][j]) / c, static_cast<double>(t.stash_bytes) / c, j});
  }
  std::sort(pts.begin(), pts.end(), [](const Point& x, const Point& y) {
    return x.a != y.a ? x.a < y.a : x.b < y.b;
  });
  std::vector<size_t> front;
  double least_b = std::numeric_limits<double>::infinity();
  for (const auto& p : pts)
    if (p.b < least_b) {
      least_b = p.b;
      front.push_back(p.j);
    }
  return front;
}

double CostModel::plain_capacity_ms(Schedule s, int64_t bi, int64_t f) const {
  const auto& cache = capacity_cache_[s == Schedule::two_bw ? 1 : 0][static_cast<size_t>(bi)];
  if (f >= 0 && static_cast<size_t>(f) < cache.size()) return cache[static_cast<size_t>(f)];
  return compute_plain_capacity(s == Schedule::two_bw ? 1 : 0, static_cast<size_t>(bi), f);
}

double CostModel::compute_plain_capacity(size_t versions, size_t bi, int64_t f) const {
  const auto& statics = layer_static_[versions];
  double ratio = 0.0;
  for (const size_t j : capacity_front_[versions][bi]) {
    const auto& t = profile_.layers[j].per_microbatch[bi];
    const double bytes =
        static_cast<double>(statics[j]) + static_cast<double>(f) * static_cast<double>(t.stash_bytes);
    ratio = bytes > 0.0 ? std::max(ratio, (t.fwd_ms + t.bwd_ms) / bytes)
                        : std::numeric_limits<double>::infinity();
  }
  return ratio * static_cast<double>(memory_limit_bytes() - constraints_.reserve_bytes);
}

int64_t CostModel::memory_limit_bytes() const { return cluster_.device.memory_bytes; }

int64_t CostModel::level_between(int64_t rank_a, int64_t rank_b) const {
  // Ranks are never negative, so a power-of-two span's quotient is a shift (the division is most of
  // this function's time otherwise).
  const bool shifts = rank_a >= 0 && rank_b >= 0;
  for (size_t k = 0; k < level_span_.size(); ++k) {
    const int shift = level_shift_[k];
    if (shifts && shift >= 0 ? (rank_a >> shift) == (rank_b >> shift)
                             : rank_a / level_span_[k] == rank_b / level_span_[k])
      return static_cast<int64_t>(k);
  }
  return static_cast<int64_t>(level_span_.size()) - 1;
}

// A set of ranks shares a group at some level exactly when its smallest and largest rank do, because
// groups are contiguous rank ranges; that keeps allreduce_level O(levels).
std::vector<int64_t> CostModel::boundary_levels(const Candidate& c, int64_t left_stage) const {
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(c.width));
  for (int64_t r = 0; r < c.width; ++r)
    out.push_back(level_between(rank_of(c, left_stage, r), rank_of(c, left_stage + 1, r)));
  return out;
}

int64_t CostModel::allreduce_level(const Candidate& c, int64_t stage) const {
  return level_between(rank_of(c, stage, 0), rank_of(c, stage, c.width - 1));
}


StageCost CostModel::stage_cost(const Candidate& c, int64_t stage, int64_t begin, int64_t end) const {
  if (begin < 0 || end > num_layers() || begin >= end || stage < 0 || stage >= c.depth)
    throw Error(fmt::format("stage_cost: bad range [{}, {}) for stage {} of {}", begin, end, stage,
                            c.depth));
  return detail::price_stage(detail::prepare(*this, c), stage, begin, end);
}

}  // namespace pd2bw::planner

// The forced-recompute lower bound (forced_redo.hpp): longest fitting runs by two pointers, the cheapest
// redo of a number of parameter bytes from the layers sorted by redo per byte, and of a number of layers.
#include "forced_redo.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <utility>
#include <numeric>

#include "bisect.hpp"
#include "pd2bw/checked.hpp"

namespace pd2bw::planner {

ForcedRedo::ForcedRedo(const CostModel& model) : model_(model) {
  cap_bytes_ = model.memory_limit_bytes() - model.constraints().reserve_bytes;
  const auto& pp = model.param_prefix();
  const size_t n = static_cast<size_t>(model.num_layers());
  const size_t sizes = model.profile().microbatch_sizes.size();
  for (size_t bi = 0; bi < sizes; ++bi) {
    const auto& rp = model.redo_prefix(static_cast<int64_t>(bi));
    auto params = [&](size_t j) { return pp[j + 1] - pp[j]; };
    auto redo = [&](size_t j) { return rp[j + 1] - rp[j]; };
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), size_t{0});
    // Ascending redo / params, compared as redo_a * params_b < redo_b * params_a (layers without
    // parameters go last: they cover none).
    std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) {
      return redo(a) * static_cast<double>(params(b)) < redo(b) * static_cast<double>(params(a));
    });
    std::vector<int64_t> ps{0};
    std::vector<double> rs{0.0};
    for (size_t j : order) {
      ps.push_back(ps.back() + params(j));  // the whole model's parameter bytes are checked to fit 64 bits
      rs.push_back(rs.back() + redo(j));
    }
    params_by_ratio_.push_back(std::move(ps));
    redo_by_ratio_.push_back(std::move(rs));
    std::vector<double> each(n);
    for (size_t j = 0; j < n; ++j) each[j] = redo(j);
    std::sort(each.begin(), each.end());
    std::vector<double> cheapest{0.0};
    for (double r : each) cheapest.push_back(cheapest.back() + r);
    cheapest_layers_.push_back(std::move(cheapest));
  }
  for (auto& per_s : runs_) per_s.resize(sizes);
}

const ForcedRedo::Run& ForcedRedo::longest_run(Schedule s, size_t bi, int j) {
  auto& memo = runs_[static_cast<size_t>(s)][bi];
  const auto slot = static_cast<size_t>(j);
  if (memo.size() <= slot) memo.resize(slot + 1);
  Run& r = memo[slot];
  if (r.compute_ms >= 0.0) return r;
  const auto& cp = model_.compute_prefix(static_cast<int64_t>(bi));
  const auto& sp = model_.stash_prefix(static_cast<int64_t>(bi));
  const auto& pp = model_.param_prefix();
  const int64_t L = model_.num_layers(), f = int64_t{1} << j;
  auto fits = [&](int64_t a, int64_t e) {
    const int64_t stash = saturating_mul(f, sp[static_cast<size_t>(e)] - sp[static_cast<size_t>(a)]);
    return saturating_add(model_.static_bytes(s, a, e), stash) <= cap_bytes_;
  };
  r.compute_ms = 0.0;
  for (int64_t a = 0, e = 0; a < L; ++a) {  // a run that fits still fits without its first layer
    e = std::max(e, a);
    while (e < L && fits(a, e + 1)) ++e;
    r.compute_ms = std::max(r.compute_ms, cp[static_cast<size_t>(e)] - cp[static_cast<size_t>(a)]);
    r.params = std::max(r.params, pp[static_cast<size_t>(e)] - pp[static_cast<size_t>(a)]);
    r.layers = std::max(r.layers, e - a);
  }
  return r;
}

double ForcedRedo::cheapest_redo(size_t bi, int64_t params) const {
  const auto& ps = params_by_ratio_[bi];
  const auto& rs = redo_by_ratio_[bi];
  if (params <= 0) return 0.0;
  if (params >= ps.back()) return rs.back();
  const auto k = static_cast<size_t>(std::upper_bound(ps.begin(), ps.end(), params) - ps.begin()) - 1;
  const double part = static_cast<double>(params - ps[k]) / static_cast<double>(ps[k + 1] - ps[k]);
  return rs[k] + part * (rs[k + 1] - rs[k]);
}

namespace {

// The least `total - (what the plain stages hold)` over the ways to pick the stages that recompute: the
// plain ones hold at most their caps (groups of (cap, number of stages), in any order), the others at
// most `any_cap`, and together they must hold `total`. Moving the stages with the smallest caps first is
// best (each gives the most room and takes the least away), and a fractional number of moved stages
// keeps it a lower bound. Caps the groups and sorts them in place.
double least_recomputed(std::vector<std::pair<double, double>>& groups, double any_cap, double total) {
  double plain = 0.0;
  for (auto& [cap, count] : groups) {
    cap = std::min(cap, any_cap);
    plain += cap * count;
  }
  if (plain >= total) return 0.0;
  std::sort(groups.begin(), groups.end());
  double room = plain;  // what all stages can hold with the moved ones recomputing
  for (const auto& [cap, count] : groups) {
    const double gain = any_cap - cap;
    if (gain <= 0.0) break;  // caps only grow from here: no choice makes room
    const double needed = total - room;
    if (gain * count >= needed) return total - (plain - cap * needed / gain);
    room += gain * count;
    plain -= cap * count;
  }
  return total;  // no choice holds everything: no split fits, and any bound is valid
}

}  // namespace

std::vector<int64_t> stages_by_stash_bucket(const Candidate& c) {
  std::vector<int64_t> count;
  if (c.chunks == 1 && c.schedule != Schedule::interleaved && c.schedule != Schedule::zb_v) {
    // min(d - k, m), m or min(2 (d - k) - 1, m): the stages holding at least x are the first reaching(x),
    // and bucket j is reaching(2^j) - reaching(2^(j+1)), each prefix found once.
    const int64_t most = c.depth < 1 ? 0 : CostModel::in_flight(c, 0);
    auto reaching = [&](int64_t x) {
      if (most < x) return int64_t{0};
      return detail::last_true(int64_t{0}, c.depth - 1, [&](int64_t k) { return CostModel::in_flight(c, k) >= x; }) + 1;
    };
    int64_t from = reaching(1);
    for (int j = 0; j < 62 && (int64_t{1} << j) <= most; ++j) {
      const int64_t next = reaching(int64_t{1} << (j + 1));
      count.push_back(from - next);
      from = next;
    }
    return count;
  }
  for (int64_t k = 0; k < c.depth; ++k) {
    const auto j = static_cast<size_t>(std::bit_width(static_cast<uint64_t>(CostModel::in_flight(c, k))) - 1);
    if (count.size() <= j) count.resize(j + 1, 0);
    ++count[j];
  }
  return count;
}

const std::vector<int64_t>& ForcedRedo::stages_by_stashes(const Candidate& c) {
  auto [it, added] = stages_by_stashes_.try_emplace({c.schedule, c.depth, c.microbatches, c.chunks});
  if (added) it->second = stages_by_stash_bucket(c);
  return it->second;
}

double ForcedRedo::operator()(const Candidate& c) {
  const auto bi = static_cast<size_t>(c.microbatch_index);
  const auto policy = model_.constraints().recompute;
  if (policy == RecomputePolicy::never) return 0.0;
  if (policy == RecomputePolicy::always) return redo_by_ratio_[bi].back();
  const double all = model_.compute_prefix(c.microbatch_index).back();
  const int64_t L = model_.num_layers();
  const std::vector<int64_t>& count = stages_by_stashes(c);
  auto& [by_ms, by_params, by_layers] = groups_;
  for (auto& g : groups_) g.clear();
  for (size_t j = 0; j < count.size(); ++j) {
    if (count[j] == 0) continue;
    const Run& r = longest_run(c.schedule, bi, static_cast<int>(j));
    const auto n = static_cast<double>(count[j]);
    by_ms.emplace_back(r.compute_ms, n);
    by_params.emplace_back(static_cast<double>(r.params), n);
    by_layers.emplace_back(static_cast<double>(r.layers), n);
  }
  // A recomputing stage holds its static bytes and one microbatch's full stash at least: as much as one
  // that keeps a single microbatch without recomputing.
  const Run& any = longest_run(c.schedule, bi, 0);
  const double ms = least_recomputed(by_ms, any.compute_ms, all);
  const double params = least_recomputed(by_params, static_cast<double>(any.params),
                                         static_cast<double>(model_.param_prefix().back()));
  const double layers = least_recomputed(by_layers, static_cast<double>(any.layers), static_cast<double>(L));
  const auto whole_layers = std::min(L, static_cast<int64_t>(std::floor(layers)));
  return std::max({model_.min_redo_share(c.microbatch_index) * ms, cheapest_redo(bi, static_cast<int64_t>(params)),
                   cheapest_layers_[bi][static_cast<size_t>(whole_layers)]});
}

}  // namespace pd2bw::planner

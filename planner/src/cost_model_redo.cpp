// CostModel's least recompute of a given amount of compute (least_redo_ms) and its tables.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner {

void CostModel::build_redo_shares(size_t bi) {
  const auto& cp = compute_prefix(static_cast<int64_t>(bi));
  const auto& rp = redo_prefix(static_cast<int64_t>(bi));
  std::vector<std::pair<double, double>> layers;  // (compute, redo capped at the compute)
  for (size_t j = 0; j + 1 < cp.size(); ++j)
    layers.emplace_back(cp[j + 1] - cp[j], std::min(rp[j + 1] - rp[j], cp[j + 1] - cp[j]));
  std::stable_sort(layers.begin(), layers.end(), [](const auto& x, const auto& y) {
    return x.second * y.first < y.second * x.first;  // ascending redo / compute
  });
  std::vector<double> cs{0.0}, rs{0.0};
  for (const auto& [comp, redo] : layers) {
    cs.push_back(cs.back() + comp);
    rs.push_back(rs.back() + redo);
  }
  by_share_compute_.push_back(std::move(cs));
  by_share_redo_.push_back(std::move(rs));
}

double CostModel::least_redo_ms(int64_t bi, double compute) const {
  size_t segment = 0;
  return least_redo_ms(bi, compute, segment);
}

double CostModel::least_redo_ms(int64_t bi, double compute, size_t& segment) const {
  const auto& cs = by_share_compute_[static_cast<size_t>(bi)];
  const auto& rs = by_share_redo_[static_cast<size_t>(bi)];
  if (!(compute > 0.0)) return 0.0;
  if (compute >= cs.back()) return rs.back();
  // The piece [cs[k], cs[k + 1]) holding compute: forward from the hint while it lies ahead, else searched.
  size_t k = std::min(segment, cs.size() - 2);
  if (cs[k] > compute) k = static_cast<size_t>(std::upper_bound(cs.begin(), cs.begin() + static_cast<std::ptrdiff_t>(k) + 1, compute) - cs.begin()) - 1;
  while (cs[k + 1] <= compute) ++k;
  segment = k;
  const double width = cs[k + 1] - cs[k];
  return rs[k] + (width > 0.0 ? (compute - cs[k]) / width * (rs[k + 1] - rs[k]) : 0.0);
}

}  // namespace pd2bw::planner

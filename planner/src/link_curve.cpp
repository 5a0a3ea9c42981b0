// Lookups in measured link curves (see link_curve.hpp).
#include "pd2bw/planner/link_curve.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>
#include <string>

#include <fmt/format.h>

#include "pd2bw/error.hpp"

namespace pd2bw::planner {

LinkCurve::LinkCurve(const std::vector<schemas::LinkPoint>& points, const std::string& what) {
  for (std::size_t k = 0; k < points.size(); ++k) {
    const auto& p = points[k];
    const bool ascending = k == 0 || p.bytes > points[k - 1].bytes;
    if (p.bytes <= 0 || !ascending || !(p.ms > 0) || !std::isfinite(p.ms))
      throw UsageError(fmt::format("{}: point {} ({} bytes, {} ms) is not a valid measurement", what, k, p.bytes,
                                   p.ms),
                       "points need bytes > 0 strictly increasing and ms > 0");
    bytes_.push_back(p.bytes);
    ms_.push_back(ms_.empty() ? p.ms : std::max(p.ms, ms_.back()));
  }
  const std::size_t n = bytes_.size();
  if (n == 0) return;
  // Past the last point the link is assumed to keep its marginal cost; a flat or noisy tail would
  // promise infinite bandwidth, so the last point's average cost stands in then.
  const double average = ms_[n - 1] / static_cast<double>(bytes_[n - 1]);
  tail_ms_per_byte_ = average;
  if (n >= 2) {
    const double slope = (ms_[n - 1] - ms_[n - 2]) / static_cast<double>(bytes_[n - 1] - bytes_[n - 2]);
    if (slope > 0) tail_ms_per_byte_ = slope;
  }
}

double LinkCurve::ms_at(int64_t bytes) const {
  const auto hi = static_cast<std::size_t>(
      std::distance(bytes_.begin(), std::upper_bound(bytes_.begin(), bytes_.end(), bytes)));
  if (hi == 0) return ms_.front();
  const std::size_t lo = hi - 1;
  const double past = static_cast<double>(bytes - bytes_[lo]);
  if (hi == bytes_.size()) return ms_[lo] + tail_ms_per_byte_ * past;
  const double span = static_cast<double>(bytes_[hi] - bytes_[lo]);
  return ms_[lo] + (ms_[hi] - ms_[lo]) * (past / span);
}

double curve_allreduce_ms(const LinkCurve& measured, int64_t measured_ranks, int64_t bytes, int64_t width) {
  // Written through the ratio of the ring factors rather than through busbw, so 0 bytes needs no 0 / 0.
  const double w = static_cast<double>(width), r = static_cast<double>(measured_ranks);
  return measured.ms_at(bytes) * ((w - 1.0) / w) / ((r - 1.0) / r);
}

}  // namespace pd2bw::planner

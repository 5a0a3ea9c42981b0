// Measured link curves (time against message size) prepared for the cost model's lookups. The cost
// model reads p2p and allreduce times off these when a cluster level carries curves, and falls back to
// its bandwidth/latency scalars otherwise.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::planner {

// Time (ms) of one operation on a message of some size, read off measured points:
// - at a measured size: that point's ms;
// - between two measured sizes: linear in bytes between the two points' ms;
// - below the first size (including 0 bytes): the first point's ms;
// - above the last size: the last point's ms plus the last two points' slope (ms per byte) times the
//   excess; with one point, or when that slope is not positive, the last point's ms / bytes instead.
// Measurement noise never makes a larger message cheaper: each point's ms is first raised to the largest
// ms of the points before it, so ms_at is continuous and non-decreasing in bytes (the planner's lower
// bounds rely on that).
class LinkCurve {
 public:
  LinkCurve() = default;  // no measurement: empty()
  // Requires the points as the schema readers accept them (bytes > 0 strictly ascending, ms > 0 and
  // finite); throws UsageError naming `what` (e.g. "cluster level \"node\" p2p_curve") otherwise.
  LinkCurve(const std::vector<schemas::LinkPoint>& points, const std::string& what);

  bool empty() const { return bytes_.empty(); }
  // Milliseconds for a message of `bytes` (>= 0). Requires !empty(). O(log points).
  double ms_at(int64_t bytes) const;

 private:
  std::vector<int64_t> bytes_;
  std::vector<double> ms_;          // running maximum of the measured ms
  double tail_ms_per_byte_ = 0.0;   // slope past the last point, > 0
};

// Ring allreduce time (ms, without latency) of `bytes` over `width` ranks, from an allreduce curve
// measured over `measured_ranks` ranks: the curve gives the bus bandwidth at that size,
// busbw = 2 (R - 1) / R * bytes / ms_R(bytes), and the time for w ranks is 2 (w - 1) / w * bytes / busbw,
// i.e. ms_R(bytes) * ((w - 1) / w) / ((R - 1) / R). Requires measured_ranks >= 2 and width >= 2.
double curve_allreduce_ms(const LinkCurve& measured, int64_t measured_ranks, int64_t bytes, int64_t width);

}  // namespace pd2bw::planner

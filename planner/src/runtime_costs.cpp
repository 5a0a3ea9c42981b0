// The runtime term of the cost model: the profile's layer times scaled by the measured runtime
// calibration, once, before anything is priced, and (with a split calibration) the runtime's measured
// boundary work in place of the innermost link's p2p times.
#include "pd2bw/planner/runtime_costs.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "pd2bw/planner/link_curve.hpp"

namespace pd2bw::planner {

namespace {

void scale_times(schemas::LayerTiming& t, double s) {
  for (double* ms : {&t.fwd_ms, &t.bwd_ms, &t.fwd_ms_min, &t.fwd_ms_p90, &t.bwd_ms_min, &t.bwd_ms_p90, &t.recompute_ms,
                     &t.bwd_input_ms, &t.bwd_weight_ms})
    *ms *= s;
}

}  // namespace

schemas::Profile with_runtime_costs(const schemas::Profile& profile) {
  schemas::Profile out = profile;
  const schemas::RuntimeCalibration& r = out.runtime_calibration;
  if (!r.present()) return out;
  const schemas::RuntimeSplit& split = r.split;
  for (std::size_t j = 0; j < out.layers.size(); ++j) {
    auto& layer = out.layers[j];
    const std::size_t p = static_cast<int64_t>(j) < split.layer ? 0 : 1;  // the split run's stage
    layer.update_ms *= split.present() ? split.update_scales[p] : r.update_scale;
    for (std::size_t k = 0; k < layer.per_microbatch.size(); ++k)
      scale_times(layer.per_microbatch[k],
                  split.present() ? split.per_microbatch[k].compute_scales[p] : r.per_microbatch[k].compute_scale);
  }
  return out;
}

std::vector<schemas::LinkPoint> runtime_p2p_curve(const schemas::Profile& profile, const schemas::ClusterLevel& innermost) {
  const schemas::RuntimeSplit& split = profile.runtime_calibration.split;
  std::vector<schemas::LinkPoint> out = innermost.p2p_curve;
  if (!split.present() || out.empty() || split.layer < 1 || static_cast<std::size_t>(split.layer) > profile.layers.size())
    return out;
  const LinkCurve curve(out, fmt::format("cluster level \"{}\" p2p_curve", innermost.name));
  std::vector<double> ratios;
  for (std::size_t k = 0; k < split.per_microbatch.size(); ++k) {
    const auto& before = profile.layers[static_cast<std::size_t>(split.layer - 1)].per_microbatch[k];
    ratios.push_back(split.per_microbatch[k].boundary_ms / 4.0 / curve.ms_at(before.output_bytes));
  }
  std::sort(ratios.begin(), ratios.end());
  const std::size_t h = ratios.size() / 2;
  const double s = std::max(1e-3, ratios.size() % 2 ? ratios[h] : 0.5 * (ratios[h - 1] + ratios[h]));
  for (auto& point : out) point.ms *= s;
  return out;
}

std::string runtime_costs_note(const schemas::Profile& profile) {
  const schemas::RuntimeCalibration& r = profile.runtime_calibration;
  if (!r.present())
    return "note: the profile has no runtime_calibration (an older profile, a cuda one, one made with "
           "--no-runtime-calibration, or another tool's): step times are the layers' times alone, without the "
           "runtime's own work (`pd2bw profile` on the cpu adds it)";
  std::string scales;
  if (r.split.present()) {
    for (const auto& s : r.split.per_microbatch)
      scales += fmt::format("{}b={} x{:.3f}/{:.3f} boundary {:.3f} ms", scales.empty() ? "" : ", ", s.microbatch,
                            s.compute_scales[0], s.compute_scales[1], s.boundary_ms);
    return fmt::format("runtime: the profile's runtime_calibration scales the layers' times before/from its split at layer "
                       "{} ({}; a boundary inside a node costs the runtime's measured work) and update_ms (x{:.3f}/{:.3f})",
                       r.split.layer, scales, r.split.update_scales[0], r.split.update_scales[1]);
  }
  for (const auto& s : r.per_microbatch)
    scales += fmt::format("{}b={} x{:.3f}", scales.empty() ? "" : ", ", s.microbatch, s.compute_scale);
  return fmt::format("runtime: the profile's runtime_calibration scales the layers' times ({}) and update_ms (x{:.3f})",
                     scales, r.update_scale);
}

}  // namespace pd2bw::planner

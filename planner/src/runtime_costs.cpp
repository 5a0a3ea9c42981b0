// The runtime term of the cost model: the profile's layer times scaled by the measured runtime
// calibration, once, before anything is priced.
#include "pd2bw/planner/runtime_costs.hpp"

#include <fmt/format.h>

namespace pd2bw::planner {

schemas::Profile with_runtime_costs(const schemas::Profile& profile) {
  schemas::Profile out = profile;
  const schemas::RuntimeCalibration& r = out.runtime_calibration;
  if (!r.present()) return out;
  for (auto& layer : out.layers) {
    layer.update_ms *= r.update_scale;
    for (size_t k = 0; k < layer.per_microbatch.size(); ++k) {
      const double s = r.per_microbatch[k].compute_scale;
      auto& t = layer.per_microbatch[k];
      for (double* ms : {&t.fwd_ms, &t.bwd_ms, &t.fwd_ms_min, &t.fwd_ms_p90, &t.bwd_ms_min, &t.bwd_ms_p90,
                         &t.recompute_ms, &t.bwd_input_ms, &t.bwd_weight_ms})
        *ms *= s;
    }
  }
  return out;
}

std::string runtime_costs_note(const schemas::Profile& profile) {
  const schemas::RuntimeCalibration& r = profile.runtime_calibration;
  if (!r.present())
    return "note: the profile has no runtime_calibration (an older profile, a cuda one, one made with "
           "--no-runtime-calibration, or another tool's): step times are the layers' times alone, without the "
           "runtime's own work (`pd2bw profile` on the cpu adds it)";
  std::string scales;
  for (const auto& s : r.per_microbatch)
    scales += fmt::format("{}b={} x{:.3f}", scales.empty() ? "" : ", ", s.microbatch, s.compute_scale);
  return fmt::format("runtime: the profile's runtime_calibration scales the layers' times ({}) and update_ms (x{:.3f})",
                     scales, r.update_scale);
}

}  // namespace pd2bw::planner

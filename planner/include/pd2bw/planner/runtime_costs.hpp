// The stage runtime's own work beyond the isolated layers, as the profile's runtime_calibration measured
// it (schemas/profile.hpp: RuntimeCalibration).
#pragma once

#include <string>

#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::planner {

// `profile` with every layer's fwd_ms, bwd_ms, recompute_ms and backward halves (bwd_input_ms,
// bwd_weight_ms) at microbatch index k multiplied by runtime_calibration.per_microbatch[k].compute_scale
// (their spreads, min and p90, alike) and every update_ms by runtime_calibration.update_scale; sizes and
// links are kept. Without runtime_calibration: the profile unchanged (the term is 0). The cost model
// prices from the result, so the partitioner, the bounds and the simulator all see the same times.
schemas::Profile with_runtime_costs(const schemas::Profile& profile);

// One line for `pd2bw plan` on what the term did: the scales applied, or that the profile has none
// (an older profile, a cuda one, or another tool's) and so step times leave the runtime's own work out.
std::string runtime_costs_note(const schemas::Profile& profile);

}  // namespace pd2bw::planner

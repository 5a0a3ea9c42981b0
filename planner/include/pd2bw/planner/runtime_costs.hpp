// The stage runtime's own work beyond the isolated layers, as the profile's runtime_calibration measured
// it (schemas/profile.hpp: RuntimeCalibration, RuntimeSplit).
#pragma once

#include <string>
#include <vector>

#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::planner {

// `profile` with every layer's fwd_ms, bwd_ms, recompute_ms and backward halves (bwd_input_ms,
// bwd_weight_ms) at microbatch index k multiplied by a compute scale (their spreads, min and p90, alike)
// and every update_ms by an update scale; sizes and links are kept. The scales: with
// runtime_calibration.split, by the split run's stage that held the layer (before split.layer:
// split.per_microbatch[k].compute_scales[0] and split.update_scales[0]; from it: [1]); without it, runtime_calibration.per_microbatch[k].compute_scale and update_scale for every layer.
// Without runtime_calibration: the profile unchanged (the term is 0). The cost model prices from the
// result, so the partitioner, the bounds and the simulator all see the same times.
schemas::Profile with_runtime_costs(const schemas::Profile& profile);

// The p2p_curve the cost model reads for `innermost`, the cluster's innermost level: its measured
// curve with every time scaled so that a boundary costs what the runtime measured. With
// runtime_calibration.split the scale is, per microbatch size, the ratio of boundary_ms / 4 (a stage
// pays both directions, two messages, on each of a boundary's two sides) to the curve's time for the
// output of the layer before split.layer; the median of those ratios over the sizes (at least 1e-3).
// Without a split, or for a level without a curve (its scalars given by hand): the level's curve as it
// is. Outer levels (between nodes) keep their curves: the calibration ran the threads transport of one
// machine. The cluster itself (and so the plan's copy of it) keeps the measured links.
std::vector<schemas::LinkPoint> runtime_p2p_curve(const schemas::Profile& profile, const schemas::ClusterLevel& innermost);

// One line for `pd2bw plan` on what the term did: the scales applied, or that the profile has none
// (an older profile, a cuda one, or another tool's) and so step times leave the runtime's own work out.
std::string runtime_costs_note(const schemas::Profile& profile);

}  // namespace pd2bw::planner

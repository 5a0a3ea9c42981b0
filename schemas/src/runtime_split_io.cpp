// The optional "split" of a profile's runtime_calibration: strict reading and deterministic writing.
#include "runtime_split_io.hpp"

#include <fmt/format.h>

#include <string>

namespace pd2bw::schemas::detail {
namespace {

constexpr const char* kHint = "re-profile on a quiet machine, or drop /runtime_calibration/split";

// A pair of numbers, one per stage, each >= `min` and <= `most`.
std::array<double, 2> read_pair(const Json& x, const std::string& q, Min min, double most) {
  if (!x.is_array() || x.size() != 2) fail(q, "must hold 2 numbers (one per stage)", "give [first stage, second stage]");
  std::array<double, 2> out{};
  for (size_t k = 0; k < 2; ++k) {
    out[k] = as_number(x[k], child_pointer(q, k), min);
    if (out[k] > most) fail(child_pointer(q, k), fmt::format("must be <= {}, got {}", most, out[k]), kHint);
  }
  return out;
}

std::array<double, 2> read_steps(const Json& x, const std::string& q) {
  if (!x.is_array() || x.size() != 2)
    fail(q, "must hold 2 numbers (the steps with few and many microbatches)", "give [few_step_ms, many_step_ms]");
  return {as_number(x[0], child_pointer(q, 0), Min::positive), as_number(x[1], child_pointer(q, 1), Min::positive)};
}

RuntimeSplitStep read_split_step(const Json& v, const std::string& p) {
  const ObjectReader r(v, p, {"microbatch", "step_ms", "compute_scales", "boundary_ms"});
  RuntimeSplitStep s;
  s.microbatch = r.integer("microbatch", Min::positive);
  const auto steps = r.list("step_ms", read_steps);
  if (steps.size() != 2)
    fail(r.at("step_ms"), fmt::format("must hold 2 entries (one per stage), got {}", steps.size()),
         "give one [few_step_ms, many_step_ms] per stage");
  s.step_ms = {steps[0], steps[1]};
  s.compute_scales = read_pair(r.get("compute_scales"), r.at("compute_scales"), Min::positive, kMaxSplitScale);
  s.boundary_ms = r.number("boundary_ms", Min::non_negative);
  return s;
}

}  // namespace

RuntimeSplit read_runtime_split(const ObjectReader& calibration, const std::vector<int64_t>& sizes, int64_t layers) {
  if (!calibration.has("split")) return {};
  const ObjectReader r = calibration.object("split", {"layer", "microbatches", "update_scales", "per_microbatch"});
  RuntimeSplit s;
  s.layer = r.integer("layer", Min::positive);
  if (s.layer >= layers)
    fail(r.at("layer"), fmt::format("must be below the layer count {}, got {}", layers, s.layer),
         "give the first layer of the second stage of the split run");
  const auto runs =
      r.list("microbatches", [](const Json& x, const std::string& q) { return as_integer(x, q, Min::positive); });
  if (runs.size() != 2 || runs[0] < 2 || runs[0] >= runs[1])
    fail(r.at("microbatches"), "must hold 2 microbatch counts, 2 <= the first < the second (the two runs' steps at d = 2)",
         "give [few, many], e.g. [2, 6] as pd2bw profile writes");
  s.few = runs[0];
  s.many = runs[1];
  s.update_scales = read_pair(r.get("update_scales"), r.at("update_scales"), Min::non_negative, kMaxUpdateScale);
  s.per_microbatch = r.list("per_microbatch", read_split_step);
  const std::string list = r.at("per_microbatch");
  if (s.per_microbatch.size() != sizes.size())
    fail(list, fmt::format("has {} entries but /microbatch_sizes has {}", s.per_microbatch.size(), sizes.size()),
         "give exactly one entry per microbatch size, in the order of /microbatch_sizes, or drop the split");
  for (size_t k = 0; k < sizes.size(); ++k)
    if (s.per_microbatch[k].microbatch != sizes[k])
      fail(child_pointer(child_pointer(list, k), "microbatch"),
           fmt::format("expected {} (/microbatch_sizes/{}), got {}", sizes[k], k, s.per_microbatch[k].microbatch),
           "order the entries like /microbatch_sizes");
  return s;
}

OrderedJson runtime_split_json(const RuntimeSplit& split) {
  OrderedJson out = OrderedJson::object();
  out["layer"] = split.layer;
  out["microbatches"] = {split.few, split.many};
  out["update_scales"] = split.update_scales;
  OrderedJson entries = OrderedJson::array();
  for (const RuntimeSplitStep& s : split.per_microbatch) {
    OrderedJson e = OrderedJson::object();
    e["microbatch"] = s.microbatch;
    e["step_ms"] = s.step_ms;
    e["compute_scales"] = s.compute_scales;
    e["boundary_ms"] = s.boundary_ms;
    entries.push_back(std::move(e));
  }
  out["per_microbatch"] = std::move(entries);
  return out;
}

}  // namespace pd2bw::schemas::detail

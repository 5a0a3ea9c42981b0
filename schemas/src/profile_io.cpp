// The profile format ("pd2bw.profile"): strict reading with its semantic checks, and the
// deterministic writer.
#include <array>
#include <map>

#include <fmt/format.h>

#include "doc_io.hpp"
#include "pd2bw/schemas/profile.hpp"
#include "runtime_split_io.hpp"

namespace pd2bw::schemas {
namespace detail {
namespace {

// An optional key: 0 when absent, else > 0.
double optional_ms(const ObjectReader& r, std::string_view key) {
  return r.has(key) ? r.number(key, Min::positive) : 0.0;
}

// A measured spread must bracket its median: min <= median <= p90 (each only when present).
void check_spread(const ObjectReader& r, std::string_view median_key, double median, double min, double p90) {
  const std::string name(median_key);
  if (min != 0 && min > median) {
    fail(r.at(name + "_min"), fmt::format("must be <= {} ({}), got {}", name, median, min),
         "the fastest run cannot be slower than the median");
  }
  if (p90 != 0 && p90 < median) {
    fail(r.at(name + "_p90"), fmt::format("must be >= {} ({}), got {}", name, median, p90),
         "the 90th percentile cannot be faster than the median");
  }
}

// The split backward: all three keys or none; each half >= 0 (a layer may lack one), not both 0.
void read_split(const ObjectReader& r, LayerTiming& t) {
  constexpr std::array<const char*, 3> keys{"bwd_input_ms", "bwd_weight_ms", "bwd_weight_stash_bytes"};
  int present = 0;
  for (const char* k : keys) present += r.has(k) ? 1 : 0;
  if (present == 0) return;
  if (present < 3)
    for (const char* k : keys)
      if (!r.has(k))
        fail(r.at(k),
             "is missing (the split backward comes as bwd_input_ms, bwd_weight_ms and "
             "bwd_weight_stash_bytes together)",
             "give all three, or none (pd2bw profile writes all three)");
  t.split = true;
  t.bwd_input_ms = r.number("bwd_input_ms", Min::non_negative);
  t.bwd_weight_ms = r.number("bwd_weight_ms", Min::non_negative);
  t.bwd_weight_stash_bytes = r.integer("bwd_weight_stash_bytes", Min::non_negative);
  if (t.bwd_input_ms + t.bwd_weight_ms <= 0)
    fail(r.at("bwd_weight_ms"), "bwd_input_ms and bwd_weight_ms are both 0",
         "a layer with a backward spends time in at least one of its halves");
}

LayerTiming read_timing(const Json& value, const std::string& pointer) {
  const ObjectReader r(value, pointer,
                       {"microbatch", "fwd_ms", "bwd_ms", "input_bytes", "output_bytes", "stash_bytes", "fwd_ms_min",
                        "fwd_ms_p90", "bwd_ms_min", "bwd_ms_p90", "recompute_ms", "stash_bytes_computed",
                        "bwd_input_ms", "bwd_weight_ms", "bwd_weight_stash_bytes"});
  LayerTiming t;
  t.microbatch = r.integer("microbatch", Min::positive);
  t.fwd_ms = r.number("fwd_ms", Min::positive);
  t.bwd_ms = r.number("bwd_ms", Min::positive);
  t.input_bytes = r.integer("input_bytes", Min::non_negative);
  t.output_bytes = r.integer("output_bytes", Min::non_negative);
  t.stash_bytes = r.integer("stash_bytes", Min::non_negative);
  t.fwd_ms_min = optional_ms(r, "fwd_ms_min");
  t.fwd_ms_p90 = optional_ms(r, "fwd_ms_p90");
  t.bwd_ms_min = optional_ms(r, "bwd_ms_min");
  t.bwd_ms_p90 = optional_ms(r, "bwd_ms_p90");
  t.recompute_ms = optional_ms(r, "recompute_ms");
  if (r.has("stash_bytes_computed")) t.stash_bytes_computed = r.integer("stash_bytes_computed", Min::positive);
  check_spread(r, "fwd_ms", t.fwd_ms, t.fwd_ms_min, t.fwd_ms_p90);
  check_spread(r, "bwd_ms", t.bwd_ms, t.bwd_ms_min, t.bwd_ms_p90);
  read_split(r, t);
  return t;
}

// Every layer must have one timing per profiled microbatch size, in the same order.
void check_timings_match(const LayerProfile& layer, const std::vector<int64_t>& sizes, const std::string& pointer) {
  const std::string list = child_pointer(pointer, "per_microbatch");
  if (layer.per_microbatch.size() != sizes.size()) {
    fail(list,
         fmt::format("has {} entries but /microbatch_sizes has {}", layer.per_microbatch.size(), sizes.size()),
         "give exactly one entry per microbatch size, in the order of /microbatch_sizes");
  }
  for (std::size_t k = 0; k < sizes.size(); ++k) {
    if (layer.per_microbatch[k].microbatch != sizes[k]) {
      fail(child_pointer(child_pointer(list, k), "microbatch"),
           fmt::format("expected {} (/microbatch_sizes/{}), got {}", sizes[k], k, layer.per_microbatch[k].microbatch),
           "order the entries like /microbatch_sizes");
    }
  }
}

std::vector<int64_t> read_microbatch_sizes(const ObjectReader& root) {
  auto sizes = root.list("microbatch_sizes", [](const Json& v, const std::string& p) {
    return as_integer(v, p, Min::positive);
  });
  if (sizes.empty()) {
    fail(root.at("microbatch_sizes"), "must list at least one microbatch size", "profile at least one size, e.g. [1]");
  }
  for (std::size_t k = 1; k < sizes.size(); ++k) {
    if (sizes[k] <= sizes[k - 1]) {
      fail(child_pointer(root.at("microbatch_sizes"), k),
           fmt::format("must be greater than the previous size {}, got {}", sizes[k - 1], sizes[k]),
           "list microbatch sizes in strictly increasing order without repeats");
    }
  }
  return sizes;
}

std::vector<LayerProfile> read_layers(const ObjectReader& root, const std::vector<int64_t>& sizes) {
  auto layers = root.list("layers", [&sizes](const Json& v, const std::string& p) {
    const ObjectReader r(v, p, {"name", "kind", "param_bytes", "per_microbatch", "optimizer_bytes", "update_ms"});
    LayerProfile layer;
    layer.name = r.string("name");
    layer.kind = r.string("kind");
    layer.param_bytes = r.integer("param_bytes", Min::non_negative);
    layer.per_microbatch = r.list("per_microbatch", read_timing);
    if (r.has("optimizer_bytes")) layer.optimizer_bytes = r.integer("optimizer_bytes", Min::positive);
    if (r.has("update_ms")) layer.update_ms = r.number("update_ms", Min::positive);
    check_timings_match(layer, sizes, p);
    return layer;
  });
  if (layers.empty()) fail(root.at("layers"), "must have at least one layer", "profile a model with layers");
  std::map<std::string, std::size_t> seen;
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const auto [it, fresh] = seen.emplace(layers[i].name, i);
    if (!fresh) {
      fail(child_pointer(child_pointer(root.at("layers"), i), "name"),
           fmt::format("duplicate layer name \"{}\" (also /layers/{}/name)", layers[i].name, it->second),
           "give every layer a unique name");
    }
  }
  return layers;
}

LinkLevel read_link(const Json& value, const std::string& pointer) {
  const ObjectReader r(value, pointer,
                       {"level", "p2p_gbps", "p2p_latency_ms", "allreduce_busbw_gbps", "p2p_curve", "allreduce_curve",
                        "allreduce_ranks"});
  LinkLevel l;
  l.level = r.string("level");
  l.p2p_gbps = r.number("p2p_gbps", Min::positive);
  l.p2p_latency_ms = r.number("p2p_latency_ms", Min::non_negative);
  l.allreduce_busbw_gbps = r.number("allreduce_busbw_gbps", Min::positive);
  read_link_curves(r, l.p2p_curve, l.allreduce_curve, l.allreduce_ranks);
  return l;
}

// A scale of the runtime calibration: > 0 (update_scale: >= 0) and at most `most`.
double read_scale(const ObjectReader& r, std::string_view key, Min min, double most) {
  const double v = r.number(key, min);
  if (v > most)
    fail(r.at(key), fmt::format("must be <= {}, got {}", most, v),
         "a runtime that much slower than its layers is a disturbed measurement: re-profile on a quiet machine, or "
         "drop runtime_calibration");
  return v;
}

RuntimeStep read_runtime_step(const Json& v, const std::string& p) {
  const ObjectReader r(v, p, {"microbatch", "step_ms", "compute_scale"});
  RuntimeStep s;
  s.microbatch = r.integer("microbatch", Min::positive);
  const auto steps =
      r.list("step_ms", [](const Json& x, const std::string& q) { return as_number(x, q, Min::positive); });
  if (steps.size() != 2)
    fail(r.at("step_ms"),
         fmt::format("must hold 2 numbers (the steps with few and many microbatches), got {}", steps.size()),
         "give [few_step_ms, many_step_ms]");
  s.few_step_ms = steps[0];
  s.many_step_ms = steps[1];
  s.compute_scale = read_scale(r, "compute_scale", Min::positive, kMaxRuntimeScale);
  return s;
}

// The runtime calibration: absent, or two run lengths, an update scale and one entry per microbatch
// size in their order.
RuntimeCalibration read_runtime(const ObjectReader& root, const std::vector<int64_t>& sizes, int64_t layers) {
  if (!root.has("runtime_calibration")) return {};
  const ObjectReader r =
      root.object("runtime_calibration", {"microbatches", "update_scale", "per_microbatch", "split"});
  RuntimeCalibration c;
  const auto runs =
      r.list("microbatches", [](const Json& x, const std::string& q) { return as_integer(x, q, Min::positive); });
  if (runs.size() != 2 || runs[0] >= runs[1])
    fail(r.at("microbatches"), "must hold 2 microbatch counts, the first smaller (the two runs' steps)",
         "give [few, many], e.g. [1, 5] as pd2bw profile writes");
  c.few = runs[0];
  c.many = runs[1];
  c.update_scale = read_scale(r, "update_scale", Min::non_negative, kMaxUpdateScale);
  c.per_microbatch = r.list("per_microbatch", read_runtime_step);
  const std::string list = r.at("per_microbatch");
  if (c.per_microbatch.size() != sizes.size())
    fail(list, fmt::format("has {} entries but /microbatch_sizes has {}", c.per_microbatch.size(), sizes.size()),
         "give exactly one entry per microbatch size, in the order of /microbatch_sizes, or drop runtime_calibration");
  for (std::size_t k = 0; k < sizes.size(); ++k)
    if (c.per_microbatch[k].microbatch != sizes[k])
      fail(child_pointer(child_pointer(list, k), "microbatch"),
           fmt::format("expected {} (/microbatch_sizes/{}), got {}", sizes[k], k, c.per_microbatch[k].microbatch),
           "order the entries like /microbatch_sizes");
  c.split = read_runtime_split(r, sizes, layers);
  return c;
}

OrderedJson runtime_json(const RuntimeCalibration& c) {
  OrderedJson out = OrderedJson::object();
  out["microbatches"] = {c.few, c.many};
  out["update_scale"] = c.update_scale;
  OrderedJson entries = OrderedJson::array();
  for (const RuntimeStep& s : c.per_microbatch) {
    OrderedJson e = OrderedJson::object();
    e["microbatch"] = s.microbatch;
    e["step_ms"] = {s.few_step_ms, s.many_step_ms};
    e["compute_scale"] = s.compute_scale;
    entries.push_back(std::move(e));
  }
  out["per_microbatch"] = std::move(entries);
  if (c.split.present()) out["split"] = runtime_split_json(c.split);
  return out;
}

OrderedJson layer_json(const LayerProfile& layer) {
  OrderedJson out = OrderedJson::object();
  out["name"] = layer.name;
  out["kind"] = layer.kind;
  out["param_bytes"] = layer.param_bytes;
  OrderedJson timings = OrderedJson::array();
  for (const LayerTiming& t : layer.per_microbatch) {
    OrderedJson e = OrderedJson::object();
    e["microbatch"] = t.microbatch;
    e["fwd_ms"] = t.fwd_ms;
    e["bwd_ms"] = t.bwd_ms;
    e["input_bytes"] = t.input_bytes;
    e["output_bytes"] = t.output_bytes;
    e["stash_bytes"] = t.stash_bytes;
    // The optional detail only when measured, so profiles without it keep their exact bytes.
    if (t.fwd_ms_min != 0) e["fwd_ms_min"] = t.fwd_ms_min;
    if (t.fwd_ms_p90 != 0) e["fwd_ms_p90"] = t.fwd_ms_p90;
    if (t.bwd_ms_min != 0) e["bwd_ms_min"] = t.bwd_ms_min;
    if (t.bwd_ms_p90 != 0) e["bwd_ms_p90"] = t.bwd_ms_p90;
    if (t.recompute_ms != 0) e["recompute_ms"] = t.recompute_ms;
    if (t.stash_bytes_computed != 0) e["stash_bytes_computed"] = t.stash_bytes_computed;
    if (t.split) {
      e["bwd_input_ms"] = t.bwd_input_ms;
      e["bwd_weight_ms"] = t.bwd_weight_ms;
      e["bwd_weight_stash_bytes"] = t.bwd_weight_stash_bytes;
    }
    timings.push_back(std::move(e));
  }
  out["per_microbatch"] = std::move(timings);
  if (layer.optimizer_bytes != 0) out["optimizer_bytes"] = layer.optimizer_bytes;
  if (layer.update_ms != 0) out["update_ms"] = layer.update_ms;
  return out;
}

}  // namespace

namespace {

// The device with the optional measurement keys only a profile has.
DeviceDesc read_profile_device(const ObjectReader& parent) {
  const ObjectReader r = parent.object("device", {"name", "memory_bytes", "driver_version", "cuda_version",
                                                  "compute_capability", "multiprocessors", "device_copy_gbps",
                                                  "host_to_device_gbps"});
  DeviceDesc d;
  d.name = r.string("name");
  d.memory_bytes = r.integer("memory_bytes", Min::positive);
  if (r.has("driver_version")) d.driver_version = r.string("driver_version");
  if (r.has("cuda_version")) d.cuda_version = r.string("cuda_version");
  if (r.has("compute_capability")) d.compute_capability = r.string("compute_capability");
  if (r.has("multiprocessors")) d.multiprocessors = r.integer("multiprocessors", Min::positive);
  if (r.has("device_copy_gbps")) d.device_copy_gbps = r.number("device_copy_gbps", Min::positive);
  if (r.has("host_to_device_gbps")) d.host_to_device_gbps = r.number("host_to_device_gbps", Min::positive);
  return d;
}

OrderedJson profile_device_json(const DeviceDesc& d) {
  OrderedJson out = device_json(d);
  if (!d.driver_version.empty()) out["driver_version"] = d.driver_version;
  if (!d.cuda_version.empty()) out["cuda_version"] = d.cuda_version;
  if (!d.compute_capability.empty()) out["compute_capability"] = d.compute_capability;
  if (d.multiprocessors != 0) out["multiprocessors"] = d.multiprocessors;
  if (d.device_copy_gbps != 0) out["device_copy_gbps"] = d.device_copy_gbps;
  if (d.host_to_device_gbps != 0) out["host_to_device_gbps"] = d.host_to_device_gbps;
  return out;
}

}  // namespace

Profile profile_from_json(const Json& root) {
  check_kind(root, kProfileKind);
  const ObjectReader r(root, "",
                       {"schema", "schema_version", "provenance", "model", "device", "microbatch_sizes", "layers",
                        "links", "runtime_calibration"});
  check_header(r, kProfileKind);
  Profile p;
  p.provenance = read_provenance(r, "provenance");
  p.model = read_model(r, "model");
  p.device = read_profile_device(r);
  p.microbatch_sizes = read_microbatch_sizes(r);
  p.layers = read_layers(r, p.microbatch_sizes);
  p.links = r.list("links", read_link);
  p.runtime_calibration = read_runtime(r, p.microbatch_sizes, static_cast<int64_t>(p.layers.size()));
  return p;
}

}  // namespace detail

Profile parse_profile(std::string_view json_text) {
  return detail::profile_from_json(detail::parse_json_text(json_text));
}

std::string dump_profile(const Profile& profile) {
  using detail::OrderedJson;
  OrderedJson out = detail::header_json(detail::kProfileKind);
  const DeviceDesc& d = profile.device;
  if (!d.driver_version.empty() || !d.cuda_version.empty() || !d.compute_capability.empty() || d.multiprocessors != 0 ||
      d.device_copy_gbps != 0 || d.host_to_device_gbps != 0)
    out["schema_version"] = kSchemaVersionGpuDevice;
  for (const LayerProfile& layer : profile.layers)
    for (const LayerTiming& t : layer.per_microbatch)
      if (t.split) out["schema_version"] = kSchemaVersionSplitBackward;
  out["provenance"] = detail::provenance_json(profile.provenance);
  out["model"] = detail::model_json(profile.model);
  out["device"] = detail::profile_device_json(profile.device);
  out["microbatch_sizes"] = profile.microbatch_sizes;
  OrderedJson layers = OrderedJson::array();
  for (const LayerProfile& layer : profile.layers) layers.push_back(detail::layer_json(layer));
  out["layers"] = std::move(layers);
  OrderedJson links = OrderedJson::array();
  for (const LinkLevel& l : profile.links) {
    OrderedJson e = OrderedJson::object();
    e["level"] = l.level;
    e["p2p_gbps"] = l.p2p_gbps;
    e["p2p_latency_ms"] = l.p2p_latency_ms;
    e["allreduce_busbw_gbps"] = l.allreduce_busbw_gbps;
    detail::append_link_curves(e, l.p2p_curve, l.allreduce_curve, l.allreduce_ranks);
    links.push_back(std::move(e));
  }
  out["links"] = std::move(links);
  if (profile.runtime_calibration.present()) {
    out["schema_version"] =
        profile.runtime_calibration.split.present() ? kSchemaVersionRuntimeSplit : kSchemaVersionRuntime;
    out["runtime_calibration"] = detail::runtime_json(profile.runtime_calibration);
  }
  return detail::dump_text(out);
}

}  // namespace pd2bw::schemas

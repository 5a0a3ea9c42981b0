// The profile format ("pd2bw.profile"): strict reading with its semantic checks, and the
// deterministic writer.
#include <map>

#include <fmt/format.h>

#include "doc_io.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::schemas {
namespace detail {
namespace {

LayerTiming read_timing(const Json& value, const std::string& pointer) {
  const ObjectReader r(value, pointer,
                       {"microbatch", "fwd_ms", "bwd_ms", "input_bytes", "output_bytes", "stash_bytes"});
  LayerTiming t;
  t.microbatch = r.integer("microbatch", Min::positive);
  t.fwd_ms = r.number("fwd_ms", Min::positive);
  t.bwd_ms = r.number("bwd_ms", Min::positive);
  t.input_bytes = r.integer("input_bytes", Min::non_negative);
  t.output_bytes = r.integer("output_bytes", Min::non_negative);
  t.stash_bytes = r.integer("stash_bytes", Min::non_negative);
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
    const ObjectReader r(v, p, {"name", "kind", "param_bytes", "per_microbatch"});
    LayerProfile layer;
    layer.name = r.string("name");
    layer.kind = r.string("kind");
    layer.param_bytes = r.integer("param_bytes", Min::non_negative);
    layer.per_microbatch = r.list("per_microbatch", read_timing);
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
  const ObjectReader r(value, pointer, {"level", "p2p_gbps", "p2p_latency_ms", "allreduce_busbw_gbps"});
  LinkLevel l;
  l.level = r.string("level");
  l.p2p_gbps = r.number("p2p_gbps", Min::positive);
  l.p2p_latency_ms = r.number("p2p_latency_ms", Min::non_negative);
  l.allreduce_busbw_gbps = r.number("allreduce_busbw_gbps", Min::positive);
  return l;
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
    timings.push_back(std::move(e));
  }
  out["per_microbatch"] = std::move(timings);
  return out;
}

}  // namespace

Profile profile_from_json(const Json& root) {
  const ObjectReader r(root, "",
                       {"schema", "schema_version", "provenance", "model", "device", "microbatch_sizes", "layers",
                        "links"});
  check_header(r, kProfileKind);
  Profile p;
  p.provenance = read_provenance(r, "provenance");
  p.model = read_model(r, "model");
  p.device = read_device(r, "device");
  p.microbatch_sizes = read_microbatch_sizes(r);
  p.layers = read_layers(r, p.microbatch_sizes);
  p.links = r.list("links", read_link);
  return p;
}

}  // namespace detail

Profile parse_profile(std::string_view json_text) {
  return detail::profile_from_json(detail::parse_json_text(json_text));
}

std::string dump_profile(const Profile& profile) {
  using detail::OrderedJson;
  OrderedJson out = detail::header_json(detail::kProfileKind);
  out["provenance"] = detail::provenance_json(profile.provenance);
  out["model"] = detail::model_json(profile.model);
  out["device"] = detail::device_json(profile.device);
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
    links.push_back(std::move(e));
  }
  out["links"] = std::move(links);
  return detail::dump_text(out);
}

}  // namespace pd2bw::schemas

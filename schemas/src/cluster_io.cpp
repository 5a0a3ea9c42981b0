// The cluster format ("pd2bw.cluster"): topology levels and device memory; also the cluster body
// embedded in a plan.
#include <limits>

#include <fmt/format.h>

#include "doc_io.hpp"
#include "pd2bw/checked.hpp"
#include "pd2bw/schemas/cluster.hpp"

namespace pd2bw::schemas {

int64_t Cluster::total_devices() const {
  int64_t n = 1;
  for (const ClusterLevel& l : levels) {
    if (l.size <= 0) return 0;
    n = saturating_mul(n, l.size);  // the cost model refuses a cluster whose count overflows
  }
  return n;
}

namespace detail {
namespace {

ClusterLevel read_level(const Json& value, const std::string& pointer) {
  const ObjectReader r(value, pointer,
                       {"name", "size", "p2p_gbps", "p2p_latency_ms", "allreduce_busbw_gbps", "p2p_curve",
                        "allreduce_curve", "allreduce_ranks"});
  ClusterLevel l;
  l.name = r.string("name");
  l.size = r.integer("size", Min::positive);
  l.p2p_gbps = r.number("p2p_gbps", Min::positive);
  l.p2p_latency_ms = r.number("p2p_latency_ms", Min::non_negative);
  l.allreduce_busbw_gbps = r.number("allreduce_busbw_gbps", Min::positive);
  read_link_curves(r, l.p2p_curve, l.allreduce_curve, l.allreduce_ranks);
  return l;
}

}  // namespace

Cluster read_cluster_body(const ObjectReader& r) {
  Cluster c;
  c.device = read_device(r, "device");
  c.levels = r.list("levels", read_level);
  if (c.levels.empty()) {
    fail(r.at("levels"), "must have at least one level",
         "describe at least the devices of one node, e.g. {\"name\": \"node\", \"size\": 8, ...}");
  }
  int64_t n = 1;
  for (std::size_t i = 0; i < c.levels.size(); ++i) {
    if (n > std::numeric_limits<int64_t>::max() / c.levels[i].size) {
      fail(child_pointer(child_pointer(r.at("levels"), i), "size"),
           "the product of the level sizes does not fit in a 64-bit integer", "use realistic level sizes");
    }
    n *= c.levels[i].size;
  }
  return c;
}

void append_cluster_body(OrderedJson& out, const Cluster& c) {
  out["device"] = device_json(c.device);
  OrderedJson levels = OrderedJson::array();
  for (const ClusterLevel& l : c.levels) {
    OrderedJson e = OrderedJson::object();
    e["name"] = l.name;
    e["size"] = l.size;
    e["p2p_gbps"] = l.p2p_gbps;
    e["p2p_latency_ms"] = l.p2p_latency_ms;
    e["allreduce_busbw_gbps"] = l.allreduce_busbw_gbps;
    append_link_curves(e, l.p2p_curve, l.allreduce_curve, l.allreduce_ranks);
    levels.push_back(std::move(e));
  }
  out["levels"] = std::move(levels);
}

Cluster cluster_from_json(const Json& root) {
  check_kind(root, kClusterKind);
  const ObjectReader r(root, "", {"schema", "schema_version", "provenance", "device", "levels"});
  check_header(r, kClusterKind);
  // Hand-written cluster files may say where their numbers come from; the type has no place for it,
  // but its shape is still checked.
  if (r.has("provenance")) (void)read_provenance(r, "provenance");
  return read_cluster_body(r);
}

}  // namespace detail

Cluster parse_cluster(std::string_view json_text) {
  return detail::cluster_from_json(detail::parse_json_text(json_text));
}

std::string dump_cluster(const Cluster& cluster) {
  detail::OrderedJson out = detail::header_json(detail::kClusterKind);
  detail::append_cluster_body(out, cluster);
  return detail::dump_text(out);
}

}  // namespace pd2bw::schemas

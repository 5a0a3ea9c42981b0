// The optional measured link curves shared by a profile's links and a cluster's levels
// ("p2p_curve", "allreduce_curve", "allreduce_ranks"): strict reading with their rules, and writing
// them only when present so files without them stay byte-identical.
#include <fmt/format.h>

#include "doc_io.hpp"

namespace pd2bw::schemas::detail {
namespace {

constexpr const char* kCurveHint =
    "list measured points as {\"bytes\": N, \"ms\": T} with bytes strictly increasing; "
    "omit the key when the link was not measured";

LinkPoint read_point(const Json& value, const std::string& pointer) {
  const ObjectReader r(value, pointer, {"bytes", "ms"});
  LinkPoint p;
  p.bytes = r.integer("bytes", Min::positive);
  p.ms = r.number("ms", Min::positive);
  return p;
}

// A present curve: at least one point, bytes strictly ascending.
std::vector<LinkPoint> read_curve(const ObjectReader& r, std::string_view key) {
  auto points = r.list(key, read_point);
  const std::string base = r.at(key);
  if (points.empty()) fail(base, "must have at least one point", kCurveHint);
  for (std::size_t k = 1; k < points.size(); ++k) {
    if (points[k].bytes <= points[k - 1].bytes) {
      fail(child_pointer(child_pointer(base, k), "bytes"),
           fmt::format("must be > the previous point's ({}), got {}", points[k - 1].bytes, points[k].bytes),
           kCurveHint);
    }
  }
  return points;
}

OrderedJson curve_json(const std::vector<LinkPoint>& points) {
  OrderedJson out = OrderedJson::array();
  for (const LinkPoint& p : points) {
    OrderedJson e = OrderedJson::object();
    e["bytes"] = p.bytes;
    e["ms"] = p.ms;
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace

void read_link_curves(const ObjectReader& r, std::vector<LinkPoint>& p2p, std::vector<LinkPoint>& allreduce,
                      int64_t& allreduce_ranks) {
  p2p = r.has("p2p_curve") ? read_curve(r, "p2p_curve") : std::vector<LinkPoint>{};
  allreduce = r.has("allreduce_curve") ? read_curve(r, "allreduce_curve") : std::vector<LinkPoint>{};
  allreduce_ranks = 0;
  if (r.has("allreduce_ranks")) {
    allreduce_ranks = r.integer("allreduce_ranks", Min::positive);
    if (allreduce_ranks < 2) {
      fail(r.at("allreduce_ranks"), fmt::format("must be >= 2, got {}", allreduce_ranks),
           "an allreduce needs at least two ranks; give the rank count the curve was measured with");
    }
    if (allreduce.empty()) {
      fail(r.at("allreduce_ranks"), "given without allreduce_curve",
           "add the measured allreduce_curve, or drop allreduce_ranks");
    }
  } else if (!allreduce.empty()) {
    fail(r.at("allreduce_ranks"), "missing (required with allreduce_curve)",
         "give the number of ranks the allreduce curve was measured over (>= 2)");
  }
}

void append_link_curves(OrderedJson& out, const std::vector<LinkPoint>& p2p, const std::vector<LinkPoint>& allreduce,
                        int64_t allreduce_ranks) {
  if (!p2p.empty()) out["p2p_curve"] = curve_json(p2p);
  if (!allreduce.empty()) out["allreduce_curve"] = curve_json(allreduce);
  if (allreduce_ranks != 0) out["allreduce_ranks"] = allreduce_ranks;
}

}  // namespace pd2bw::schemas::detail

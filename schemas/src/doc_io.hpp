// Private helper of pd2bw_schemas: reading and writing the pieces the three formats share (the
// schema header, provenance, model, device, cluster levels, link curves) and the per-format entry points that work
// on already-parsed JSON (so validate_document parses a text only once).
#pragma once

#include <string_view>

#include "json_reader.hpp"
#include "pd2bw/schemas/cluster.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::schemas::detail {

inline constexpr std::string_view kProfileKind = "pd2bw.profile";
inline constexpr std::string_view kClusterKind = "pd2bw.cluster";
inline constexpr std::string_view kPlanKind = "pd2bw.plan";

// Before anything else about the root: when it names another pd2bw kind in "schema" (a plan given where
// a profile belongs, a checkpoint manifest, ...), throws SchemaError "/schema: this is a plan
// (pd2bw.plan), not a profile". Anything else is left to the reader.
void check_kind(const Json& root, std::string_view kind);
// Checks the root's "schema" (must equal `kind`) and "schema_version" (semver with a supported major).
void check_header(const ObjectReader& root, std::string_view kind);
// Starts a writer's root object with "schema" and "schema_version".
OrderedJson header_json(std::string_view kind);
// The writers' final text: 2-space indent, trailing newline; invalid UTF-8 in strings becomes U+FFFD.
std::string dump_text(const OrderedJson& root);

Provenance read_provenance(const ObjectReader& parent, std::string_view key);
OrderedJson provenance_json(const Provenance& p);

ModelDesc read_model(const ObjectReader& parent, std::string_view key);
OrderedJson model_json(const ModelDesc& m);

DeviceDesc read_device(const ObjectReader& parent, std::string_view key);
OrderedJson device_json(const DeviceDesc& d);

// "device" and "levels" of an object (the cluster root, or the plan's "cluster"), with the check that
// the product of level sizes fits in int64.
Cluster read_cluster_body(const ObjectReader& r);
// Appends "device" and "levels" to `out`.
void append_cluster_body(OrderedJson& out, const Cluster& c);

// The optional curve keys of a profile link or a cluster level (link_io.cpp). Reading: each curve, when
// present, has >= 1 point, bytes > 0 strictly ascending, ms > 0; allreduce_ranks (>= 2) is present
// exactly when allreduce_curve is. Absent keys read as empty / 0. Writing: only non-empty / non-zero keys,
// so files without curves stay byte-identical.
void read_link_curves(const ObjectReader& r, std::vector<LinkPoint>& p2p, std::vector<LinkPoint>& allreduce,
                      int64_t& allreduce_ranks);
void append_link_curves(OrderedJson& out, const std::vector<LinkPoint>& p2p, const std::vector<LinkPoint>& allreduce,
                        int64_t allreduce_ranks);

Profile profile_from_json(const Json& root);
Cluster cluster_from_json(const Json& root);
Plan plan_from_json(const Json& root);

// The plan's cross-field rules (stage coverage, rank table, batch arithmetic); throws SchemaError.
void check_plan_consistency(const Plan& plan);

}  // namespace pd2bw::schemas::detail

// Recognises a pd2bw file by its "schema" field, checks it with that format's reader and summarises it.
#include "pd2bw/schemas/validate.hpp"

#include <fmt/format.h>

#include "doc_io.hpp"

namespace pd2bw::schemas {
namespace {

std::string profile_summary(const Profile& p) {
  return fmt::format("{} ({}), {} layers, microbatch sizes {}, measured on {}", p.model.name,
                     to_string(p.model.dtype), p.layers.size(), fmt::join(p.microbatch_sizes, ","), p.device.name);
}

std::string cluster_summary(const Cluster& c) {
  std::vector<std::string> parts;
  for (const ClusterLevel& l : c.levels) parts.push_back(fmt::format("{} {}", l.size, l.name));
  return fmt::format("{} devices ({}), {} with {} each", c.total_devices(), fmt::join(parts, " x "), c.device.name,
                     format_bytes(c.device.memory_bytes));
}

std::string plan_summary(const Plan& p) {
  const std::string chunks = p.chunks_per_rank == 1 ? "" : fmt::format(" ({} chunks per rank)", p.chunks_per_rank);
  return fmt::format("{} on {} layers: schedule {}{}, depth {} x width {}, microbatch {} x {} (global batch {}), "
                     "predicted {:.3f} ms/step",
                     p.model.name, p.num_layers, to_string(p.schedule), chunks, p.depth, p.width, p.microbatch_size,
                     p.microbatches_per_step, p.global_batch, p.predictions.step_ms);
}

}  // namespace

ValidationReport validate_document(std::string_view json_text) {
  using namespace detail;
  const Json root = parse_json_text(json_text);
  if (!root.is_object()) fail("", std::string("expected an object, got ") + root.type_name());
  const auto it = root.find("schema");
  if (it == root.end()) {
    fail("/schema", "missing", "a pd2bw file names its kind: \"pd2bw.profile\", \"pd2bw.cluster\" or \"pd2bw.plan\"");
  }
  const std::string kind = as_string(*it, "/schema");
  ValidationReport report;
  if (kind == kProfileKind) {
    report.summary = profile_summary(profile_from_json(root));
  } else if (kind == kClusterKind) {
    report.summary = cluster_summary(cluster_from_json(root));
  } else if (kind == kPlanKind) {
    report.summary = plan_summary(plan_from_json(root));
  } else {
    fail("/schema", fmt::format("unknown kind \"{}\"", kind),
         "use \"pd2bw.profile\", \"pd2bw.cluster\" or \"pd2bw.plan\"");
  }
  report.schema = kind;
  report.schema_version = root.at("schema_version").get<std::string>();  // checked by the reader
  return report;
}

}  // namespace pd2bw::schemas

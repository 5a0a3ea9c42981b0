// Input files shared by the subcommands.
#include "inputs.hpp"

#include <fmt/format.h>

#include "cli.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/planner/plan_audit.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/files.hpp"

namespace pd2bw::cli {

void check_profile_shape(const schemas::Profile& profile, const std::string& label) {
  const schemas::ModelDesc& m = profile.model;
  const auto layers = static_cast<int64_t>(profile.layers.size());
  if ((m.kind == "gpt" || m.kind == "bert") && layers - 2 != m.blocks)
    throw SchemaError(fmt::format("{}: /model/blocks: is {}, but the profile lists {} layers, and a {} model has its "
                                  "embedding, its blocks and its head ({} blocks)",
                                  label, m.blocks, layers, m.kind, layers - 2),
                      "profile the model again with `pd2bw profile`; a model pd2bw does not train may name another "
                      "/model/kind, and is then planned from its layers alone");
}

LoadedProfile load_profile(const std::string& path) {
  LoadedProfile out;
  std::string text;
  if (path.empty()) {
    text = std::string(builtin_profile_json());
    out.label = "built-in example gpt-3.8b (pass --profile FILE for your own model)";
  } else {
    text = schemas::read_input_file(path, "profile", schemas::kMaxDocumentBytes);
    out.label = path;
  }
  try {
    out.profile = schemas::parse_profile(text);
  } catch (const SchemaError& e) {
    throw SchemaError(fmt::format("{}: {}", out.label, e.what()), e.hint());
  }
  check_profile_shape(out.profile, out.label);
  out.sha256 = schemas::sha256_hex(text);
  return out;
}

void fail_with_findings(const std::string& path, const std::vector<planner::PlanFinding>& found,
                        std::string_view against, std::string hint) {
  std::string text = fmt::format("{}: {} number{} of the plan {}:", path, found.size(), found.size() == 1 ? "" : "s",
                                 against);
  for (const auto& f : found) text += fmt::format("\n  {}: {}", f.pointer, f.message);
  throw SchemaError(text, std::move(hint));
}

void check_plan_rules(const schemas::Plan& plan, const std::string& path) {
  const auto found = planner::check_plan_numbers(plan);
  if (!found.empty())
    fail_with_findings(path, found, "break the rules every plan follows",
                       "a plan edited by hand cannot be trusted; regenerate it with `pd2bw plan`");
}

schemas::Plan load_plan(const std::string& path, std::string* sha256) {
  const std::string text = schemas::read_input_file(path, "plan", schemas::kMaxDocumentBytes);
  if (sha256) *sha256 = schemas::sha256_hex(text);
  schemas::Plan plan;
  try {
    plan = schemas::parse_plan(text);
  } catch (const SchemaError& e) {
    throw SchemaError(fmt::format("{}: {}", path, e.what()),
                      e.hint().empty() ? "regenerate the plan with 'pd2bw plan'" : e.hint());
  }
  check_plan_rules(plan, path);  // what `validate` checks, before any verb acts on the plan
  return plan;
}

void check_plan_profile(const schemas::Plan& plan, const std::string& plan_path, const LoadedProfile& profile) {
  if (plan.profile_sha256 != profile.sha256)
    throw UsageError(fmt::format("{} was made from a profile with sha256 {}, but {} has sha256 {}", plan_path,
                                 plan.profile_sha256.substr(0, 12), profile.label, profile.sha256.substr(0, 12)),
                     "pass the profile the plan was made from with --profile, or re-plan with this profile");
}

}  // namespace pd2bw::cli

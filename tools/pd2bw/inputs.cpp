// Input files shared by the subcommands.
#include "inputs.hpp"

#include <fmt/format.h>

#include "cli.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/files.hpp"

namespace pd2bw::cli {

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
  out.sha256 = schemas::sha256_hex(text);
  return out;
}

schemas::Plan load_plan(const std::string& path, std::string* sha256) {
  const std::string text = schemas::read_input_file(path, "plan", schemas::kMaxDocumentBytes);
  if (sha256) *sha256 = schemas::sha256_hex(text);
  try {
    return schemas::parse_plan(text);
  } catch (const SchemaError& e) {
    throw SchemaError(fmt::format("{}: {}", path, e.what()),
                      e.hint().empty() ? "regenerate the plan with 'pd2bw plan'" : e.hint());
  }
}

void check_plan_profile(const schemas::Plan& plan, const std::string& plan_path, const LoadedProfile& profile) {
  if (plan.profile_sha256 != profile.sha256)
    throw UsageError(fmt::format("{} was made from a profile with sha256 {}, but {} has sha256 {}", plan_path,
                                 plan.profile_sha256.substr(0, 12), profile.label, profile.sha256.substr(0, 12)),
                     "pass the profile the plan was made from with --profile, or re-plan with this profile");
}

}  // namespace pd2bw::cli

// Reading the input files every subcommand shares: a profile (or the built-in example) and a plan,
// with file names in the error messages.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "pd2bw/planner/plan_audit.hpp"

#include "pd2bw/schemas/plan.hpp"
#include "pd2bw/schemas/profile.hpp"

namespace pd2bw::cli {

struct LoadedProfile {
  schemas::Profile profile;
  std::string sha256;  // of the file's bytes
  std::string label;   // the path, or a description of the built-in example
};

// `path` empty: the built-in gpt-3.8b example. Throws UsageError (unreadable) or SchemaError.
LoadedProfile load_profile(const std::string& path);

// Reads and checks a plan file: its format, then its numbers by check_plan_rules (the checks `validate`
// runs, so every verb refuses what validate refuses); when `sha256` is given, stores the file's sha256
// there (from the same read). Throws UsageError / SchemaError.
schemas::Plan load_plan(const std::string& path, std::string* sha256 = nullptr);

// Throws one SchemaError listing every finding, led by "<path>: N numbers of the plan <against>:".
[[noreturn]] void fail_with_findings(const std::string& path, const std::vector<planner::PlanFinding>& found,
                                     std::string_view against, std::string hint);

// The rules every plan follows (planner::check_plan_numbers); throws SchemaError naming each breach.
void check_plan_rules(const schemas::Plan& plan, const std::string& path);

// A gpt or bert profile must list blocks + 2 layers (embedding, blocks, head): `train` builds the model
// from /model, so a plan of any other count could never run. Other kinds pass. Throws SchemaError naming
// /model/blocks, prefixed with `label`.
void check_profile_shape(const schemas::Profile& profile, const std::string& label);

// Throws UsageError unless `plan` was made from `profile` (same sha256 of the profile file).
void check_plan_profile(const schemas::Plan& plan, const std::string& plan_path, const LoadedProfile& profile);

}  // namespace pd2bw::cli

// `pd2bw validate [--profile F] FILE...`: checks profile, cluster and plan files against their formats;
// a plan's numbers are checked too, on their own and, with --profile, against the profile they came from.
#include <fmt/format.h>

#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "inputs.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/planner/plan_audit.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/validate.hpp"

namespace pd2bw::cli {

namespace {

struct ValidateOptions {
  std::vector<std::string> files;
  std::string profile_path;
};

void check_plan_file(const std::string& path, const std::string& text, const LoadedProfile* profile) {
  const schemas::Plan plan = schemas::parse_plan(text);
  check_plan_rules(plan, path);
  if (!profile) return;
  const auto diff = planner::check_plan_against(profile->profile, plan);
  if (!diff.empty())
    fail_with_findings(path, diff, fmt::format("differ from what {} gives", profile->label),
              "regenerate the plan from this profile with `pd2bw plan --profile ...`");
  if (plan.profile_sha256 != profile->sha256)
    fmt::print(stderr, "note: {} was made from another profile file (its sha256 differs), but every number agrees\n",
               path);
}

void run_validate(const ValidateOptions& o) {
  std::optional<LoadedProfile> profile;
  if (!o.profile_path.empty()) profile = load_profile(o.profile_path);
  for (const auto& path : o.files) {
    const std::string text = schemas::read_text_file(path);
    schemas::ValidationReport r;
    try {
      r = schemas::validate_document(text);
      if (r.schema == "pd2bw.plan") check_plan_file(path, text, profile ? &*profile : nullptr);
      if (r.schema == "pd2bw.profile") check_profile_shape(schemas::parse_profile(text), path);
    } catch (const SchemaError& e) {
      if (std::string_view(e.what()).starts_with(path + ": ")) throw;
      throw SchemaError(fmt::format("{}: {}", path, e.what()), e.hint());
    }
    const bool against = profile && r.schema == "pd2bw.plan";
    fmt::print("{}: ok ({} {}): {}{}\n", path, r.schema, r.schema_version, r.summary,
               against ? fmt::format("; every number agrees with {}", profile->label) : "");
  }
}

}  // namespace

void add_validate_command(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand(
      "validate", "Check pd2bw files (profile, cluster or plan; the kind is read from the file's \"schema\" "
                  "field) and say exactly what is wrong. A plan's numbers are checked as well: memory totals "
                  "against their terms and the device, in-flight counts against the schedule, step times "
                  "against the stages; with --profile every stage and prediction is recomputed from it");
  auto o = std::make_shared<ValidateOptions>();
  cmd->add_option("files", o->files, "JSON files to check")->required();
  cmd->add_option("--profile", o->profile_path,
                  "Profile JSON the plans were made from: recompute their memory terms, in-flight counts, "
                  "stage times and predictions (replayed by the simulator) and report every difference");
  cmd->callback([o, &run] { run = [o] { run_validate(*o); }; });
}

}  // namespace pd2bw::cli

// `pd2bw export --plan P --to torch|megatron [--profile F] [-o OUT] [--as-flush]`: turns a plan into what
// other engines read (formats and mapping in export.hpp). 2BW, which only pd2bw runs, is refused unless
// --as-flush asks for the flush plan of the same split.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <memory>
#include <optional>

#include "cli.hpp"
#include "export.hpp"
#include "inputs.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/files.hpp"

namespace pd2bw::cli {

namespace {

struct ExportOptions {
  std::string plan_path, profile_path, target, out;
  bool as_flush = false;
};

std::string plan_schema_version(const std::string& path) {
  const std::string text = schemas::read_input_file(path, "plan", schemas::kMaxDocumentBytes);
  return nlohmann::json::parse(text).value("schema_version", std::string());
}

// Applies --as-flush, or refuses 2bw without it.
void choose_schedule(ExportInput& in, bool as_flush) {
  using schemas::Schedule;
  schemas::Plan& p = in.plan;
  if (!as_flush) {
    if (p.schedule == Schedule::two_bw)
      throw UsageError(fmt::format("{} uses the 2bw schedule (PipeDream-2BW: two weight versions, no flush), which no "
                                   "engine but pd2bw runs",
                                   in.plan_path),
                       "pass --as-flush to export the flush plan of the same split (same stages, replicas and "
                       "microbatches; one weight version and a flush per step), or run it with `pd2bw train`");
    return;
  }
  if (p.chunks_per_rank > 1)
    throw UsageError(fmt::format("--as-flush: {} holds {} model chunks per rank ({}), and a flush plan runs one chunk "
                                 "per rank, so the split cannot be kept",
                                 in.plan_path, p.chunks_per_rank, schemas::to_string(p.schedule)),
                     "re-plan with `pd2bw plan --schedule flush`, or export without --as-flush");
  if (p.schedule == Schedule::flush) return;  // already the flush plan
  p.schedule = Schedule::flush;
  in.as_flush = true;
}

void check_profile_layers(const ExportInput& in, const LoadedProfile& profile) {
  const auto layers = static_cast<int64_t>(profile.profile.layers.size());
  if (layers != in.plan.num_layers)
    throw UsageError(fmt::format("{} lists {} layers, but {} splits a model of {} layers", profile.label, layers,
                                 in.plan_path, in.plan.num_layers),
                     "pass the profile the plan was made from with --profile, or re-plan with this profile");
  if (in.plan.profile_sha256 != profile.sha256)
    fmt::print(stderr, "note: {} was made from another profile file (its sha256 differs); layer names come from {}\n",
               in.plan_path, profile.label);
}

std::string without_extension(const std::string& out) {
  for (const std::string ext : {".csv", ".json"})
    if (out.size() > ext.size() && out.ends_with(ext)) return out.substr(0, out.size() - ext.size());
  return out;
}

std::string base_name(const std::string& path) {
  const auto slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// "zb-h1", or "2bw, exported as its flush plan".
std::string schedule_label(const ExportInput& in) {
  return fmt::format("{}{}", schemas::to_string(in.planned_schedule), in.as_flush ? ", exported as its flush plan" : "");
}

std::string flush_note(const ExportInput& in) {
  return fmt::format("note: this is the flush plan of {}'s {} split: the same stages, replicas and microbatches, run "
                     "as PipeDream-Flush (1F1B, one weight version, a flush per step); the plan's predictions were "
                     "made for {}\n",
                     in.plan_path, schemas::to_string(in.planned_schedule), schemas::to_string(in.planned_schedule));
}

void export_torch(const ExportInput& in, const std::string& out) {
  if (out.empty()) throw UsageError("--to torch needs -o OUT (writes OUT.csv and OUT.json)", "add -o run/schedule");
  if (out == "-") throw UsageError("--to torch writes two files; -o - (stdout) cannot hold them", "pass -o PATH");
  const std::string base = without_extension(out), csv_path = base + ".csv", json_path = base + ".json";
  schemas::check_output_path(csv_path, "the schedule CSV");
  schemas::check_output_path(json_path, "the split JSON");
  const auto table = torch_schedule_table(in.plan);
  size_t slots = 0;
  for (const auto& row : table) slots = std::max(slots, row.size());
  schemas::write_text_file(csv_path, torch_schedule_csv(table));
  schemas::write_text_file(json_path, torch_split_json(in, base_name(csv_path)));
  const schemas::Plan& p = in.plan;
  const std::string cls = torch_schedule_class(p.schedule);
  fmt::print("exported {} ({}) for torch.distributed.pipelining: {} ({} pipeline ranks x {} time slots, {} stages, "
             "{} microbatches), {} (split; microbatch {} samples, global batch {} samples, data-parallel width {}); "
             "built-in class {}\n",
             in.plan_path, schedule_label(in), csv_path, table.size(),
             slots, p.depth * p.chunks_per_rank, p.microbatches_per_step, json_path, p.microbatch_size,
             p.global_batch, p.width, cls.empty() ? "none (run the CSV with _PipelineScheduleRuntime)" : cls);
  if (in.as_flush) fmt::print("{}", flush_note(in));
}

void export_megatron(const ExportInput& in, const std::string& out) {
  if (!out.empty() && out != "-") schemas::check_output_path(out, "-o");
  const auto args = megatron_args(in);
  std::string text;
  for (const auto& a : args) text += a + "\n";
  const schemas::Plan& p = in.plan;
  const int64_t blocks = p.num_layers - 2;
  fmt::print("# Megatron-LM arguments for {} ({}); launch {} processes: {} data-parallel replicas x {} pipeline "
             "stages\n# pd2bw's layer 0 (embedding) goes to the first stage and layer {} (head and loss) to the last; "
             "--num-layers counts the {} transformer blocks between them\n",
             in.plan_path, schedule_label(in), p.width * p.depth, p.width,
             p.depth, p.num_layers - 1, blocks);
  if (in.as_flush) fmt::print("# {}", flush_note(in));
  fmt::print("{}", text);
  if (!out.empty() && out != "-") {
    schemas::write_text_file(out, text);
    fmt::print("# wrote {} ({} arguments, one per line)\n", out, args.size());
  }
}

void run_export(const ExportOptions& o) {
  ExportInput in;
  in.plan_path = o.plan_path;
  in.plan = load_plan(o.plan_path);
  in.plan_schema_version = plan_schema_version(o.plan_path);
  in.planned_schedule = in.plan.schedule;
  std::optional<LoadedProfile> profile;
  if (!o.profile_path.empty()) {
    profile = load_profile(o.profile_path);
    check_profile_layers(in, *profile);
    in.profile = &profile->profile;
  }
  choose_schedule(in, o.as_flush);
  if (o.target == "torch")
    export_torch(in, o.out);
  else
    export_megatron(in, o.out);
}

}  // namespace

void add_export_command(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand(
      "export",
      "Turn a plan into what other engines read. --to torch: OUT.csv, PyTorch's pipeline schedule (one row per "
      "pipeline rank, one column per time slot, cells <stage>F|B|I|W<microbatch>, as "
      "torch.distributed.pipelining's _load_csv reads) and OUT.json, the split (layer ranges per stage, ranks, "
      "microbatch size and global batch in samples, microbatches per step, data-parallel width, recompute). --to "
      "megatron: the Megatron-LM arguments, printed and written to OUT one per line. A 2bw plan, which only pd2bw "
      "runs, needs --as-flush");
  auto o = std::make_shared<ExportOptions>();
  cmd->add_option("--plan", o->plan_path, "Plan JSON from 'pd2bw plan'")->required();
  cmd->add_option("--to", o->target, "torch | megatron")->required()->check(CLI::IsMember({"torch", "megatron"}));
  cmd->add_option("--profile", o->profile_path,
                  "Profile JSON the plan was made from: adds layer names to the split, and tells Megatron which "
                  "layers are embedding, blocks and head (its layer count must equal the plan's)");
  cmd->add_option("-o,--output", o->out,
                  "torch: OUT.csv and OUT.json (a trailing .csv or .json is dropped; required); megatron: the "
                  "arguments file (optional; the arguments are printed either way)");
  cmd->add_flag("--as-flush", o->as_flush,
                "Export the flush plan (PipeDream-Flush: 1F1B, one weight version) of the plan's split: same stages, "
                "replicas and microbatches. For 2bw plans, and for schedules the target lacks (Megatron: gpipe, "
                "zb-h1, zb-h2)");
  cmd->callback([o, &run] { run = [o] { run_export(*o); }; });
}

}  // namespace pd2bw::cli

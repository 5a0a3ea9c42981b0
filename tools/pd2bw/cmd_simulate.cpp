// `pd2bw simulate`: replays a plan's schedule event by event with the profile's durations, prints where
// the time and memory go, and writes a Chrome trace and an SVG Gantt chart on request.
#include <fmt/format.h>

#include <memory>

#include "cli.hpp"
#include "inputs.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "pd2bw/planner/timeline.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/files.hpp"
#include "sim_report.hpp"

namespace pd2bw::cli {

namespace {

struct SimulateOptions {
  std::string plan_path, profile_path, trace_path, svg_path, json_path;
  int64_t steps = 0;
  bool quiet = false;
};

void run_simulate(const SimulateOptions& o) {
  const schemas::Plan plan = load_plan(o.plan_path);
  const LoadedProfile profile = load_profile(o.profile_path);
  check_plan_profile(plan, o.plan_path, profile);
  for (const auto& [path, flag] : {std::pair{o.trace_path, "--trace"}, {o.svg_path, "--svg"}, {o.json_path, "--json"}})
    if (!path.empty()) schemas::check_output_path(path, flag);
  const planner::PlanModel pm = planner::plan_model(profile.profile, plan);
  auto in = planner::make_sim_input(pm.model, pm.candidate, pm.bounds, pm.recompute,
                                    o.steps > 0 ? o.steps : planner::default_sim_steps(plan.schedule));
  const bool keep = !o.trace_path.empty() || !o.svg_path.empty();
  if (!o.quiet)
    fmt::print(stderr, "simulating {}: {} b={} m={} d={} w={} ({} ranks), {}, profile {}\n", o.plan_path,
               schemas::to_string(plan.schedule), plan.microbatch_size, plan.microbatches_per_step, plan.depth,
               plan.width, plan.width * plan.depth,
               o.steps > 0 ? fmt::format("{} steps", o.steps) : std::string("until two steps agree"), profile.label);
  // --steps replays exactly that many steps; without it, steps are added until the replay is steady.
  const planner::SimResult sim = o.steps > 0 ? planner::simulate(in, keep) : planner::simulate_steady(in, keep);
  in.spec.steps = static_cast<int64_t>(sim.step_end_ms.size());
  if (o.quiet) fmt::print(stderr, "{}", memory_warnings(in, sim));
  if (!o.quiet) print_sim_table(plan, in, sim);
  if (!o.trace_path.empty()) {
    schemas::write_text_file(o.trace_path, planner::chrome_trace(in, sim));
    if (!o.quiet)
      fmt::print(stderr, "wrote {} ({} op events; open in https://ui.perfetto.dev or chrome://tracing)\n",
                 o.trace_path, planner::chrome_trace_op_events(sim));
  }
  if (!o.svg_path.empty()) {
    planner::GanttOptions g;
    g.title = fmt::format("{} {}: b={} m={} d={} w={}, {} steps", bounded(plan.model.name), schemas::to_string(plan.schedule),
                          plan.microbatch_size, plan.microbatches_per_step, plan.depth, plan.width, in.spec.steps);
    schemas::write_text_file(o.svg_path, planner::gantt_svg(in, sim, g));
    if (!o.quiet) fmt::print(stderr, "wrote {}\n", o.svg_path);
  }
  if (!o.json_path.empty()) {
    schemas::write_text_file(o.json_path, sim_report_json(plan, in, sim));
    if (!o.quiet && o.json_path != "-") fmt::print(stderr, "wrote {}\n", o.json_path);
  }
}

}  // namespace

void add_simulate_command(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand(
      "simulate", "Replay a plan's schedule event by event: step time, bubbles, memory over time, pictures");
  auto o = std::make_shared<SimulateOptions>();
  cmd->add_option("--plan", o->plan_path, "Plan JSON from 'pd2bw plan'")->required();
  cmd->add_option("--profile", o->profile_path,
                  "The profile the plan was made from (default: the built-in gpt-3.8b example); its sha256 "
                  "must match the plan's");
  cmd->add_option("--steps", o->steps,
                  "Optimizer steps to replay (default: from 5 for 2bw and 3 otherwise, doubling until two "
                  "consecutive steps agree, at most 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{1000}));
  cmd->add_option("--trace", o->trace_path,
                  "Write a Chrome trace JSON (one process per rank; times in microseconds)");
  cmd->add_option("--svg", o->svg_path, "Write an SVG Gantt chart (one row per stage, memory under each)");
  cmd->add_option("--json", o->json_path, "Write the numbers as JSON ('-' for stdout)");
  cmd->add_flag("-q,--quiet", o->quiet, "Print nothing but errors");
  cmd->callback([o, &run] { run = [o] { run_simulate(*o); }; });
}

}  // namespace pd2bw::cli

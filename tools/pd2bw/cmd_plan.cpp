// `pd2bw plan`: searches schedule, microbatch size, width, depth, placement and stage splits for the
// fastest plan that fits, writes plan.json and prints a human summary on stderr.
#include <fmt/format.h>

#include <charconv>
#include <chrono>
#include <memory>
#include <string>
#include <vector>
#include <system_error>

#include "cli.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/planner/explain.hpp"
#include "pd2bw/planner/runtime_costs.hpp"
#include "pd2bw/planner/search.hpp"
#include "pd2bw/planner/simulator.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/files.hpp"
#include "pd2bw/schemas/plan.hpp"
#include "plan_options.hpp"
#include "plan_report.hpp"
#include "sim_report.hpp"

namespace pd2bw::cli {

namespace {

// Accepts the decimal integers in [lo, hi] and nothing else: a value past 64 bits is refused, never
// clamped to the largest one.
CLI::Validator count_in(int64_t lo, int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        int64_t v = 0;
        const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), v);
        if (err == std::errc::result_out_of_range) return fmt::format("{} does not fit in a 64-bit integer", text);
        if (err != std::errc{} || end != text.data() + text.size()) return fmt::format("{} is not an integer", text);
        if (v < lo || v > hi) return fmt::format("{} is outside [{}, {}]", text, lo, hi);
        return {};
      },
      fmt::format("INT in [{}, {}]", lo, hi));
}

void add_options(CLI::App* cmd, PlanOptions& o) {
  cmd->add_option("--profile", o.profile_path,
                  "Profile JSON from 'pd2bw profile' (default: the built-in gpt-3.8b example)");
  auto* cluster = cmd->add_option("--cluster", o.cluster_path,
                                  "Cluster JSON (topology levels, links, device memory)");
  auto* nodes = cmd->add_option("--nodes", o.nodes, "Number of nodes (default 1)")
                    ->check(count_in(1, int64_t{1} << 20));
  auto* gpn = cmd->add_option("--gpus-per-node", o.gpus_per_node, "Devices per node (default 8)")
                  ->check(count_in(1, int64_t{1} << 20));
  auto* mem = cmd->add_option("--device-memory", o.device_memory,
                              "Memory of one device, e.g. 16GiB, 80GB (default: the profile's device)");
  auto* intra = cmd->add_option("--intra-gbps", o.intra_gbps,
                                "Bandwidth inside a node in GB/s, p2p and allreduce bus bandwidth "
                                "(default: measured in the profile, else 150)")
                    ->check(CLI::PositiveNumber);
  auto* inter = cmd->add_option("--inter-gbps", o.inter_gbps,
                                "Bandwidth across nodes in GB/s (default: measured in the profile, else 25)")
                    ->check(CLI::PositiveNumber);
  auto* intra_lat = cmd->add_option("--intra-latency-us", o.intra_latency_us,
                                    "Latency inside a node in microseconds (default 5)")
                        ->check(CLI::NonNegativeNumber);
  auto* inter_lat = cmd->add_option("--inter-latency-us", o.inter_latency_us,
                                    "Latency across nodes in microseconds (default 10)")
                        ->check(CLI::NonNegativeNumber);
  for (auto* opt : {nodes, gpn, mem, intra, inter, intra_lat, inter_lat}) opt->excludes(cluster);
  cmd->add_option("--global-batch", o.global_batch, "Samples per optimizer step, = b * m * w")
      ->check(count_in(1, planner::kMaxGlobalBatch))->capture_default_str();
  cmd->add_option("--schedule", o.schedule,
                  "auto | 2bw | flush | gpipe | zb-h1 | interleaved | zb-h2 | zb-v (interleaved: Megatron's interleaved "
                  "1F1B, v >= 2 chunks per rank, m a multiple of d; zb-h1, zb-h2, zb-v need a profile that times the "
                  "backward in halves; auto searches them then)")->capture_default_str();
  cmd->add_option("--microbatch", o.microbatch, "auto | a profiled microbatch size (samples)")
      ->capture_default_str();
  cmd->add_option("--recompute", o.recompute,
                  "auto (only stages that do not fit otherwise) | never | always")->capture_default_str();
  cmd->add_option("--depth", o.depth, "Pin the number of pipeline stages d (0 = search)")
      ->check(count_in(0, planner::kMaxDepth))->capture_default_str();
  cmd->add_option("--width", o.width, "Pin the replicas per stage w (0 = search)")
      ->check(count_in(0, planner::kMaxGlobalBatch))->capture_default_str();
  cmd->add_option("--chunks", o.chunks,
                  "Pin the model chunks per rank v (interleaved: 2, 4, ...; zb-v: 2; 0 = search)")
      ->check(count_in(0, planner::kMaxDepth))->capture_default_str();
  cmd->add_option("--max-depth", o.max_depth, "Largest number of pipeline stages (0 = no limit)")
      ->check(count_in(0, planner::kMaxDepth))->capture_default_str();
  cmd->add_option("--optimizer", o.optimizer, "adamw (2 fp32 moments) | sgd (1 fp32 momentum)")
      ->capture_default_str();
  cmd->add_option("--reserve", o.reserve, "Device memory kept for runtime overhead (size)")
      ->capture_default_str();
  cmd->add_option("--top", o.top, "Alternatives to list besides the best of each other schedule (with --explain each other schedule's "
                  "row is its exact best, the plan --schedule S writes, whatever --top)")
      ->check(CLI::Range(int64_t{0}, int64_t{100}))->capture_default_str();
  cmd->add_option("--threads", o.threads,
                  "Threads for the search (0 = one per hardware thread); the plan does not depend on it")
      ->check(CLI::Range(int64_t{0}, int64_t{64}))->capture_default_str();
  cmd->add_option("-o,--output", o.output, "Where to write the plan ('-' for stdout)")
      ->capture_default_str();
  cmd->add_flag("--explain", o.explain,
                "Also show where the time goes (compute, p2p, allreduce, bubble) and which memory term binds, "
                "for the chosen plan and the exact best of each other schedule (a search pinned to each; their rows "
                "among the alternatives are those plans)");
  cmd->add_flag("-q,--quiet", o.quiet, "Print nothing but errors");
}

void run_plan(const PlanOptions& o) {
  const auto t0 = std::chrono::steady_clock::now();
  back_heap_with_huge_pages(size_t{256} << 20);
  const PlanInputs in = resolve_plan_inputs(o);
  schemas::check_output_path(o.output, "-o");
  const planner::CostModel model = [&in] {
    try {
      return planner::CostModel(in.profile, in.cluster, in.constraints);
    } catch (const SchemaError& e) {  // a field of the profile the planner cannot price: name the file
      throw SchemaError(fmt::format("{}: {}", in.profile_label, e.what()), e.hint());
    }
  }();
  if (!o.quiet) print_plan_header(in, model);
  if (!o.quiet) fmt::print(stderr, "{}\n", planner::runtime_costs_note(in.profile));
  planner::SearchOptions so;
  so.top_k = o.top;
  so.threads = o.threads;
  if (o.explain) so.share = planner::make_search_share();  // the pinned searches below reuse what it finds
  auto result = planner::search(model, so);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (result.candidates == 0 && result.left_out.count > 0)
    throw UsageError(fmt::format("every (schedule, microbatch, width, depth) for global batch {} has more than {} "
                                 "microbatch-stages per step (m x d), the planner's replay limit",
                                 in.constraints.global_batch, planner::kMaxReplayedMicrobatches),
                     "plan a smaller --global-batch or a larger --microbatch, or pin a smaller --depth");
  if (result.candidates == 0) {
    throw UsageError(
        fmt::format("no (schedule, microbatch, width, depth) fits global batch {} on {} devices",
                    in.constraints.global_batch, in.cluster.total_devices()),
        "the global batch must be a multiple of b * w for a profiled microbatch size b, and 2bw needs "
        "m >= d; try another --global-batch");
  }
  if (!result.feasible() && result.left_out.not_ruled_out) throw_left_out_may_fit(result.left_out);
  if (!result.feasible()) throw_infeasible(model, planner::closest_infeasible(model));
  schemas::Provenance prov{"pd2bw", std::string(schemas::pd2bw_version()),
                           std::string(schemas::pd2bw_git_sha()), command_line(), ""};
  // With --explain every other schedule's row among the alternatives is its exact best (the plan
  // `--schedule S` writes), not a representative; the same plans are explained below.
  std::vector<planner::Evaluated> bests;
  if (o.explain) {
    bests = planner::best_of_each_schedule(in.profile, in.cluster, in.constraints, result, o.threads, so.share);
    planner::put_exact_bests(result, bests);
  }
  const auto plan = planner::build_plan(model, result, in.profile_sha256, prov);
  const std::string text = schemas::dump_plan(plan);
  schemas::write_text_file(o.output, text);
  if (!o.quiet) {
    print_plan_table(plan, model);
    // With --explain a schedule without a row has no plan that fits (its pinned search found none).
    print_alternatives(plan, o.explain ? std::vector<schemas::Schedule>{} : planner::searched_schedules(model));
    if (o.explain) print_explain(model, bests);
    fmt::print(stderr, "searched {} candidates, evaluated {} best splits, replayed {} splits in {:.3f} s\n",
               result.candidates, result.evaluated, result.replayed, seconds);
    if (result.left_out.floor_ms < result.ranked.front().step_ms)
      fmt::print(stderr, "left out {} candidates with more than {} microbatch-stages per step (m x d), too long to "
                         "replay; none of them can step in under {:.2f} ms\n", result.left_out.count,
                 planner::kMaxReplayedMicrobatches, result.left_out.floor_ms);
    if (result.unsearched.floor_ms < result.ranked.front().step_ms)
      fmt::print(stderr, "searched the {} candidates with the least lower bounds (at most {} of them chunked); the {} "
                         "others cannot step in under {:.2f} ms\n", result.searched,
                 in.constraints.schedule ? planner::kMaxPinnedChunkedSearched : planner::kMaxChunkedSearched,
                 result.unsearched.count, result.unsearched.floor_ms);
    if (result.unproven > 0)
      fmt::print(stderr, "{} candidates that could still win needed more work than the split search allows: only "
                         "their greedy splits were tried\n", result.unproven);
    if (!result.ranked.front().steady)
      fmt::print(stderr, "note: the chosen plan's replay did not settle within {} steps; its predicted step is the "
                         "last measured one, an upper bound on the steady step\n", planner::kMaxSteadySteps);
    if (result.proven_gap > 0)
      fmt::print(stderr, "no split of any candidate replays more than {:.2f}% faster than the chosen one\n",
                 100.0 * result.proven_gap);
    else
      fmt::print(stderr, "no split of any candidate replays faster than the chosen one\n");
    if (o.output != "-") fmt::print(stderr, "wrote {}\n", o.output);
  }
}

}  // namespace

void add_plan_command(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand(
      "plan", "Choose stage splits, replication, microbatch size/count and schedule -> plan.json");
  auto opts = std::make_shared<PlanOptions>();
  add_options(cmd, *opts);
  cmd->callback([opts, &run] { run = [opts] { run_plan(*opts); }; });
}

}  // namespace pd2bw::cli

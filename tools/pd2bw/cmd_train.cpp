// `pd2bw train`: runs 2BW (or Flush / GPipe) training from a plan on the cpu or the cuda backend, with
// every rank a thread of this process (all on one GPU with cuda) or, under mpirun / srun, one process
// per rank; a progress line per step (rank 0), JSONL metrics and checkpoints.
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <memory>

#include "cli.hpp"
#include "inputs.hpp"
#include "pd2bw/executor/process_group.hpp"
#include "pd2bw/executor/trainer.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/files.hpp"

namespace pd2bw::cli {

namespace {

struct TrainFlags {
  std::string plan_path, report_path;
  std::string transport = "auto";
  executor::TrainOptions o;
};

// How this run's ranks talk: the transport, and the process group when each rank is a process.
struct Launch {
  std::string transport;
  std::unique_ptr<executor::ProcessGroup> group;
  bool root() const { return !group || group->rank() == 0; }
};

// "auto": one process per rank when a launcher started several processes, else threads; the process
// transport ("process" until the device is known, see process_transport) is settled once the plan is
// read. A threads run under a launcher would run the whole job once per process, so it is refused.
Launch launch_for(const std::string& requested) {
  const executor::LaunchEnvironment env = executor::detect_launch_environment();
  Launch l;
  if (requested != "auto" && requested != "threads" && requested != "mpi" && requested != "nccl")
    throw UsageError(fmt::format("--transport must be auto, threads, mpi or nccl, got '{}'", requested));
  l.transport = requested == "auto" ? (env.world_size > 1 ? "process" : "threads") : requested;
  if (l.transport == "threads") {
    if (env.world_size > 1)
      throw UsageError(fmt::format("--transport threads runs every rank of the plan in this process, but {} started {} "
                                   "processes",
                                   env.launcher, env.world_size),
                       "drop --transport (under mpirun each process then runs one rank), or start one process");
    return l;
  }
  if (l.transport == "nccl" && executor::transport_built("mpi") && !executor::transport_built("nccl"))
    throw UsageError("this pd2bw was built without NCCL (the nccl transport needs the CUDA toolkit and nccl.h)",
                     "use --transport mpi, or build where CUDA and NCCL are installed");
  l.group = executor::join_process_group();
  if (l.group->size() > 1) set_error_context(fmt::format("rank {}: ", l.group->rank()));
  return l;
}

// The plan's figures for the rank at pipeline position `p`: the sums over its model chunks (one, stage p,
// unless the plan puts several on a rank); the reserve sits on one of them, so it is counted once.
struct PositionPlan {
  double compute_ms = 0;  // per microbatch through all of the rank's chunks
  int64_t total_bytes = 0, reserve_bytes = 0;
};
PositionPlan position_plan(const schemas::Plan& plan, size_t p) {
  PositionPlan out;
  for (const auto& s : plan.stages)
    if (static_cast<size_t>(schemas::chunk_position(plan.schedule, plan.depth, s.index)) == p) {
      out.compute_ms += s.compute_ms;
      out.total_bytes += s.memory.total_bytes;
      out.reserve_bytes += s.memory.reserve_bytes;
    }
  return out;
}

// Machine-readable summary of the run next to the plan's predictions (for benchmarks and scripts).
std::string report_json(const schemas::Plan& plan, const executor::TrainResult& r) {
  nlohmann::ordered_json j;
  j["schedule"] = std::string(schemas::to_string(plan.schedule));
  j["depth"] = plan.depth;
  j["width"] = plan.width;
  j["microbatch_size"] = plan.microbatch_size;
  j["microbatches_per_step"] = plan.microbatches_per_step;
  j["first_step"] = r.first_step;
  j["steps_run"] = r.losses.size();
  j["seconds"] = r.seconds;
  j["tokens_per_s"] = r.tokens_per_s;
  j["losses"] = r.losses;
  j["step_ms_planned"] = plan.predictions.step_ms;
  j["step_ms_measured"] = r.step_ms_median;
  j["step_ms"] = r.step_ms;
  j["skipped_steps"] = r.skipped_steps;
  j["device"] = r.device;
  j["device_memory_bytes"] = r.device_memory_bytes;
  j["model_flops_per_token"] = r.model_flops_per_token;
  j["peak_flops"] = r.peak_flops;
  j["mfu"] = r.mfu;
  auto& stages = j["stages"] = nlohmann::ordered_json::array();
  for (size_t i = 0; i < r.peak_bytes.size(); ++i) {
    const PositionPlan planned = position_plan(plan, i);
    stages.push_back({{"peak_bytes", r.peak_bytes[i]},
                      {"planned_bytes_without_reserve", planned.total_bytes - planned.reserve_bytes},
                      {"planned_total_bytes", planned.total_bytes},
                      {"compute_ms_planned", planned.compute_ms},
                      {"compute_ms_measured", r.compute_ms[i]},
                      {"weight_versions_allocated", r.versions[i]}});
  }
  return j.dump(2) + "\n";
}

std::string ranks_text(const schemas::Plan& plan, const Launch& l) {
  const int64_t ranks = plan.depth * plan.width;
  if (!l.group) return fmt::format("{} ranks as threads", ranks);
  return fmt::format("{} ranks as processes ({}, {} node(s))", ranks, l.transport, l.group->nodes());
}

void print_header(const schemas::Plan& plan, const TrainFlags& f, const Launch& l) {
  const auto& m = plan.model;
  const auto& o = f.o;
  fmt::print(stderr, "model: {} ({} blocks, d_model {}, {} heads, vocab {}, seq {}), {} on {}\n", bounded(m.name), m.blocks,
             m.d_model, m.heads, m.vocab, m.seq_len, o.dtype, o.device == "cuda" ? "the GPU (cuda)" : "the CPU");
  fmt::print(stderr, "plan: {} | {} b={} m={} d={} w={} | {} | global batch {} sequences\n", f.plan_path,
             schemas::to_string(plan.schedule), plan.microbatch_size, plan.microbatches_per_step, plan.depth, plan.width,
             ranks_text(plan, l), plan.global_batch);
  fmt::print(stderr, "optimizer: {} lr {:g} -> {:g} (warm-up {} steps, cosine), clip {:g}, seed {}; data: {}\n",
             schemas::to_string(plan.optimizer), o.lr, o.min_lr, o.warmup_steps, o.clip_norm, o.seed,
             o.data_path.empty() ? "built-in corpus" : o.data_path);
}

void print_summary(const schemas::Plan& plan, const executor::TrainResult& r) {
  if (r.losses.empty()) return;
  fmt::print(stderr, "done: steps {}-{} in {:.1f} s, {:.0f} tokens/s; loss {:.4f} -> {:.4f}\n", r.first_step + 1,
             r.first_step + static_cast<int64_t>(r.losses.size()), r.seconds, r.tokens_per_s, r.losses.front(),
             r.losses.back());
  auto err = [](double measured, double planned) {
    return planned > 0 && measured > 0 ? fmt::format("{:+.1f}%", 100.0 * (measured / planned - 1.0)) : std::string("-");
  };
  fmt::print(stderr, "prediction check (plan vs this run):\n");
  fmt::print(stderr, "  step time: planned {:.2f} ms, measured {:.2f} ms (median of {} steps after the first), {}\n",
             plan.predictions.step_ms, r.step_ms_median, r.step_ms.size(), err(r.step_ms_median, plan.predictions.step_ms));
  fmt::print(stderr, "  {:>5} {:>13} {:>13} {:>7}  {:>11} {:>11} {:>7}  {}\n", "stage", "compute/mb", "measured",
             "error", "memory", "measured", "error", "weight buffers");
  for (size_t i = 0; i < r.peak_bytes.size(); ++i) {
    const PositionPlan s = position_plan(plan, i);
    const int64_t planned = s.total_bytes - s.reserve_bytes;
    fmt::print(stderr, "  {:>5} {:>10.3f} ms {:>10.3f} ms {:>7}  {:>11} {:>11} {:>7}  {}\n", i, s.compute_ms, r.compute_ms[i],
               err(r.compute_ms[i], s.compute_ms), schemas::format_bytes(planned), schemas::format_bytes(r.peak_bytes[i]),
               err(static_cast<double>(r.peak_bytes[i]), static_cast<double>(planned)), r.versions[i]);
  }
  fmt::print(stderr, "  (compute: backend compute time per microbatch (cpu: thread CPU time; cuda: CUDA events); memory: "
                     "the stage arena's peak (weights, gradients, optimizer state, stashes, boundary and scratch "
                     "buffers) against the plan's total without its reserve)\n");
  if (r.device_memory_bytes <= 0) return;
  int64_t arenas = 0;
  for (int64_t b : r.peak_bytes) arenas += b;
  fmt::print(stderr, "  device: {} with {}; the stage arenas' peaks add up to {} ({:.1f}%; outside them: the CUDA "
                     "context, 32 MiB of cuBLASLt workspace per stage and the messages between stages)\n",
             r.device, schemas::format_bytes(r.device_memory_bytes), schemas::format_bytes(arenas),
             100.0 * static_cast<double>(arenas) / static_cast<double>(r.device_memory_bytes));
  if (r.peak_flops > 0)
    fmt::print(stderr, "  MFU: {:.1f}% ({:.1f} model TFLOP/s of a {:.0f} TFLOP/s dense peak; {:.0f} MFLOP per token)\n",
               100.0 * r.mfu, r.model_flops_per_token * r.tokens_per_s / 1e12, r.peak_flops / 1e12,
               r.model_flops_per_token / 1e6);
}

// The transport of a process per rank under --transport auto: nccl for GPU buffers where it is built,
// else mpi (device buffers then go through host memory).
std::string process_transport(const std::string& chosen, const std::string& device) {
  if (chosen != "process") return chosen;
  return device == "cuda" && executor::transport_built("nccl") ? "nccl" : "mpi";
}

void train_with(const TrainFlags& flags, Launch& launch) {
  std::string plan_sha256;
  const schemas::Plan plan = load_plan(flags.plan_path, &plan_sha256);
  TrainFlags f = flags;
  std::string note;
  f.o.dtype = executor::resolve_train_dtype(plan, flags.o.dtype, &note);
  f.o.device = executor::resolve_train_device(plan, flags.o.device);
  launch.transport = f.o.transport = process_transport(launch.transport, f.o.device);
  if (launch.group) executor::check_process_layout(plan, *launch.group);
  // Rank 0 writes both (a multi-process job whose rank 0 stops here is ended by its launcher).
  if (launch.root() && !f.report_path.empty()) schemas::check_output_path(f.report_path, "--report");
  if (launch.root() && !f.o.log_path.empty()) schemas::check_output_path(f.o.log_path, "--log");
  const bool talk = launch.root() && !f.o.quiet;
  if (talk) print_header(plan, f, launch);
  if (talk && !note.empty()) fmt::print(stderr, "note: {}\n", note);
  executor::TrainResult result;
  try {
    result = executor::train(plan, plan_sha256, f.o, stderr, launch.group.get());
  } catch (const executor::RankFailure& e) {
    launch.group->abort(report_error(e));  // the other processes would wait for this one forever
  }
  if (!result.has_results) return;
  if (talk) print_summary(plan, result);
  if (!f.report_path.empty()) schemas::write_text_file(f.report_path, report_json(plan, result));
}

void run_train(const TrainFlags& flags) {
  Launch launch = launch_for(flags.transport);
  try {
    train_with(flags, launch);
  } catch (const Error& e) {
    if (!launch.group) throw;
    throw ReportedError{report_error(e)};  // before MPI ends: then every process's message is out
  }
}

}  // namespace

void add_train_command(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand("train", "Train the plan's model with its schedule (cpu or cuda backend; ranks as "
                                          "threads, or one process per rank under mpirun / srun)");
  auto f = std::make_shared<TrainFlags>();
  auto& o = f->o;
  cmd->add_option("--plan", f->plan_path, "Plan JSON from 'pd2bw plan' (its model, stages, schedule and ranks)")
      ->required();
  cmd->add_option("--data", o.data_path,
                  "Training tokens: an llm.c .bin token file (GPT-2 ids) or any text file (bytes, vocab 256); "
                  "default: the built-in corpus");
  cmd->add_option("--steps", o.steps, "Optimizer steps in all (one step = the plan's global batch)")
      ->capture_default_str();
  cmd->add_option("--lr", o.lr, "Peak learning rate")->capture_default_str();
  cmd->add_option("--min-lr", o.min_lr, "Learning rate at the end of the cosine decay")->capture_default_str();
  cmd->add_option("--warmup", o.warmup_steps, "Linear warm-up, in steps")->capture_default_str();
  cmd->add_option("--weight-decay", o.weight_decay, "Weight decay on weight matrices")->capture_default_str();
  cmd->add_option("--clip", o.clip_norm, "Clip the global gradient norm to this (0 = off)")->capture_default_str();
  cmd->add_option("--seed", o.seed, "Seed of the initial weights and of the data order")->capture_default_str();
  cmd->add_option("--mask-rate", o.mask_rate,
                  "bert: share of each sequence's tokens the masked-LM loss predicts, in (0, 1) (of those, 80% become "
                  "[MASK], 10% a random token, 10% stay)")
      ->capture_default_str();
  cmd->add_option("--dtype", o.dtype,
                  "Compute dtype: float | double | bf16 (bf16 keeps fp32 master weights, gradients and moments). "
                  "Default: the plan's model dtype (fp32 -> float, bf16 -> bf16)");
  cmd->add_option("--device", o.device,
                  "Backend: cpu | cuda (with ranks as threads, all stages share the current GPU and pass activations "
                  "by device copies; one process per rank uses its rank's local GPU). Default: the device the plan "
                  "was made for: cpu for a plan whose device is 'cpu', cuda for a GPU's");
  cmd->add_option("--log", o.log_path, "Write one JSON record per step (step, loss, lr, tokens, tokens_per_s, "
                                      "elapsed_s; bert: masked_tokens, the positions the loss counted) to this file");
  cmd->add_option("--checkpoint-dir", o.checkpoint_dir,
                  "Directory for checkpoints: one step-NNNNNN/ directory per save (a safetensors file per stage and "
                  "manifest.json), a 'latest' pointer and a lock that keeps out a second trainer");
  cmd->add_option("--checkpoint-every", o.checkpoint_every,
                  "Steps between checkpoints (0: one at the end when --checkpoint-dir is given)")
      ->capture_default_str();
  cmd->add_option("--stop-after", o.stop_after,
                  "Run at most this many steps now, then stop (for time-limited jobs; --resume continues, the "
                  "schedule still spans --steps)")
      ->capture_default_str();
  cmd->add_option("--keep", o.keep, "Complete checkpoints kept after each save, newest first (>= 1)")
      ->capture_default_str();
  cmd->add_flag("--resume", o.resume, "Continue bit-identically from the newest complete checkpoint in --checkpoint-dir");
  cmd->add_flag("--skip-nonfinite", o.skip_nonfinite,
                "Skip a step whose loss or gradient is not finite (its update is not applied) instead of stopping");
  cmd->add_flag("--no-divergence-guard{false}", o.divergence_guard,
                "Train on when the loss diverges; by default a step whose loss is over 1000 x the first step's "
                "stops training (exit 1, no checkpoint of that step)");
  cmd->add_option("--report", f->report_path,
                  "Write a JSON summary: tokens/s, losses, per-stage peak memory next to the plan's prediction");
  cmd->add_option("--transport", f->transport,
                  "How ranks exchange activations and gradients: auto (one process per rank when mpirun or srun "
                  "started several processes, over nccl with --device cuda where it is built and mpi otherwise; "
                  "else threads) | threads (every rank a thread of this process) | "
                  "mpi (one process per rank, host memory) | nccl (one process per rank and GPU)")
      ->capture_default_str();
  cmd->add_option("--peer-timeout", o.peer_timeout_s,
                  "One process per rank: seconds a rank may stay silent (its process or host lost, or stopped) "
                  "before every other rank stops with a message naming it; 0 = wait forever, else >= 1")
      ->capture_default_str();
  cmd->add_flag("-q,--quiet", o.quiet, "Print nothing but errors");
  cmd->callback([f, &run] { run = [f] { run_train(*f); }; });
}

}  // namespace pd2bw::cli

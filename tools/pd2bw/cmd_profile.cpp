// `pd2bw profile`: times the executor's GPT layers and the links on this machine (its CPU, or its GPU
// with --device cuda; in-process ranks, or under mpirun / srun the links between the job's processes)
// and writes a profile.json for `pd2bw plan`, with a progress bar and a summary table on stderr.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <string_view>

#include "cli.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/process_group.hpp"
#include "pd2bw/profiler/profiler.hpp"
#include "pd2bw/schemas/common.hpp"
#include "pd2bw/schemas/files.hpp"

namespace pd2bw::cli {

namespace {

struct ProfileCliOptions {
  profiler::ProfileOptions opts;
  std::string model = "gpt";
  bool vocab_given = false;
  std::string microbatches = "1,2,4,8";
  std::string link_max_bytes = fmt::format("{}MiB", profiler::kDefaultLinkMaxBytes >> 20);
  std::string output = "profile.json";
  bool quiet = false;
  bool no_runtime_calibration = false;
};

// "1,2,4,8" -> {1, 2, 4, 8}; order and sign are checked by profiler::validate_options.
std::vector<int64_t> parse_list(std::string_view text, std::string_view flag) {
  std::vector<int64_t> out;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string item(text.substr(start, comma - start));
    size_t used = 0;
    int64_t value = 0;
    try {
      value = std::stoll(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (item.empty() || used != item.size())
      throw UsageError(fmt::format("{}: '{}' is not a comma-separated list of integers", flag, text),
                       "e.g. --microbatch 1,2,4,8");
    out.push_back(value);
    start = comma + 1;
  }
  return out;
}

// Draws "[#####.....]  42% block b=4" in place on a terminal, or prints one line per change otherwise.
class ProgressBar {
 public:
  explicit ProgressBar(bool quiet) : quiet_(quiet), tty_(isatty(STDERR_FILENO) == 1) {}
  void update(double fraction, const std::string& what) {
    if (quiet_) return;
    const int percent = static_cast<int>(fraction * 100.0 + 0.5);
    if (!tty_) {
      fmt::print(stderr, "profile: {:3d}% {}\n", percent, what);
      return;
    }
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    fmt::print(stderr, "\r[{}{}] {:3d}% {:<24}", std::string(static_cast<size_t>(filled), '#'),
               std::string(static_cast<size_t>(kWidth - filled), '.'), percent, what);
    if (fraction >= 1.0) fmt::print(stderr, "\n");
  }

 private:
  bool quiet_, tty_;
};

void print_summary(const schemas::Profile& p, double seconds, bool processes) {
  const bool gpu = p.device.name != "cpu";
  fmt::print(stderr, "model: {} ({} blocks, d_model {}, {} heads, seq {}, vocab {}), {} on {}; {:.1f} s\n", p.model.name,
             p.model.blocks, p.model.d_model, p.model.heads, p.model.seq_len, p.model.vocab,
             schemas::to_string(p.model.dtype), gpu ? p.device.name : std::string("the CPU"), seconds);
  if (gpu)
    fmt::print(stderr, "device: {}, {}, {} SMs, compute capability {}, driver {}, CUDA {}; copies {:.0f} GB/s on the "
                       "device, {:.1f} GB/s from pinned host memory\n",
               p.device.name, schemas::format_bytes(p.device.memory_bytes), p.device.multiprocessors,
               p.device.compute_capability, p.device.driver_version, p.device.cuda_version, p.device.device_copy_gbps,
               p.device.host_to_device_gbps);
  fmt::print(stderr, "{:<10} {:>4} {:>10} {:>10} {:>10} {:>16} {:>16}\n", "layer", "b", "fwd ms", "bwd ms",
             "recomp ms", "stash computed", "stash measured");
  for (const schemas::LayerProfile* l : {&p.layers.front(), &p.layers[1], &p.layers.back()}) {
    for (const schemas::LayerTiming& t : l->per_microbatch)
      fmt::print(stderr, "{:<10} {:>4} {:>10.4g} {:>10.4g} {:>10.4g} {:>16} {:>16}\n", l->kind, t.microbatch,
                 t.fwd_ms, t.bwd_ms, t.recompute_ms, schemas::format_bytes(t.stash_bytes_computed),
                 schemas::format_bytes(t.stash_bytes));
  }
  for (const schemas::LinkLevel& k : p.links)
    fmt::print(stderr,
               "link {} ({} ranks as {}): p2p {:.2f} GB/s at {}, latency {:.4f} ms at {}; allreduce busbw "
               "{:.2f} GB/s\n",
               k.level, k.allreduce_ranks, processes ? "processes" : "threads", k.p2p_gbps,
               schemas::format_bytes(k.p2p_curve.back().bytes), k.p2p_latency_ms,
               schemas::format_bytes(k.p2p_curve.front().bytes), k.allreduce_busbw_gbps);
}

// Under a launcher with several processes, every process joins the job and rank 0 writes the profile.
// After joining, a failure on one process would leave the others waiting, so it ends the job.
std::optional<schemas::Profile> profile_in_job(const ProfileCliOptions& o, ProgressBar& bar) {
  auto group = executor::join_process_group();
  set_error_context(fmt::format("rank {}: ", group->rank()));
  int code = 0;
  try {
    auto profile = profiler::run_profile_in_job(o.opts, [&bar](double f, const std::string& what) { bar.update(f, what); },
                                                *group);
    if (profile) schemas::write_text_file(o.output, schemas::dump_profile(*profile));
    group->barrier();
    return profile;
  } catch (const Error& e) {
    code = report_error(e);
  } catch (const std::exception& e) {
    code = report_error(Error(fmt::format("internal error: {}", e.what())));
  }
  group->abort(code);
}

void run_profile_command(ProfileCliOptions& o) {
  o.opts.model = o.model;
  if (o.model == "bert" && !o.vocab_given) o.opts.vocab = 256 + 4;  // the built-in corpus's bytes and [PAD] [CLS] [SEP] [MASK]
  o.opts.microbatches = parse_list(o.microbatches, "--microbatch");
  o.opts.link_max_bytes = schemas::parse_bytes(o.link_max_bytes, "--link-max-bytes");
  o.opts.command_line = command_line();
  o.opts.runtime_calibration = !o.no_runtime_calibration;
  profiler::validate_options(o.opts);  // before anything is printed
  const executor::LaunchEnvironment launch = executor::detect_launch_environment();
  const bool in_job = launch.world_size > 1;
  if (launch.world_rank == 0) schemas::check_output_path(o.output, "-o");  // rank 0 writes it
  const auto t0 = std::chrono::steady_clock::now();
  std::optional<schemas::Profile> profile;
  if (in_job) {
    ProgressBar bar(o.quiet);
    profile = profile_in_job(o, bar);
    if (!profile) return;  // rank 0 reports
  } else {
    ProgressBar bar(o.quiet);
    profile = profiler::run_profile(o.opts, [&bar](double f, const std::string& what) { bar.update(f, what); });
    schemas::write_text_file(o.output, schemas::dump_profile(*profile));
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (o.quiet) return;
  print_summary(*profile, seconds, in_job);
  if (o.output != "-") fmt::print(stderr, "wrote {}\n", o.output);
}

void add_options(CLI::App* cmd, ProfileCliOptions& o) {
  profiler::ProfileOptions& p = o.opts;
  cmd->add_option("--model", o.model,
                  "Model family: gpt (causal decoder, next-token loss) | bert (encoder, masked-LM loss over 15% of "
                  "the tokens)")
      ->capture_default_str();
  cmd->add_option("--ln", p.ln, "bert's layer-norm placement: post (BERT's, the default) | pre (Megatron's for deep BERTs)");
  cmd->add_option("--blocks,--layers", p.blocks,
                  "Transformer blocks L (the profile lists L + 2 layers: embedding, L blocks, head)")
      ->capture_default_str();
  cmd->add_option("--d-model", p.d_model, "Model width C")->capture_default_str();
  cmd->add_option("--heads", p.heads, "Attention heads H (must divide C)")->capture_default_str();
  cmd->add_option("--seq", p.seq_len, "Tokens per sample T")->capture_default_str();
  cmd->add_option("--vocab", p.vocab,
                  "Vocabulary size V (default 256, byte-level text; bert: 260, which adds its 4 special tokens)")
      ->each([&o](const std::string&) { o.vocab_given = true; });
  cmd->add_option("--name", p.name, "Model name in the profile (default: gpt-tiny for the default dims, else "
                                    "<model>-L<blocks>-C<d_model>)");
  cmd->add_flag("--tie-embeddings", p.tie_embeddings, "The head reuses the embedding's token table");
  cmd->add_option("--microbatch", o.microbatches,
                  "Microbatch sizes to time, samples, comma-separated and strictly increasing")
      ->capture_default_str();
  cmd->add_option("--device", p.device,
                  "cpu | cuda (the current GPU: layers timed with CUDA events, links between stages sharing it)")
      ->capture_default_str();
  cmd->add_option("--dtype", p.dtype, "Compute dtype: fp32 | bf16 (bf16 needs cuda)")->capture_default_str();
  cmd->add_option("--warmup", p.warmup, "Untimed forward+backward runs per layer and microbatch")
      ->capture_default_str();
  cmd->add_option("--iters", p.iters, "Timed runs per layer and microbatch (the profile keeps the median ms)")
      ->capture_default_str();
  cmd->add_option("--link-ranks", p.link_ranks,
                  "Ranks (threads) in the measured allreduce, >= 2 (under mpirun: the processes of each level)")
      ->capture_default_str();
  cmd->add_option("--link-max-bytes", o.link_max_bytes,
                  "Largest link message (size such as 16MiB; from 4 KiB in powers of 4, at most 1 GiB; above 32 MiB "
                  "each message is freshly mapped memory, so it times page faults)")
      ->capture_default_str();
  cmd->add_flag("--no-runtime-calibration", o.no_runtime_calibration,
                "Skip the cpu's runtime calibration (about a second: the stage runtime trained against the layers' "
                "times). The profile then has no runtime_calibration, and `pd2bw plan` prices the layers' times as "
                "they are, without the runtime's own work, and says so in a note");
  cmd->add_option("--seed", p.seed, "Seed of the weights, tokens and activations")->capture_default_str();
  cmd->add_option("-o,--output", o.output, "Where to write the profile ('-' for stdout)")->capture_default_str();
  cmd->add_flag("-q,--quiet", o.quiet, "Print nothing but errors");
}

}  // namespace

void add_profile_command(CLI::App& app, Runner& run) {
  auto* cmd = app.add_subcommand(
      "profile", "Measure this machine: time the executor's GPT layers per microbatch size (ms) and the "
                 "links (GB/s: between in-process ranks, or under mpirun / srun between the job's processes, "
                 "within a node and across nodes), and write a profile for 'pd2bw plan'");
  cmd->footer("Times are medians in ms; sizes in bytes (flags accept KiB, MiB, GiB); bandwidths in GB/s (1e9 "
              "bytes/s). stash = what a forward keeps for its backward: computed from tensor shapes and "
              "measured as the growth of the backend arena's live bytes.");
  auto o = std::make_shared<ProfileCliOptions>();
  add_options(cmd, *o);
  cmd->callback([o, &run] { run = [o] { run_profile_command(*o); }; });
}

}  // namespace pd2bw::cli

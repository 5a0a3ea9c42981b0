// run_profile: checks the options, measures every distinct layer kind at every microbatch size and the
// in-process links, and assembles the Profile with its provenance.

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <optional>

#include "measure.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/device.hpp"
#include "pd2bw/profiler/profiler.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::profiler {
namespace {

using executor::ModelConfig;
using executor::LayerKind;

// The threads transport keeps a copy per message in flight and per rank; beyond this a run could
// exhaust a small machine's memory.
constexpr int64_t kLinkBytesLimit = int64_t{1} << 30;

void require_positive(int64_t value, const char* flag) {
  if (value <= 0) throw UsageError(fmt::format("{} must be > 0, got {}", flag, value));
}

void validate_device(const ProfileOptions& o) {
  if (o.device != "cpu" && o.device != "cuda")
    throw UsageError(fmt::format("--device must be cpu or cuda, got '{}'", o.device));
  std::string why;
  if (o.device == "cuda" && !executor::backend_available("cuda", &why))
    throw UsageError(why, "profile on a machine with an NVIDIA GPU, or with --device cpu");
  if (o.device == "cpu" && (o.dtype == "bf16" || o.dtype == "fp16"))
    throw UsageError(fmt::format("--dtype {} is not supported on the CPU; the CPU profile measures fp32", o.dtype),
                     "profile with --dtype fp32, or bf16 with --device cuda");
  if (o.dtype != "fp32" && o.dtype != "bf16")
    throw UsageError(fmt::format("--dtype must be fp32 or bf16, got '{}'", o.dtype));
}

void validate_links(const ProfileOptions& o) {
  if (o.link_ranks < 2) throw UsageError(fmt::format("--link-ranks must be >= 2, got {}", o.link_ranks));
  require_positive(o.link_min_bytes, "the smallest link message");
  if (o.link_min_bytes % 4 != 0 || o.link_max_bytes % 4 != 0)
    throw UsageError(fmt::format("link message sizes must be multiples of 4 bytes (floats), got {} and {}",
                                 o.link_min_bytes, o.link_max_bytes));
  if (o.link_max_bytes < o.link_min_bytes)
    throw UsageError(fmt::format("--link-max-bytes {} is below the smallest link message {}",
                                 schemas::format_bytes(o.link_max_bytes), schemas::format_bytes(o.link_min_bytes)));
  if (o.link_max_bytes > kLinkBytesLimit)
    throw UsageError(fmt::format("--link-max-bytes {} is above the limit of {}",
                                 schemas::format_bytes(o.link_max_bytes), schemas::format_bytes(kLinkBytesLimit)),
                     "pd2bw's messages are far smaller; the default is 16 MiB");
}

ModelConfig model_config(const ProfileOptions& o) {
  ModelConfig c = ModelConfig::of(executor::parse_model_family(o.model));
  c.vocab = o.vocab;
  c.seq_len = o.seq_len;
  c.d_model = o.d_model;
  c.heads = o.heads;
  c.blocks = o.blocks;
  c.tie_embeddings = c.tie_embeddings || o.tie_embeddings;
  if (!o.ln.empty()) c.ln = executor::parse_ln_placement(o.ln);
  return c;
}

std::string model_name(const ProfileOptions& o) {
  if (!o.name.empty()) return o.name;
  const ProfileOptions tiny;
  if (o.model == "gpt" && o.blocks == tiny.blocks && o.d_model == tiny.d_model && o.heads == tiny.heads &&
      o.seq_len == tiny.seq_len && o.vocab == tiny.vocab && !o.tie_embeddings)
    return "gpt-tiny";  // the model of schemas/examples/gpt-tiny.profile.json
  return fmt::format("{}-L{}-C{}", o.model, o.blocks, o.d_model);
}

// The GPU the profile ran on, with its copy bandwidths (256 MiB, median of 5).
schemas::DeviceDesc gpu_device() {
  const executor::DeviceInfo info = executor::device_info("cuda");
  const executor::CopyBandwidth copies = executor::measure_copy_bandwidth("cuda", int64_t{256} << 20, 5);
  schemas::DeviceDesc d;
  d.name = info.name;
  d.memory_bytes = info.memory_bytes;
  d.driver_version = info.driver_version;
  d.cuda_version = info.runtime_version;
  d.compute_capability = info.compute_capability;
  d.multiprocessors = info.multiprocessors;
  d.device_copy_gbps = copies.device_to_device_gbps;
  d.host_to_device_gbps = copies.host_to_device_gbps;
  return d;
}

// Calls the caller's progress function with done / total, never going backwards.
class Progress {
 public:
  Progress(const ProgressFn& fn, int64_t total) : fn_(fn), total_(total) {}
  void step(const std::string& what) {
    if (fn_) fn_(static_cast<double>(done_) / static_cast<double>(total_), what);
    ++done_;
  }
  void finish() {
    if (fn_) fn_(1.0, "done");
  }

 private:
  const ProgressFn& fn_;
  int64_t total_;
  int64_t done_ = 0;
};

struct LayerPart {
  std::vector<schemas::LayerProfile> layers;
  std::string notes;
  schemas::RuntimeCalibration runtime;  // cpu only
};

// param_bytes comes from the arena when the layer is measured.
schemas::LayerProfile kind_profile(const ModelConfig& cfg, int64_t layer) {
  schemas::LayerProfile p;
  p.name = executor::layer_name(cfg, layer);
  const LayerKind kind = executor::layer_kind(cfg, layer);
  p.kind = kind == LayerKind::embedding ? "embedding" : kind == LayerKind::block ? "block" : "head";
  int64_t numel = executor::layout_numel(executor::layer_layout(cfg, layer));
  // A tied head keeps its own copy of the token table when it sits apart from the embedding; the
  // format asks for that copy in the head's parameters.
  if (kind == LayerKind::head && cfg.tie_embeddings) numel += cfg.vocab * cfg.d_model;
  p.optimizer_bytes = numel * static_cast<int64_t>(sizeof(float)) * 2;  // AdamW's two fp32 moments
  return p;
}

// Times layers 0 (embedding), 1 (the first block) and the head, then lists every layer.
LayerPart measure_layers(const ProfileOptions& o, const detail::Target& target, const ModelConfig& cfg,
                         Progress& progress) {
  const int64_t distinct[] = {0, 1, cfg.layer_count() - 1};
  std::vector<schemas::LayerProfile> measured;
  std::string notes;
  for (const int64_t layer : distinct) {
    schemas::LayerProfile p = kind_profile(cfg, layer);
    for (const int64_t b : o.microbatches) {
      progress.step(fmt::format("{} b={}", p.kind, b));
      const detail::LayerMeasurement m =
          detail::measure_layer(target, cfg, executor::layer_kind(cfg, layer), b, o.warmup, o.iters, o.seed);
      p.param_bytes = m.param_bytes;
      const auto measured_bytes = static_cast<double>(m.timing.stash_bytes);
      const auto computed_bytes = static_cast<double>(m.timing.stash_bytes_computed);
      if (std::abs(measured_bytes - computed_bytes) > 0.1 * computed_bytes)
        notes += fmt::format(" The {} stash at b={} measured {} bytes in the arena but computes to {} bytes; "
                             "stash_bytes keeps the measured value.",
                             p.kind, b, m.timing.stash_bytes, m.timing.stash_bytes_computed);
      p.per_microbatch.push_back(m.timing);
    }
    progress.step(fmt::format("{} optimizer step", p.kind));
    p.update_ms = detail::measure_update_ms(target, executor::layer_layout(cfg, layer), o.warmup, o.iters);
    measured.push_back(std::move(p));
  }
  LayerPart part;
  part.notes = notes;
  for (int64_t layer = 0; layer < cfg.layer_count(); ++layer) {
    const LayerKind kind = executor::layer_kind(cfg, layer);
    schemas::LayerProfile p = measured[kind == LayerKind::embedding ? 0 : kind == LayerKind::block ? 1 : 2];
    p.name = executor::layer_name(cfg, layer);
    part.layers.push_back(std::move(p));
  }
  return part;
}

// Host buffers between threads on the cpu; device buffers between threads on one GPU with cuda.
schemas::LinkLevel measure_links(const ProfileOptions& o, Progress& progress) {
  schemas::LinkLevel level;
  level.level = "node";
  level.allreduce_ranks = o.link_ranks;
  const bool gpu = o.device == "cuda";
  // Small messages are cheap and noisy, so they get more round trips.
  const auto reps = [&](int64_t bytes) { return bytes < (int64_t{1} << 20) ? 4 * o.iters : o.iters; };
  for (const int64_t bytes : link_message_sizes(o)) {
    progress.step(fmt::format("p2p {}", schemas::format_bytes(bytes)));
    const double ms = gpu ? detail::measure_device_p2p_ms(o.device, bytes, reps(bytes)) : detail::measure_p2p_ms(bytes, reps(bytes));
    level.p2p_curve.push_back({bytes, ms});
  }
  for (const int64_t bytes : link_message_sizes(o)) {
    progress.step(fmt::format("allreduce {}", schemas::format_bytes(bytes)));
    const double ms = gpu ? detail::measure_device_allreduce_ms(o.device, bytes, o.link_ranks, reps(bytes))
                          : detail::measure_allreduce_ms(bytes, o.link_ranks, reps(bytes));
    level.allreduce_curve.push_back({bytes, ms});
  }
  detail::derive_link_scalars(level);
  return level;
}

std::string cuda_notes(const ProfileOptions& o, const schemas::DeviceDesc& d) {
  return fmt::format(
      "Measured by pd2bw profile on the cuda backend ({}, {} SMs, compute capability {}, driver {}, CUDA runtime {}) "
      "in {}. Each distinct layer (embedding, one block, head) was timed once per microbatch size with CUDA events on "
      "the backend's stream: {} warm-up forward+backward pairs, then {} timed forwards, backwards and recomputes, "
      "each forward into a fresh stash as the runtime does; fwd_ms/bwd_ms are medians (with min and p90). All {} "
      "blocks are the same layer, so block.0..block.{} copy the one measured block. stash_bytes and param_bytes are "
      "the growth of the device arena's live bytes; update_ms is the runtime's update (fused AdamW, with bf16 the "
      "master's cast, the gradients zeroed). Links (level node): {} ranks as threads of one process sharing the GPU, "
      "device buffers moved by the threads transport (a device-to-device copy in and one out, ordered by events); "
      "allreduce sums through host memory in rank order. device_copy_gbps: cudaMemcpy device to device of 256 MiB; "
      "host_to_device_gbps: from page-locked memory.",
      d.name, d.multiprocessors, d.compute_capability, d.driver_version, d.cuda_version, o.dtype, o.warmup, o.iters,
      o.blocks, o.blocks - 1, o.link_ranks);
}

std::string method_notes(const ProfileOptions& o) {
  return fmt::format(
      "Measured by pd2bw profile on the CPU backend (Eigen, float, ops single-threaded). Each distinct layer "
      "(embedding, one block, head) was timed once per microbatch size with std::chrono::steady_clock: {} "
      "warm-up forward+backward pairs, then {} timed forwards, backwards and recomputes, each forward into a "
      "fresh stash as the runtime does; fwd_ms/bwd_ms are medians (with min and p90), recompute_ms is the "
      "block's recompute and a second forward for the embedding and head. All {} blocks are the same "
      "layer, so block.0..block.{} copy the one measured block. stash_bytes is the growth of the cpu "
      "backend arena's live bytes across one forward with its stash alive; "
      "stash_bytes_computed is Stash::bytes(). Links (level node): {} ranks as threads of one process, "
      "whose transport copies each message twice; p2p is the median round trip / 2 between two threads, "
      "allreduce the median (slowest rank from a common start) of Comm::allreduce_sum (float) over {} threads (the "
      "first rank gathers, adds in rank order and sends the sum back); busbw = 2(R-1)/R * bytes / time "
      "(nccl-tests) at the largest size.",
      o.warmup, o.iters, o.blocks, o.blocks - 1, o.link_ranks, o.link_ranks);
}

std::string process_link_notes(const ProfileOptions& o, const executor::ProcessGroup& g) {
  return fmt::format(
      " Links: {} processes on {} node(s) under a launcher, over the mpi transport (MPI_Isend of a copy, "
      "MPI_Recv after a probe); level node between the processes of node 0 (p2p: ranks 0 and 1; allreduce: "
      "all of them), level cluster (when the job spans nodes) between the first process of each node. p2p is "
      "the median round trip / 2; allreduce the median (slowest member from a common start) of "
      "Comm::allreduce_sum (float); busbw = 2(R-1)/R * bytes / time at the largest size. --link-ranks does "
      "not apply: R is the level's process count. Message sizes {} to {}.",
      g.size(), g.nodes(), schemas::format_bytes(o.link_min_bytes), schemas::format_bytes(o.link_max_bytes));
}

schemas::Profile assemble(const ProfileOptions& o, LayerPart layers, std::vector<schemas::LinkLevel> links,
                          const std::string& link_notes) {
  const bool gpu = o.device == "cuda";
  schemas::Profile p;
  const ModelConfig cfg = model_config(o);
  p.model = {o.model, model_name(o), o.blocks, o.d_model, o.heads, o.seq_len, o.vocab,
             o.dtype == "bf16" ? schemas::DType::bf16 : schemas::DType::fp32, cfg.tie_embeddings,
             cfg.is_bert() ? std::string(executor::to_string(cfg.ln)) : std::string()};
  p.device.name = "cpu";
  p.device.memory_bytes = executor::device_info("cpu").memory_bytes;
  if (gpu) p.device = gpu_device();
  p.microbatch_sizes = o.microbatches;
  p.layers = std::move(layers.layers);
  p.runtime_calibration = std::move(layers.runtime);
  p.links = std::move(links);
  p.provenance.tool = "pd2bw profile";
  p.provenance.version = std::string(schemas::pd2bw_version());
  p.provenance.git_sha = std::string(schemas::pd2bw_git_sha());
  p.provenance.command_line = o.command_line.empty() ? "pd2bw profile" : o.command_line;
  p.provenance.notes = (gpu ? cuda_notes(o, p.device) : method_notes(o)) + link_notes + layers.notes;
  if (cfg.tie_embeddings)
    p.provenance.notes += " Tied embeddings: the head's param_bytes counts its copy of the token table.";
  return p;
}

executor::DType compute_dtype(const ProfileOptions& o) {
  return o.dtype == "bf16" ? executor::DType::bf16 : executor::DType::f32;
}

// Whether run_profile calibrates the runtime: on the cpu, unless the options turn it off.
bool calibrates(const ProfileOptions& o) { return o.device == "cpu" && o.runtime_calibration; }

int64_t layer_measurements(const ProfileOptions& o) {
  constexpr int64_t kinds = 3;  // embedding, block, head
  const auto sizes = static_cast<int64_t>(o.microbatches.size());
  return kinds * (sizes + 1) + (calibrates(o) ? sizes : 0);  // + the runtime's calibration
}

// On the cpu, the runtime's step against the layers' (runtime_calibration.cpp); the cuda runtime is
// asynchronous and is not calibrated (the planner then uses the layers' times as they are).
void calibrate(const ProfileOptions& o, const ModelConfig& cfg, LayerPart& part, Progress& progress) {
  if (o.device != "cpu") return;
  if (!calibrates(o)) {
    part.notes += " runtime_calibration: not measured (--no-runtime-calibration); the planner prices the layers' "
                  "times as they are.";
    return;
  }
  part.runtime = detail::calibrate_runtime(cfg, part.layers, o.microbatches, o.seed,
                                           [&](const std::string& what) { progress.step(what); });
  part.notes += fmt::format(
      " runtime_calibration: the whole model as one stage (2bw, d = 1, clip 1) trained by the runtime for {} steps "
      "of {} and of {} microbatches at each microbatch size; step_ms holds the median CPU time per step of the rank "
      "thread (which does all of the step's work) after the first. compute_scale = (many - few step) / ({} sum "
      "(fwd_ms + bwd_ms)); update_scale = (few step - {} x that per microbatch, median over the sizes) / sum "
      "update_ms.",
      detail::kCalibrationSteps, detail::kCalibrationFew, detail::kCalibrationMany,
      detail::kCalibrationMany - detail::kCalibrationFew, detail::kCalibrationFew);
  if (part.runtime.split.present())
    part.notes += fmt::format(
        " split: the model cut at layer {} into two stages (2bw, d = 2) trained for {} steps of {} and of {} "
        "microbatches, each stage's rank thread timed on its own; boundary_ms = both stages' time per microbatch "
        "less the whole model's, compute_scales = (a stage's time per microbatch - boundary_ms / 2) / its sum "
        "(fwd_ms + bwd_ms), update_scales likewise per stage.",
        part.runtime.split.layer, detail::kCalibrationSteps, detail::kSplitFew, detail::kSplitMany);
}

}  // namespace

namespace detail {

void derive_link_scalars(schemas::LinkLevel& level) {
  const schemas::LinkPoint& p2p_large = level.p2p_curve.back();
  const schemas::LinkPoint& ar_large = level.allreduce_curve.back();
  const auto r = static_cast<double>(level.allreduce_ranks);
  level.p2p_gbps = static_cast<double>(p2p_large.bytes) / (p2p_large.ms * 1e-3) / 1e9;
  level.p2p_latency_ms = level.p2p_curve.front().ms;
  level.allreduce_busbw_gbps = 2 * (r - 1) / r * static_cast<double>(ar_large.bytes) / (ar_large.ms * 1e-3) / 1e9;
}

}  // namespace detail

void validate_options(const ProfileOptions& o) {
  (void)executor::parse_model_family(o.model);
  if (!o.ln.empty()) {
    (void)executor::parse_ln_placement(o.ln);
    if (o.model != "bert") throw UsageError("--ln is bert's option: a gpt's blocks are pre-LN", "drop --ln, or pass --model bert");
  }
  validate_device(o);
  require_positive(o.blocks, "--blocks");
  require_positive(o.d_model, "--d-model");
  require_positive(o.heads, "--heads");
  require_positive(o.seq_len, "--seq");
  require_positive(o.vocab, "--vocab");
  if (o.d_model % o.heads != 0)
    throw UsageError(fmt::format("--heads {} does not divide --d-model {}", o.heads, o.d_model));
  if (o.vocab > std::numeric_limits<int32_t>::max())
    throw UsageError(fmt::format("--vocab {} does not fit the int32 token ids", o.vocab));
  if (o.microbatches.empty()) throw UsageError("--microbatch needs at least one size");
  for (size_t i = 0; i < o.microbatches.size(); ++i) {
    require_positive(o.microbatches[i], "every --microbatch size");
    if (i > 0 && o.microbatches[i] <= o.microbatches[i - 1])
      throw UsageError(fmt::format("--microbatch sizes must be strictly increasing, got {} after {}",
                                   o.microbatches[i], o.microbatches[i - 1]));
  }
  if (o.warmup < 0) throw UsageError(fmt::format("--warmup must be >= 0, got {}", o.warmup));
  require_positive(o.iters, "--iters");
  validate_links(o);
}

std::vector<int64_t> link_message_sizes(const ProfileOptions& o) {
  std::vector<int64_t> sizes;
  for (int64_t bytes = o.link_min_bytes; bytes <= o.link_max_bytes; bytes *= 4) sizes.push_back(bytes);
  const int64_t last = o.link_max_bytes / 4 * 4;
  if (sizes.empty() || sizes.back() < last) sizes.push_back(last);
  return sizes;
}

schemas::Profile run_profile(const ProfileOptions& o, const ProgressFn& progress_fn) {
  validate_options(o);
  const ModelConfig cfg = model_config(o);
  cfg.validate();
  check_profile_memory(o);  // before anything is allocated
  Progress progress(progress_fn, layer_measurements(o) + 2 * static_cast<int64_t>(link_message_sizes(o).size()));
  const auto backend = executor::make_backend(o.device);
  LayerPart layers = measure_layers(o, {*backend, compute_dtype(o)}, cfg, progress);
  calibrate(o, cfg, layers, progress);
  std::vector<schemas::LinkLevel> links{measure_links(o, progress)};
  progress.finish();
  return assemble(o, std::move(layers), std::move(links), "");
}

std::optional<schemas::Profile> run_profile_in_job(const ProfileOptions& o, const ProgressFn& progress_fn,
                                                   executor::ProcessGroup& group) {
  validate_options(o);
  const ModelConfig cfg = model_config(o);
  cfg.validate();
  check_profile_memory(o);  // before anything is allocated
  const bool root = group.rank() == 0;
  const ProgressFn none;
  Progress progress(root ? progress_fn : none, layer_measurements(o) + detail::process_link_measurements(o, group));
  LayerPart layers;
  if (root) {
    const auto backend = executor::make_backend(o.device);
    layers = measure_layers(o, {*backend, compute_dtype(o)}, cfg, progress);
    calibrate(o, cfg, layers, progress);
  }
  group.barrier();  // the others sleep here while rank 0 has the machine to itself
  auto links = detail::measure_process_links(o, group, [&](const std::string& what) { progress.step(what); });
  if (!root) return std::nullopt;
  if (links.empty())
    throw UsageError("the job has one process, so there is no link between processes to measure",
                     "run pd2bw profile without mpirun to measure the in-process links");
  progress.finish();
  return assemble(o, std::move(layers), std::move(links), process_link_notes(o, group));
}

}  // namespace pd2bw::profiler

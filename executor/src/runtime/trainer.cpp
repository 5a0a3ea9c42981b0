// The training loop behind `pd2bw train`: checks everything first, then runs the plan's ranks as threads
// of this process, each rank's work being train_rank (train_rank.cpp) over its own Comm.
#include "pd2bw/executor/trainer.hpp"

#include <fmt/format.h>

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <optional>
#include <utility>

#include "pd2bw/checked.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/data.hpp"
#include "pd2bw/pipeline/memory.hpp"
#include "pd2bw/schemas/common.hpp"
#include "checkpoint_store.hpp"
#include "train_rank.hpp"

namespace pd2bw::executor {

namespace {

class DataSource final : public MicrobatchSource {
 public:
  DataSource(const TokenData& data, uint64_t seed, int64_t b, int64_t seq) : data_(data), seed_(seed), b_(b), seq_(seq) {}
  void fill(int64_t step, int64_t microbatch, int64_t replica, int32_t* tokens, int32_t* targets) const override {
    data_.sample(seed_, step, microbatch, replica, b_, seq_, tokens, targets);
  }

 private:
  const TokenData& data_;
  uint64_t seed_;
  int64_t b_, seq_;
};

GptConfig model_of(const schemas::Plan& plan) {
  const auto& m = plan.model;
  if (m.kind != "gpt")
    throw UsageError(fmt::format("the plan's model is of kind '{}'; pd2bw train runs kind 'gpt'", m.kind));
  GptConfig c{m.vocab, m.seq_len, m.d_model, m.heads, m.blocks, m.tie_embeddings};
  c.validate();
  return c;
}

void check_options(const TrainOptions& o) {
  if (o.steps < 1) throw UsageError(fmt::format("--steps must be >= 1, got {}", o.steps));
  for (const auto& [value, flag] : {std::pair{o.lr, "--lr"}, {o.min_lr, "--min-lr"}, {o.weight_decay, "--weight-decay"},
                                    {o.clip_norm, "--clip"}})
    if (!std::isfinite(value)) throw UsageError(fmt::format("{} must be a finite number, got {}", flag, value));
  if (!(o.lr > 0)) throw UsageError("--lr must be > 0");
  if (o.min_lr < 0 || o.min_lr > o.lr) throw UsageError("--min-lr must be in [0, --lr]");
  if (o.weight_decay < 0) throw UsageError(fmt::format("--weight-decay must be >= 0, got {}", o.weight_decay));
  if (o.clip_norm < 0) throw UsageError(fmt::format("--clip must be >= 0 (0 turns it off), got {}", o.clip_norm));
  if (o.keep < 1) throw UsageError(fmt::format("--keep must be >= 1, got {}", o.keep));
  if (o.warmup_steps < 0) throw UsageError("--warmup must be >= 0 steps");
  if (o.dtype != "float" && o.dtype != "double" && o.dtype != "bf16")
    throw UsageError(fmt::format("--dtype must be float, double or bf16, got '{}'", o.dtype));
  if (o.checkpoint_every < 0) throw UsageError("--checkpoint-every must be >= 0 steps");
  if (o.stop_after < 0) throw UsageError("--stop-after must be >= 0 steps");
  if ((o.resume || o.checkpoint_every > 0) && o.checkpoint_dir.empty())
    throw UsageError("--resume and --checkpoint-every need --checkpoint-dir");
  // What the checkpoint directory holds, its lock and its free space are rank 0's to check (CheckpointStore).
}

// The CPU backend runs every rank in this process: refuse plans that cannot fit (threads, host memory)
// before allocating anything. Counts the static terms of the memory model (1 or 2 weight versions,
// gradients, optimizer moments; everything in the scalar type, so no master copy) of every stage's replicas.
void check_host_fits(const PipelineConfig& c, DType master) {
  constexpr int64_t kMaxThreads = 256;
  if (c.ranks_total() > kMaxThreads)
    throw UsageError(fmt::format("the plan has {} ranks; the CPU backend runs at most {} as threads of one process",
                                 c.ranks_total(), kMaxThreads),
                     "plan for fewer devices to train on the CPU");
  const int64_t scalar = dtype_bytes(c.compute.value_or(master));
  const pipeline::MemoryFactors f = pipeline::memory_factors(c.schedule, c.optimizer.kind, scalar, dtype_bytes(master));
  const char* what = "the host memory the plan needs";
  int64_t need = 0;
  for (int64_t i = 0; i < c.depth; ++i) {
    int64_t numel = 0;
    for (int64_t l = c.bounds[static_cast<size_t>(i)]; l < c.bounds[static_cast<size_t>(i + 1)]; ++l)
      numel = checked_add(numel, layout_numel(gpt_layer_layout(c.model, l)), what);
    need = checked_add(need, checked_mul(c.width, f.total(checked_mul(numel, scalar, what)), what), what);
  }
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  const int64_t have = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page : 0;
  if (have > 0 && need > have)
    throw UsageError(fmt::format("training a {}-block GPT on the CPU needs at least {} of host memory for weights, gradients "
                                 "and optimizer state; this machine has {}",
                                 c.model.blocks, schemas::format_bytes(need), schemas::format_bytes(have)),
                     "the CPU backend is for small models; plan a smaller model (e.g. "
                     "schemas/examples/gpt-tiny.profile.json)");
}

TokenData load_data(const TrainOptions& o, const GptConfig& model) {
  TokenData data = o.data_path.empty() ? TokenData::builtin() : TokenData::open(o.data_path);
  if (data.max_token() >= model.vocab)
    throw UsageError(fmt::format("{} has token ids up to {}, but the model's vocabulary is {}", data.label(),
                                 data.max_token(), model.vocab),
                     "plan with a profile whose vocab covers the data (byte-level text needs 256)");
  if (data.size() < model.seq_len + 2)
    throw UsageError(fmt::format("{} has {} tokens; a sequence needs {}", data.label(), data.size(), model.seq_len + 2));
  return data;
}

template <typename T>
TrainResult run(const schemas::Plan& plan, const std::string& sha, const TrainOptions& o, std::FILE* out) {
  check_options(o);
  const GptConfig model = model_of(plan);
  TrainSetup setup;
  PipelineConfig& config = setup.config;
  config = pipeline_from_plan(plan, model);
  config.seed = o.seed;
  config.optimizer.kind = plan.optimizer;
  config.optimizer.lr = {o.lr, o.min_lr, std::min(o.warmup_steps, o.steps), o.steps};
  config.optimizer.lr.validate();
  config.optimizer.adamw.weight_decay = o.weight_decay;
  config.optimizer.sgd.weight_decay = o.weight_decay;
  config.optimizer.clip_norm = o.clip_norm;
  config.optimizer.skip_nonfinite = o.skip_nonfinite;
  if (o.dtype == "bf16") config.compute = DType::bf16;
  config.validate();
  check_host_fits(config, dtype_of<T>());
  const TokenData data = load_data(o, model);
  setup.id = {sha, plan.profile_sha256, std::string(schemas::to_string(plan.schedule)), o.dtype,
              data.label(), plan.depth, plan.width, o.seed};
  setup.options = o;
  const DataSource source(data, o.seed, config.microbatch_size, config.seq);
  setup.source = &source;
  setup.tokens_per_step = checked_mul(plan.global_batch, config.seq, "the tokens per step");
  setup.progress = o.quiet ? nullptr : out;
  if (!o.checkpoint_dir.empty()) setup.checkpoint_bytes = checkpoint_bytes(config, static_cast<int64_t>(sizeof(T)));
  // The ranks are threads of this process; each runs train_rank with its own Comm, as a process would.
  const auto comms = make_threads_comms(config.ranks_total());
  std::optional<TrainResult> result;
  run_on_threads(comms, [&](Comm& comm) {
    auto r = train_rank<T>(comm, setup);
    if (comm.rank() == 0) result = std::move(r);
  });
  if (!result) throw Error("rank 0 ended without a result");
  return std::move(*result);
}

}  // namespace

std::string resolve_train_dtype(const schemas::Plan& plan, const std::string& requested, std::string* note) {
  const schemas::DType planned = plan.model.dtype;
  const std::string from_plan = planned == schemas::DType::bf16 ? "bf16" : planned == schemas::DType::fp32 ? "float" : "";
  std::string chosen = requested;
  std::string why;
  if (requested.empty()) {
    if (from_plan.empty())
      throw UsageError(fmt::format("the plan's model computes in {}, which pd2bw train does not run",
                                   schemas::to_string(planned)),
                       "pass --dtype float, double or bf16");
    chosen = from_plan;
    if (chosen == "bf16")
      why = "the plan's model computes in bf16, so training runs in bf16 (fp32 master weights, gradients and "
            "moments); pass --dtype float to train in fp32";
  } else if (requested != from_plan) {
    why = fmt::format("the plan was made for {} but --dtype is {}; its memory predictions assume {}",
                      schemas::to_string(planned), requested, schemas::to_string(planned));
  }
  if (chosen != "float" && chosen != "double" && chosen != "bf16")
    throw UsageError(fmt::format("--dtype must be float, double or bf16, got '{}'", chosen));
  if (note) *note = why;
  return chosen;
}

TrainResult train(const schemas::Plan& plan, const std::string& plan_sha256, const TrainOptions& options,
                  std::FILE* progress) {
  TrainOptions o = options;
  o.dtype = resolve_train_dtype(plan, options.dtype, nullptr);
  if (o.dtype == "double") return run<double>(plan, plan_sha256, o, progress);
  return run<float>(plan, plan_sha256, o, progress);
}

}  // namespace pd2bw::executor

// The training loop behind `pd2bw train`: checks everything first, then runs the plan's ranks, either as
// threads of this process (on the cpu, or all on the current GPU) or as this process's one rank of a
// multi-process job; each rank's work is train_rank (train_rank.cpp) over its own Comm. The checks that
// need no data or device are in train_checks.cpp.
#include "pd2bw/executor/trainer.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <utility>

#include "pd2bw/checked.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/data.hpp"
#include "pd2bw/executor/data_mlm.hpp"
#include "pd2bw/executor/device.hpp"
#include "pd2bw/executor/process_group.hpp"
#include "pd2bw/pipeline/memory.hpp"
#include "pd2bw/pipeline/schedule.hpp"
#include "pd2bw/schemas/common.hpp"
#include "checkpoint_store.hpp"
#include "train_checks.hpp"
#include "train_fits.hpp"
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

// A bert model's masked-LM batches (data_mlm.hpp): fill() samples the whole microbatch and keeps tokens
// and targets; fill_segments() derives the types and lengths from the rows' layouts alone.
class MlmSource final : public MicrobatchSource {
 public:
  MlmSource(const TokenData& data, MlmOptions options, uint64_t seed, int64_t b, int64_t seq)
      : sampler_(data, options), seed_(seed), b_(b), seq_(seq) {}
  const MlmSampler& sampler() const { return sampler_; }
  void fill(int64_t step, int64_t microbatch, int64_t replica, int32_t* tokens, int32_t* targets) const override {
    std::vector<int32_t> types(static_cast<size_t>(b_ * seq_)), lengths(static_cast<size_t>(b_));
    sampler_.sample(seed_, step, microbatch, replica, b_, seq_, tokens, types.data(), lengths.data(), targets);
  }
  bool fill_segments(int64_t step, int64_t microbatch, int64_t replica, int32_t* types, int32_t* lengths) const override {
    sampler_.segments(seed_, step, microbatch, replica, b_, seq_, types, lengths);
    return true;
  }
  // The masked positions the loss of `step` counts, over every microbatch and replica.
  int64_t counted(int64_t step, int64_t microbatches, int64_t width) const {
    int64_t total = 0;
    for (int64_t r = 0; r < width; ++r)
      for (int64_t k = 0; k < microbatches; ++k) total += sampler_.predicted(seed_, step, k, r, b_, seq_);
    return total;
  }

 private:
  MlmSampler sampler_;
  uint64_t seed_;
  int64_t b_, seq_;
};

// The device's dense peak in the compute dtype, or 0 (the cpu, or a GPU missing from the table).
double peak_flops_of(const DeviceInfo& d, const std::string& dtype) {
  if (d.backend != "cuda") return 0;
  return (dtype == "bf16" ? d.peak_bf16_tflops : d.peak_fp32_tflops) * 1e12;
}

// The ranks whose processes share this process's node.
std::vector<int64_t> ranks_on_node(const ProcessGroup& g) {
  std::vector<int64_t> here;
  const auto node_of = g.node_of_ranks();
  for (size_t r = 0; r < node_of.size(); ++r)
    if (node_of[r] == g.node()) here.push_back(static_cast<int64_t>(r));
  return here;
}

TokenData load_data(const TrainOptions& o, const ModelConfig& model) {
  TokenData data = o.data_path.empty() ? TokenData::builtin() : TokenData::open(o.data_path);
  if (model.is_bert() && data.vocab() + kMlmSpecialTokens > model.vocab)
    throw UsageError(fmt::format("{} has a vocabulary of {}, and masked-LM adds {} special tokens ([PAD], [CLS], [SEP], "
                                 "[MASK]) after it: the bert model's vocabulary is {}, not the {} that needs",
                                 data.label(), data.vocab(), kMlmSpecialTokens, model.vocab,
                                 data.vocab() + kMlmSpecialTokens),
                     "profile the bert model with --vocab of at least that (pd2bw profile --model bert --vocab N)");
  if (data.max_token() >= model.vocab)
    throw UsageError(fmt::format("{} has token ids up to {}, but the model's vocabulary is {}", data.label(),
                                 data.max_token(), model.vocab),
                     "plan with a profile whose vocab covers the data (byte-level text needs 256)");
  if (data.size() < model.seq_len + 2)
    throw UsageError(fmt::format("{} has {} tokens; a sequence needs {}", data.label(), data.size(), model.seq_len + 2));
  return data;
}

// Everything a rank needs, checked; the data outlives the ranks that read it.
struct Prepared {
  TokenData data;
  std::unique_ptr<MicrobatchSource> source;
  TrainSetup setup;
  DeviceInfo device;

  // The device and the MFU in rank 0's result.
  void describe(TrainResult& r) const {
    r.device = device.name;
    r.device_memory_bytes = device.backend == "cuda" ? device.memory_bytes : 0;
    r.model_flops_per_token = setup.flops_per_token;
    r.peak_flops = setup.peak_flops;
    r.mfu = setup.peak_flops > 0 ? setup.flops_per_token * r.tokens_per_s / setup.peak_flops : 0.0;
  }
};

// `here`: the ranks whose workers share this process's memory (the cpu: the machine's, every rank when
// they are threads; cuda: one GPU's). The data is checked before the device, so that a plan for a GPU
// with data that does not fit its model says so on any machine.
template <typename T>
std::unique_ptr<Prepared> prepare(const schemas::Plan& plan, const std::string& sha, const TrainOptions& o, std::FILE* out,
                                  const std::vector<int64_t>& here) {
  check_options(o);
  const ModelConfig model = model_of(plan);
  PipelineConfig config = pipeline_from_plan(plan, model);
  config.seed = o.seed;
  config.optimizer.kind = plan.optimizer;
  config.optimizer.lr = {o.lr, o.min_lr, std::min(o.warmup_steps, o.steps), o.steps};
  config.optimizer.lr.validate();
  config.optimizer.adamw.weight_decay = o.weight_decay;
  config.optimizer.sgd.weight_decay = o.weight_decay;
  config.optimizer.clip_norm = o.clip_norm;
  config.optimizer.skip_nonfinite = o.skip_nonfinite;
  if (o.dtype == "bf16") config.compute = DType::bf16;
  config.backend = o.device;
  config.validate();
  auto p = std::make_unique<Prepared>(Prepared{load_data(o, model), nullptr, {}, {}});
  std::string why;
  if (!backend_available(o.device, &why))
    throw UsageError(why, "train with --device cpu, or run on a machine with an NVIDIA GPU");
  if (o.device == "cuda" && o.dtype == "double")
    throw UsageError("the cuda backend computes in float or bf16, not double", "pass --dtype float or --dtype bf16");
  check_fits(config, dtype_of<T>(), here);
  p->device = device_info(o.device);
  TrainSetup& setup = p->setup;
  setup.config = std::move(config);
  setup.id = {sha, plan.profile_sha256, std::string(schemas::to_string(plan.schedule)), o.dtype,
              p->data.label(), std::string(to_string(model.family)), plan.depth, plan.width, o.seed};
  setup.options = o;
  if (model.is_bert()) {
    auto mlm = std::make_unique<MlmSource>(p->data, MlmOptions{o.mask_rate}, o.seed, setup.config.microbatch_size,
                                           setup.config.seq);
    const MlmSource* m = mlm.get();
    const int64_t microbatches = setup.config.microbatches, width = setup.config.width;
    setup.counted_per_step = [m, microbatches, width](int64_t step) { return m->counted(step, microbatches, width); };
    p->source = std::move(mlm);
  } else {
    p->source = std::make_unique<DataSource>(p->data, o.seed, setup.config.microbatch_size, setup.config.seq);
  }
  setup.source = p->source.get();
  setup.tokens_per_step = checked_mul(plan.global_batch, setup.config.seq, "the tokens per step");
  setup.progress = o.quiet ? nullptr : out;
  if (!o.checkpoint_dir.empty())
    setup.checkpoint_bytes = checkpoint_bytes(setup.config, static_cast<int64_t>(sizeof(T)));
  setup.flops_per_token = model_flops_per_token(plan);
  setup.peak_flops = peak_flops_of(p->device, o.dtype);
  return p;
}

// The ranks are threads of this process; each runs train_rank with its own Comm, as a process would.
template <typename T>
TrainResult run_threads(const schemas::Plan& plan, const std::string& sha, const TrainOptions& o, std::FILE* out) {
  std::vector<int64_t> all(static_cast<size_t>(plan.depth * plan.width));
  for (size_t r = 0; r < all.size(); ++r) all[r] = static_cast<int64_t>(r);
  constexpr size_t kMaxThreads = 256;
  if (all.size() > kMaxThreads)
    throw UsageError(fmt::format("the plan has {} ranks; pd2bw train runs at most {} as threads of one process",
                                 all.size(), kMaxThreads),
                     "plan for fewer devices, or run one process per rank under mpirun");
  const auto p = prepare<T>(plan, sha, o, out, all);
  const auto comms = make_threads_comms(p->setup.config.ranks_total());
  std::optional<TrainResult> result;
  run_on_threads(comms, [&](Comm& comm) {
    auto r = train_rank<T>(comm, p->setup);
    if (comm.rank() == 0) result = std::move(r);
  });
  if (!result) throw Error("rank 0 ended without a result");
  p->describe(*result);
  return std::move(*result);
}

// This process is one rank of a multi-process job. Every process checks its inputs, then all agree
// before any starts, so that a check failing on one process (a file missing on its node) stops all.
template <typename T>
TrainResult run_process(const schemas::Plan& plan, const std::string& sha, const TrainOptions& o, std::FILE* out,
                        ProcessGroup& group) {
  std::unique_ptr<Prepared> p;
  std::optional<Error> failed;
  try {
    check_process_layout(plan, group);
    // One GPU per process with cuda (the rank's local device); the node's memory on the cpu.
    if (o.device == "cuda") select_device("cuda", plan.ranks[static_cast<size_t>(group.rank())].local_device);
    p = prepare<T>(plan, sha, o, out, o.device == "cuda" ? std::vector<int64_t>{group.rank()} : ranks_on_node(group));
  } catch (const Error& e) {
    failed = e;
  } catch (const std::exception& e) {
    failed = Error(e.what());
  }
  if (!group.all_agree(!failed)) {
    if (failed) throw *failed;
    throw UsageError("another process of the job failed its checks before training", "its message says why");
  }
  const auto& rank = plan.ranks[static_cast<size_t>(group.rank())];
  std::optional<TrainResult> result;
  std::unique_ptr<Comm> comm;
  // A rank that fails on its own (a lost peer's connection, a full disk) says where to resume from too.
  const auto noted = [&comm](const std::string& what) {
    const std::string note = comm ? comm->stop_note() : std::string();
    return note.empty() ? what : fmt::format("{}; {}", what, note);
  };
  try {
    comm = group.make_comm(o.transport, rank.local_device);
    result = train_rank<T>(*comm, p->setup);
  } catch (const JobStopped&) {
    throw;  // rank 0 has told every rank to stop
  } catch (const Error& e) {
    throw RankFailure(noted(e.what()), e.hint(), e.code());
  } catch (const std::exception& e) {
    throw RankFailure(noted(fmt::format("internal error: {}", e.what())));
  }
  if (result) {
    p->describe(*result);
    return std::move(*result);
  }
  TrainResult none;
  none.has_results = false;
  return none;
}

template <typename T>
TrainResult run(const schemas::Plan& plan, const std::string& sha, const TrainOptions& o, std::FILE* out,
                ProcessGroup* group) {
  if (o.transport == "threads") return run_threads<T>(plan, sha, o, out);
  if (group == nullptr)
    throw UsageError(fmt::format("--transport {} runs one process per rank; start them with mpirun or srun", o.transport));
  return run_process<T>(plan, sha, o, out, *group);
}

}  // namespace

TrainResult train(const schemas::Plan& plan, const std::string& plan_sha256, const TrainOptions& options,
                  std::FILE* progress, ProcessGroup* processes) {
  TrainOptions o = options;
  o.dtype = resolve_train_dtype(plan, options.dtype, nullptr);
  o.device = resolve_train_device(plan, options.device);
  if (o.dtype == "double") return run<double>(plan, plan_sha256, o, progress, processes);
  return run<float>(plan, plan_sha256, o, progress, processes);
}

}  // namespace pd2bw::executor

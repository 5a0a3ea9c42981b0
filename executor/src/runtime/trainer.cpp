// The training loop behind `pd2bw train`: checks everything first, then runs the plan's ranks, either as
// threads of this process (on the cpu, or all on the current GPU) or as this process's one rank of a
// multi-process job; each rank's work is train_rank (train_rank.cpp) over its own Comm.
#include "pd2bw/executor/trainer.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
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

ModelConfig model_of(const schemas::Plan& plan) {
  const auto& m = plan.model;
  if (m.kind != "gpt" && m.kind != "bert")
    throw UsageError(fmt::format("the plan's model is of kind '{}'; pd2bw train runs kinds 'gpt' and 'bert'",
                                 m.kind.substr(0, 40)),
                     "plan with a profile of a gpt or bert model (pd2bw profile --model gpt|bert)");
  ModelConfig c = ModelConfig::of(parse_model_family(m.kind));
  c.vocab = m.vocab;
  c.seq_len = m.seq_len;
  c.d_model = m.d_model;
  c.heads = m.heads;
  c.blocks = m.blocks;
  if (c.is_bert() && !m.tie_embeddings)
    throw UsageError("the plan's bert model is not tied (/model/tie_embeddings), but a bert decoder is the word table",
                     "profile the bert model with pd2bw profile --model bert");
  c.tie_embeddings = m.tie_embeddings;
  if (!m.ln.empty()) c.ln = parse_ln_placement(m.ln);
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
  if (!(o.mask_rate > 0 && o.mask_rate < 1))
    throw UsageError(fmt::format("--mask-rate must be in (0, 1), got {}", o.mask_rate),
                     "BERT predicts 15% of the tokens: --mask-rate 0.15");
  if (o.keep < 1) throw UsageError(fmt::format("--keep must be >= 1, got {}", o.keep));
  // Heartbeats come every tenth of the timeout, but at least 50 ms apart: below a second, a busy machine
  // would take healthy ranks for lost ones.
  if (!std::isfinite(o.peer_timeout_s) || !(o.peer_timeout_s == 0 || o.peer_timeout_s >= 1))
    throw UsageError(fmt::format("--peer-timeout must be 0 (wait forever) or a finite number of seconds >= 1, got {}",
                                 o.peer_timeout_s));
  if (o.warmup_steps < 0) throw UsageError("--warmup must be >= 0 steps");
  if (o.dtype != "float" && o.dtype != "double" && o.dtype != "bf16")
    throw UsageError(fmt::format("--dtype must be float, double or bf16, got '{}'", o.dtype));
  if (o.checkpoint_every < 0) throw UsageError("--checkpoint-every must be >= 0 steps");
  if (o.stop_after < 0) throw UsageError("--stop-after must be >= 0 steps");
  if ((o.resume || o.checkpoint_every > 0) && o.checkpoint_dir.empty())
    throw UsageError("--resume and --checkpoint-every need --checkpoint-dir");
  // What the checkpoint directory holds, its lock and its free space are rank 0's to check (CheckpointStore).
}

// The device's dense peak in the compute dtype, or 0 (the cpu, or a GPU missing from the table).
double peak_flops_of(const DeviceInfo& d, const std::string& dtype) {
  if (d.backend != "cuda") return 0;
  return (dtype == "bf16" ? d.peak_bf16_tflops : d.peak_fp32_tflops) * 1e12;
}

// Ranks per node as "4" or "2, 2, 1" (by node).
std::string per_node_text(const std::map<int64_t, int64_t>& counts) {
  std::vector<int64_t> n;
  for (const auto& [node, count] : counts) n.push_back(count);
  const bool same = std::all_of(n.begin(), n.end(), [&](int64_t x) { return x == n.front(); });
  return same ? fmt::format("{} rank(s) on each of {} node(s)", n.front(), n.size())
              : fmt::format("{} rank(s) on nodes 0..{}", fmt::join(n, ", "), n.size() - 1);
}

// The node of each plan rank.
std::vector<int64_t> plan_to_groups(const schemas::Plan& plan) {
  std::vector<int64_t> node;
  for (const auto& r : plan.ranks) node.push_back(r.node);
  return node;
}

// Ranks grouped by node, as "{0, 1} {2, 3}" (groups in order of their first rank).
std::string groups_text(const std::vector<int64_t>& node_of_rank) {
  std::map<int64_t, std::vector<int64_t>> by_node;
  std::vector<int64_t> order;
  for (size_t r = 0; r < node_of_rank.size(); ++r) {
    auto& g = by_node[node_of_rank[r]];
    if (g.empty()) order.push_back(node_of_rank[r]);
    g.push_back(static_cast<int64_t>(r));
  }
  std::string out;
  for (const int64_t n : order) out += fmt::format("{}{{{}}}", out.empty() ? "" : " ", fmt::join(by_node[n], ", "));
  return out;
}

}  // namespace

void check_process_layout(const schemas::Plan& plan, const ProcessGroup& g) {
  const int64_t ranks = plan.depth * plan.width;
  if (g.size() != ranks)
    throw UsageError(fmt::format("the plan has {} ranks ({} stages x {} replicas), but this job has {} process(es)", ranks,
                                 plan.depth, plan.width, g.size()),
                     fmt::format("start one process per rank: mpirun -np {0} pd2bw train ... (or srun -n {0})", ranks));
  const std::vector<int64_t> job_node = g.node_of_ranks();
  std::map<int64_t, int64_t> plan_to_job, job_to_plan, plan_count, job_count;
  bool same = true;
  for (int64_t r = 0; r < ranks; ++r) {
    const int64_t pn = plan.ranks[static_cast<size_t>(r)].node, jn = job_node[static_cast<size_t>(r)];
    same = same && plan_to_job.emplace(pn, jn).first->second == jn && job_to_plan.emplace(jn, pn).first->second == pn;
    ++plan_count[pn];
    ++job_count[jn];
  }
  if (!same && plan_count.size() == job_count.size() &&
      std::equal(plan_count.begin(), plan_count.end(), job_count.begin(),
                 [](const auto& a, const auto& b) { return a.second == b.second; }))
    throw UsageError(fmt::format("the plan puts {} with ranks {} together, but this job groups ranks {} on its nodes",
                                 per_node_text(plan_count), groups_text(plan_to_groups(plan)), groups_text(job_node)),
                     "place consecutive ranks on one node (mpirun --map-by ppr:N:node, srun --distribution=block)");
  if (!same)
    throw UsageError(fmt::format("the plan puts {}, but this job runs {}", per_node_text(plan_count), per_node_text(job_count)),
                     "start as many processes on each node as the plan puts ranks there (e.g. mpirun --map-by "
                     "ppr:N:node), or plan for the nodes you have (pd2bw plan --nodes, --gpus-per-node)");
}

namespace {

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
  try {
    const auto comm = group.make_comm(o.transport, rank.local_device);
    result = train_rank<T>(*comm, p->setup);
  } catch (const JobStopped&) {
    throw;  // rank 0 has told every rank to stop
  } catch (const Error& e) {
    throw RankFailure(e.what(), e.hint(), e.code());
  } catch (const std::exception& e) {
    throw RankFailure(fmt::format("internal error: {}", e.what()));
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

double model_flops_per_token(const schemas::Plan& plan) {
  const ModelConfig model = model_of(plan);
  int64_t params = 0;
  for (int64_t l = 0; l < model.layer_count(); ++l) params += layout_numel(layer_layout(model, l));
  return 6.0 * static_cast<double>(params) +
         12.0 * static_cast<double>(model.blocks) * static_cast<double>(model.d_model) * static_cast<double>(model.seq_len);
}

std::string resolve_train_device(const schemas::Plan& plan, const std::string& requested) {
  const std::string chosen = !requested.empty() ? requested : plan.cluster.device.name == "cpu" ? "cpu" : "cuda";
  if (chosen != "cpu" && chosen != "cuda")
    throw UsageError(fmt::format("--device must be cpu or cuda, got '{}'", chosen));
  return chosen;
}

TrainResult train(const schemas::Plan& plan, const std::string& plan_sha256, const TrainOptions& options,
                  std::FILE* progress, ProcessGroup* processes) {
  TrainOptions o = options;
  o.dtype = resolve_train_dtype(plan, options.dtype, nullptr);
  o.device = resolve_train_device(plan, options.device);
  if (o.dtype == "double") return run<double>(plan, plan_sha256, o, progress, processes);
  return run<float>(plan, plan_sha256, o, progress, processes);
}

}  // namespace pd2bw::executor

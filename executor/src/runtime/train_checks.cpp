// The checks of `pd2bw train` that need no data or device: the plan's model, the options, the
// job's process layout against the plan's rank table; and the dtype, device and FLOPs the plan implies.
#include "train_checks.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/process_group.hpp"
#include "pd2bw/schemas/common.hpp"

namespace pd2bw::executor {

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

namespace {

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

}  // namespace pd2bw::executor

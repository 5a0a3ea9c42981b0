// `pd2bw train`'s engine: runs a plan's ranks (as threads of this process, or one rank per process of a
// multi-process job) on the cpu or the cuda backend (threads: every stage on the one current GPU), feeds
// them the data, reports progress and metrics per step, and writes and resumes checkpoints.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "pd2bw/error.hpp"
#include "pd2bw/schemas/plan.hpp"

namespace pd2bw::executor {

class ProcessGroup;

struct TrainOptions {
  std::string data_path;       // empty: the built-in corpus; else an llm.c token file or any text file
  int64_t steps = 60;          // optimizer steps in all (a resumed run continues up to this count)
  double lr = 3e-3;            // peak learning rate
  double min_lr = 3e-4;        // cosine decay floor
  int64_t warmup_steps = 5;
  double weight_decay = 0.0;   // AdamW decoupled / SGD L2, on weight matrices only
  double clip_norm = 1.0;      // global gradient-norm clipping (<= 0: off)
  uint64_t seed = 1234;        // weight initialisation and data order
  std::string dtype;            // compute dtype: "float", "double" or "bf16" (fp32 master weights,
                               // gradients and moments); empty: the plan's (resolve_train_dtype)
  std::string log_path;        // JSONL metrics, one record per step ("" = none)
  std::string checkpoint_dir;  // where checkpoints go ("" = none): step-NNNNNN/ directories, `latest`, `.lock`
  int64_t checkpoint_every = 0;  // steps between checkpoints (0: only at the end when a dir is given)
  int64_t keep = 2;            // complete checkpoints kept after each save (newest first), >= 1
  bool resume = false;         // continue from the newest complete checkpoint in checkpoint_dir
  bool skip_nonfinite = false;  // skip a step whose loss or gradient is not finite instead of stopping
                                // (OptimizerOptions::skip_nonfinite says exactly what a skip does)
  bool divergence_guard = true;  // stop (Error, no checkpoint of that step) when a step's loss exceeds
                                 // kDivergenceFactor x the first step's loss of this run
  int64_t stop_after = 0;      // run at most this many steps now, then stop (0: run to `steps`); the
                               // learning-rate schedule still spans `steps`, so a later --resume continues
                               // exactly as one uninterrupted run
  bool quiet = false;          // no progress lines
  std::string transport = "threads";  // "threads": every rank a thread of this process; "mpi" or "nccl":
                                      // this process is one rank of a ProcessGroup (process_group.hpp)
  std::string device;                 // backend: "cpu" or "cuda"; empty: the plan's (resolve_train_device)
  double mask_rate = 0.15;            // bert: share of each row's tokens the masked-LM loss predicts, in (0, 1)
  double peer_timeout_s = 30;         // one process per rank: a rank silent this long (lost or stalled) ends
                                      // the job with a message naming it; 0: wait forever, else >= 1
};

// The divergence guard's bound: a step whose mean loss exceeds this many times the first step's (of this
// run; the first resumed step on --resume) stops training. Cross-entropy starts near log(vocab) and a
// training run that works never comes near it; SGD with a huge learning rate does within a few steps.
inline constexpr double kDivergenceFactor = 1e3;

struct TrainResult {
  std::vector<double> losses;         // mean loss of each step run now (from the first step run)
  int64_t first_step = 0;             // steps already done before this run (resume)
  double seconds = 0;                 // wall time of the steps run
  double tokens_per_s = 0;
  // Per stage, i.e. pipeline position (d entries; a rank holding several model chunks reports them together),
  // from replica 0:
  std::vector<int64_t> peak_bytes;    // largest memory the rank's runtime held
  std::vector<int64_t> versions;      // weight buffers ever allocated (the most of any of its chunks)
  std::vector<double> compute_ms;     // thread CPU ms of forward (+ recompute) + backward per microbatch
                                      // (through all of the rank's chunks)
  std::vector<double> step_ms;        // wall time of each step after the first of this run (update to update)
  double step_ms_median = 0;          // median of step_ms (0 when fewer than two steps ran)
  std::vector<int64_t> skipped_steps; // steps skipped for a non-finite loss or gradient (1-based)
  std::string device;                 // "cpu" or the GPU's name
  int64_t device_memory_bytes = 0;    // the GPU's memory (0 on the cpu)
  double model_flops_per_token = 0;   // 6 x parameters + 12 x layers x d_model x sequence
  double peak_flops = 0;              // the device's dense peak FLOP/s in the compute dtype (0: unknown, cpu)
  double mfu = 0;                     // model_flops_per_token x tokens_per_s / peak_flops (0 without a peak)
  bool has_results = true;            // false on the processes but rank 0's of a multi-process job: the
                                      // fields above are then empty (rank 0 gathers and reports them)
};

// Thrown by train() on a process of a multi-process job that failed on its own after training began. The other processes cannot know and would wait for it forever, so the
// caller reports it and ends the whole job (ProcessGroup::abort with code()).
class RankFailure : public Error {
 public:
  using Error::Error;
};

// The compute dtype `pd2bw train` uses: `requested` when given ("float", "double", "bf16"), else the
// plan's model dtype (fp32 -> "float", bf16 -> "bf16"). *note (when not null) receives a sentence for
// the user when the plan's dtype was taken or overridden, and stays empty otherwise. Throws UsageError
// for an unknown name, or for an fp16 plan without an explicit --dtype.
std::string resolve_train_dtype(const schemas::Plan& plan, const std::string& requested, std::string* note);

// Model FLOPs of one token's forward and backward (the convention of the PyTorch and llm.c numbers
// pd2bw is compared with): 6 x parameters (a tied table once) + 12 x blocks x d_model x seq.
double model_flops_per_token(const schemas::Plan& plan);

// The backend `pd2bw train` runs on: `requested` ("cpu" or "cuda") when given, else the device the plan
// was made for: "cpu" when its device is named "cpu", "cuda" for any other (a GPU's name). Throws
// UsageError for another name.
std::string resolve_train_device(const schemas::Plan& plan, const std::string& requested);

// Checks that the job of `processes` can run `plan`: one process per rank, and two ranks on one node of
// the plan exactly when their processes share a host. Throws UsageError naming both counts otherwise.
// (train() checks this too; a caller may check before it prints anything.)
void check_process_layout(const schemas::Plan& plan, const ProcessGroup& processes);

// Trains the model the plan describes (plan.model; layers = blocks + 2) with the plan's schedule, split,
// recompute flags, microbatches and rank table, on options.device (resolve_train_device); a cuda run
// without a usable device, or whose stages' weights, gradients and optimizer state cannot fit the GPU
// they share, is refused with UsageError before anything starts. `plan_sha256` identifies the plan in
// checkpoints.
// Progress lines go to `progress` (unless quiet; in a multi-process job rank 0 alone prints, logs and
// reports). With options.transport "mpi" or "nccl", this process runs rank processes->rank() of the
// plan: the job must have one process per rank, laid on nodes as the plan's rank table says; every
// process checks its inputs and all agree before the first step. Throws UsageError / SchemaError for
// bad options, data that does not fit the model, a job that does not match the plan, or a checkpoint
// that does not belong to this plan (all checked before the first step; nothing is overwritten then);
// Error when training fails (e.g. the loss diverges); RankFailure as described above.
TrainResult train(const schemas::Plan& plan, const std::string& plan_sha256, const TrainOptions& options,
                  std::FILE* progress, ProcessGroup* processes = nullptr);

}  // namespace pd2bw::executor

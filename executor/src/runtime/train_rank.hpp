// One rank's share of `pd2bw train` (private to the trainer): it builds its own stage, runs the steps,
// reports losses, timings and memory to rank 0 over its Comm, and saves or loads its own checkpoint
// shard. Rank 0 alone prints progress, writes the metrics log and the checkpoint manifest, and fills
// the TrainResult. Nothing here touches another rank's objects, so the ranks can be threads of one
// process (train() today) or one process each (an MPI launcher calls train_rank with its own Comm).
#pragma once

#include <functional>

#include <cstdio>
#include <optional>

#include "pd2bw/executor/comm.hpp"
#include "pd2bw/executor/pipeline.hpp"
#include "pd2bw/executor/trainer.hpp"
#include "train_checkpoint.hpp"

namespace pd2bw::executor {

// What every rank needs, already checked (train() checks options, plan, data and host memory first).
struct TrainSetup {
  PipelineConfig config;
  CheckpointIdentity id;
  TrainOptions options;
  const MicrobatchSource* source = nullptr;  // not owned; pure, shared by the ranks
  int64_t tokens_per_step = 0;               // global batch x sequence length
  int64_t checkpoint_bytes = 0;              // about what one checkpoint takes (free-space check)
  std::FILE* progress = nullptr;             // rank 0's progress lines (null: none)
  double flops_per_token = 0;                // model FLOPs of one token's forward and backward
  double peak_flops = 0;                     // the device's peak FLOP/s for MFU (0: no MFU, e.g. the cpu)
  // bert: the masked positions the loss of a step counts (for the progress line and the log); empty for gpt.
  std::function<int64_t(int64_t step)> counted_per_step;
};

// One rank's metrics as sent to rank 0 after each segment of steps.
struct RankMetrics {
  int64_t stage = 0, replica = 0;
  int64_t peak_bytes = 0;     // largest memory the worker held
  int64_t versions = 0;       // weight buffers ever allocated
  double compute_ms = 0;      // thread CPU ms of forward (+ recompute) + backward per microbatch
};

// Thrown by rank 0 alone when it stops the job for a reason it found (a checkpoint directory that is
// locked, full or does not match, a save that failed) after telling every other rank to stop: unlike a
// failure of one rank, nobody waits.
class JobStopped : public Error {
 public:
  explicit JobStopped(const Error& why) : Error(why.what(), why.hint(), why.code()) {}
};

// Runs rank comm.rank() of the job to the end (or --stop-after). Returns the result on rank 0 and
// nullopt elsewhere, also when rank 0 stopped the job (rank 0 then throws the reason). Throws like
// train(); a failure on this rank leaves aborting the others to the launcher (run_on_threads).
template <typename T>
std::optional<TrainResult> train_rank(Comm& comm, const TrainSetup& setup);

}  // namespace pd2bw::executor

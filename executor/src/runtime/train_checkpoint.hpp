// Saving a job's state as one safetensors file per stage plus a manifest, and restoring it (private to
// the trainer). Tensor names are the layers' (HF GPT-2 style: "h.3.attn.c_attn.weight"); the older 2BW
// version is under "prev/<name>", the optimizer state under "optimizer.m/<name>" and "optimizer.v/<name>".
#pragma once

#include <string>

#include "pd2bw/executor/checkpoint.hpp"
#include "pd2bw/executor/pipeline.hpp"

namespace pd2bw::executor {

struct CheckpointIdentity {
  std::string plan_sha256, profile_sha256, schedule, dtype, data_label;
  int64_t depth = 0, width = 0;
  uint64_t seed = 0;
};

// Writes the state of replica 0 of every stage after `step` updates into `dir` (stage files first, the
// manifest last). Throws Error on I/O failure.
template <typename T>
void save_checkpoint(ThreadsJob<T>& job, const PipelineConfig& config, const CheckpointIdentity& id,
                     const std::string& dir, int64_t step);

// Checks that the checkpoint in `dir` belongs to `id` (plan, dtype, seed, data, shape) and that its files
// are intact, then restores every replica of every stage. Returns the steps done. Throws UsageError /
// SchemaError before changing anything when it does not match or is corrupt.
template <typename T>
int64_t load_checkpoint(ThreadsJob<T>& job, const PipelineConfig& config, const CheckpointIdentity& id,
                        const std::string& dir);

}  // namespace pd2bw::executor

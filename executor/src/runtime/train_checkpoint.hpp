// Saving a job's state as one safetensors file per stage (pipeline position: a rank holding several
// model chunks writes all of them into its file) plus a manifest, and restoring it (private to the
// trainer). Tensor names are the layers' (HF GPT-2 style: "h.3.attn.c_attn.weight"); the older 2BW
// version is under "prev/<name>", the optimizer state under "optimizer.m/<name>" and "optimizer.v/<name>".
#pragma once

#include <string>
#include <vector>

#include "pd2bw/executor/checkpoint.hpp"
#include "pd2bw/executor/pipeline.hpp"

namespace pd2bw::executor {

struct CheckpointIdentity {
  std::string plan_sha256, profile_sha256, schedule, dtype, data_label;
  std::string model;  // the family, "gpt" | "bert"
  int64_t depth = 0, width = 0;
  uint64_t seed = 0;
};

// The pieces of a checkpoint, each done by the rank that owns the data (nothing reads another rank's
// worker): every stage's replica-0 rank writes its shard, rank 0 writes the manifest once every shard
// is durable; on resume rank 0 checks the manifest and then every rank loads its own stage's shard.

// Writes `worker`'s stage file for the state after `step` updates into `dir` (created if needed), durably
// (file and directory synced); returns the manifest entry (file name, sha256). Throws Error on I/O failure.
template <typename T>
CheckpointStage save_stage_shard(StageWorker<T>& worker, const PipelineConfig& config, const std::string& dir,
                                 int64_t step);

// Which part of `worker`'s state after `step` updates is not finite ("weights are", "older weight
// version is", "optimizer state is"), or "" when all of it is: a checkpoint never stores such a state.
template <typename T>
std::string nonfinite_state(StageWorker<T>& worker, const PipelineConfig& config, int64_t step);

// Writes the manifest of the checkpoint after `step` updates, `stages` in stage order (call once every
// shard is durable). Throws Error on I/O failure.
void write_checkpoint_manifest(const CheckpointIdentity& id, const std::string& dir, int64_t step,
                               std::vector<CheckpointStage> stages);

// Checks that the checkpoint in `dir` belongs to `id` (plan, dtype, seed, data, shape) and that every
// stage file it names is there; returns its step. Throws UsageError / SchemaError when it does not match,
// a file is missing or the manifest is corrupt.
int64_t check_checkpoint(const CheckpointIdentity& id, const std::string& dir);

// Verifies `worker`'s stage file in the checkpoint in `dir` and restores the worker from it. Throws
// UsageError / SchemaError (corrupt checkpoint) before changing the worker.
template <typename T>
void load_stage_shard(StageWorker<T>& worker, const PipelineConfig& config, const std::string& dir);

}  // namespace pd2bw::executor

// A checkpoint directory as `pd2bw train` keeps it (private to the trainer):
//
//     D/.lock                  flock'ed by rank 0 for the whole run: one trainer per directory
//     D/latest                 "step-000120\n", replaced atomically once that checkpoint is durable
//     D/step-000120/           one complete checkpoint: stage-000.safetensors ... and manifest.json
//
// A save writes every shard into a new step directory (each shard by its stage's replica-0 rank), then
// rank 0 writes the manifest there, syncs it and D, and swaps `latest`; only then are checkpoints
// beyond the newest `keep` removed (manifest first). A crash at any point leaves the previous complete
// checkpoint in place. A flat directory with manifest.json at the top (the layout of earlier releases)
// is a checkpoint too: it resumes, and is never removed.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "train_checkpoint.hpp"

namespace pd2bw::executor {

inline constexpr std::string_view kLatestFileName = "latest";
inline constexpr std::string_view kLockFileName = ".lock";

// "<dir>/step-000120": where the checkpoint after `step` updates goes. A pure function of its arguments,
// so every rank finds the directory without asking another.
std::string step_directory(const std::string& dir, int64_t step);

// Bytes one checkpoint of `config` takes with master weights of `scalar_bytes` each (weights, the older
// 2BW version, optimizer moments; headers rounded up). For the free-space check.
int64_t checkpoint_bytes(const PipelineConfig& config, int64_t scalar_bytes);

// Where a run resumes from.
struct ResumePoint {
  int64_t step = 0;   // updates done
  std::string dir;    // the directory holding its manifest and shards
  bool legacy = false;  // the flat layout (manifest.json directly in the checkpoint directory)
  std::string note;   // one line for the user: which checkpoint, and why that one
};

// Rank 0's handle on the checkpoint directory for one run. Holds the lock until destroyed.
class CheckpointStore {
 public:
  // Creates `dir` if needed and takes its lock, then checks before the first step:
  // - resume: the directory holds a complete checkpoint of this run (plan, dtype, seed, data, shape);
  //   the newest one becomes resume_point();
  // - no resume: it holds no complete checkpoint;
  // and that its file system has room for one more checkpoint of `bytes_per_checkpoint`. Removes what
  // interrupted saves left (step directories without a manifest, temporaries). Throws UsageError when
  // the directory is under a regular file, read-only, locked by another trainer, full, or does not hold
  // what the mode needs; SchemaError when the checkpoint to resume is corrupt.
  CheckpointStore(const std::string& dir, const CheckpointIdentity& id, bool resume, int64_t keep,
                  int64_t bytes_per_checkpoint);
  ~CheckpointStore();
  CheckpointStore(const CheckpointStore&) = delete;
  CheckpointStore& operator=(const CheckpointStore&) = delete;

  const ResumePoint& resume_point() const { return resume_; }

  // Commits the checkpoint after `step` updates, whose shards (`stages`, in stage order) are durable in
  // step_directory(dir, step): writes and syncs its manifest, syncs the directory, swaps `latest`, then
  // removes the complete checkpoints older than the newest `keep` and any incomplete ones. Fault points
  // "manifest", "commit", "latest" and "prune" (rank 0) sit between these. Throws Error on I/O failure,
  // leaving every earlier checkpoint intact.
  void commit(int64_t step, std::vector<CheckpointStage> stages);
  // After a save of `step` failed (every shard writer has reported): removes its step directory unless
  // it is complete. Never throws; what it cannot remove, the next run's start removes.
  void abandon(int64_t step) noexcept;

 private:
  std::string dir_;
  CheckpointIdentity id_;
  int64_t keep_;
  int lock_fd_ = -1;
  ResumePoint resume_;
};

}  // namespace pd2bw::executor

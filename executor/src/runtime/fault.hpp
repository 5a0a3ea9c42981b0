// Fault injection for tests of failure handling (private to the executor). The environment variable
// PD2BW_FAULT names one point where one rank fails on purpose:
//
//     PD2BW_FAULT=POINT:RANK:STEP[:ACTION]
//
// POINT is a name the code passes to fault_point. STEP counts from 0 for "step" and "log", and is the
// checkpoint's step (updates done) for the others:
//   step         before the first op of step STEP on rank RANK
//   log          after rank 0 wrote the metrics record of step STEP
//   lock         after rank 0 took the checkpoint directory's lock (STEP 0)
//   shard-begin  before a stage's replica-0 rank writes its shard of the checkpoint of step STEP
//   shard        after that shard is durable, before rank 0 is told
//   manifest     before rank 0 writes the manifest (every shard is durable)
//   commit       after the manifest is durable, before the `latest` pointer is swapped
//   latest       after the swap, before older checkpoints are removed
//   prune        after each older checkpoint is removed
//   resume       after rank RANK loaded its shard of the checkpoint of step STEP
// RANK is the job rank that fails, or -1 for every rank. ACTION is `throw` (default: an Error, handled
// like any failure of that rank), `exit` (the process ends at once with exit code 1, skipping every
// handler), `kill` (the process sends itself SIGKILL, as a crashed or killed rank would) or `stop`
// (the process sends itself SIGSTOP and carries on when continued: a run held still mid-way).
// Unset, empty or malformed values inject nothing; a malformed one is reported once on stderr.
//
// Failures that are not injected: a rank of a multi-process job that is lost or stalls is noticed by
// its peers' watch (Comm::watch_peers), set up here from the plan's rank table and the options.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "pd2bw/executor/comm.hpp"
#include "pd2bw/executor/pipeline.hpp"
#include "pd2bw/executor/trainer.hpp"

namespace pd2bw::executor {

// Starts comm's watch of this rank's peers with options.peer_timeout_s: the ranks of its replica and of
// its stage, and rank 0 (which hears from every rank, so it watches them all); messages name a rank as
// "rank 3 (stage 1, replica 1)". Sets the stop note for a run that has no checkpoint yet.
void watch_job_peers(Comm& comm, const PipelineConfig& config, const TrainOptions& options);

// The sentence that ends a lost-rank message when `step` is the last complete checkpoint: "the last
// complete checkpoint is step 4 in DIR; resume with --resume"; step < 0: none of this run yet (a resumed
// run's checkpoints are intact; a fresh run starts over).
std::string stop_note(const TrainOptions& options, int64_t step);

// Fails as PD2BW_FAULT says when (point, rank, step) is the one it names, the first time only; returns
// otherwise. Cheap when the variable is unset (it is read once per process).
void fault_point(std::string_view point, int64_t rank, int64_t step);

}  // namespace pd2bw::executor

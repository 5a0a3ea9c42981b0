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
#pragma once

#include <cstdint>
#include <string_view>

namespace pd2bw::executor {

// Fails as PD2BW_FAULT says when (point, rank, step) is the one it names, the first time only; returns
// otherwise. Cheap when the variable is unset (it is read once per process).
void fault_point(std::string_view point, int64_t rank, int64_t step);

}  // namespace pd2bw::executor

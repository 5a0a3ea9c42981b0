// Fault injection for tests of failure handling (private to the executor). The environment variable
// PD2BW_FAULT names one point where one rank fails on purpose:
//
//     PD2BW_FAULT=POINT:RANK:STEP[:ACTION]
//
// POINT is a name the code passes to fault_point ("step": before the first op of step STEP;
// "shard": after the stage's checkpoint shard of step STEP is durable, before rank 0 is told;
// "manifest": before rank 0 writes the manifest of step STEP; further points where they are called).
// RANK is the job rank that fails, or -1 for every rank. ACTION is `throw` (default: an Error, handled
// like any failure of that rank), `exit` (the process ends at once with exit code 1, skipping every
// handler) or `kill` (the process sends itself SIGKILL, as a crashed or killed rank would).
// Unset, empty or malformed values inject nothing; a malformed one is reported once on stderr.
#pragma once

#include <cstdint>
#include <string_view>

namespace pd2bw::executor {

// Fails as PD2BW_FAULT says when (point, rank, step) is the one it names; returns otherwise. Cheap when
// the variable is unset (it is read once per process).
void fault_point(std::string_view point, int64_t rank, int64_t step);

}  // namespace pd2bw::executor

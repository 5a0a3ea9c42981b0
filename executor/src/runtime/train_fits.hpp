// Whether a plan's ranks fit in the memory they share, checked before training allocates anything
// (trainer.cpp): the static terms of the memory model and a floor on the activations in flight.
#pragma once

#include <cstdint>
#include <vector>

#include "pd2bw/executor/dtype.hpp"
#include "pd2bw/executor/pipeline.hpp"

namespace pd2bw::executor {

// The ranks `here` (plan rank ids) share one memory: the cpu's (this machine) or one GPU's (c.backend).
// Throws pd2bw::UsageError naming what does not fit (the weights, gradients and optimizer state of the
// ranks' chunks, or one microbatch's stash in flight on each rank's largest chunk) and what to change.
// Returns when the backend reports no memory size.
void check_fits(const PipelineConfig& c, DType master, const std::vector<int64_t>& here);

}  // namespace pd2bw::executor

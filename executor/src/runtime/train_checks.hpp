// The checks `pd2bw train` makes before it reads data or touches a device (train_checks.cpp); the public
// ones (the process layout, the dtype and device a plan implies) are declared in trainer.hpp.
#pragma once

#include "pd2bw/executor/model.hpp"
#include "pd2bw/executor/trainer.hpp"
#include "pd2bw/schemas/plan.hpp"

namespace pd2bw::executor {

// The model a plan trains, validated. Throws pd2bw::UsageError for a kind other than gpt or bert, or an
// untied bert.
ModelConfig model_of(const schemas::Plan& plan);

// Throws pd2bw::UsageError naming the first option out of range (steps, learning rates, decay, clip,
// mask rate, keep, peer timeout, warm-up, dtype, checkpoint steps) and what it must be.
void check_options(const TrainOptions& o);

}  // namespace pd2bw::executor

// The non-finite guard of a stage's update (private to the runtime): what the step's health vector says,
// and the error that stops training. The vector is the one Impl::step_health builds: one gradient sum of
// squares per stage (model chunk: `stages` of them, d v), then the count of non-finite losses.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "pd2bw/error.hpp"

namespace pd2bw::executor {

// The sum of the stages' gradient sums of squares, in stage order (bit-identical to one fixed-order
// allreduce of the per-stage scalars).
double health_gradient_sum(std::span<const double> health, int64_t stages);

// "" when the step is finite, else what is not: "the loss of 3 microbatches", "the gradient norm (stages
// 0, 2)", or both joined by " and ".
std::string nonfinite_verdict(std::span<const double> health, int64_t count);

// The Error that stops training at 0-based `step` (named 1-based, as the progress lines count): "<what>
// <verb> not finite".
Error nonfinite_error(int64_t step, const std::string& what, const char* verb = "is");

}  // namespace pd2bw::executor

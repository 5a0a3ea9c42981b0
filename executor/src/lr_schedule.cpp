// The learning-rate schedule: linear warm-up, then cosine decay to min_lr.
#include <fmt/format.h>

#include <cmath>
#include <numbers>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/optimizer.hpp"

namespace pd2bw::executor {

void LrSchedule::validate() const {
  if (!(min_lr >= 0 && min_lr <= max_lr)) {
    throw UsageError(fmt::format("learning rate: need 0 <= min_lr ({}) <= max_lr ({})", min_lr, max_lr));
  }
  if (warmup_steps < 0 || warmup_steps > total_steps) {
    throw UsageError(fmt::format("learning rate: need 0 <= warmup_steps ({}) <= total_steps ({})",
                                 warmup_steps, total_steps));
  }
}

double LrSchedule::at(int64_t step) const {
  if (step < 0) throw UsageError(fmt::format("learning rate: step {} must be >= 0", step));
  if (step < warmup_steps) {
    return max_lr * static_cast<double>(step + 1) / static_cast<double>(warmup_steps);
  }
  if (step >= total_steps) return min_lr;
  const double progress =
      static_cast<double>(step - warmup_steps) / static_cast<double>(total_steps - warmup_steps);
  return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * progress)) * (max_lr - min_lr);
}

}  // namespace pd2bw::executor

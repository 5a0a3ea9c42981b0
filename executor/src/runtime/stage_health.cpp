// The non-finite guard: building the step's health vector over the job's groups, judging it, and the
// messages that name the step and the stage (a model chunk, when a rank holds several).
#include "stage_health.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cmath>
#include <vector>

#include "stage_state.hpp"

namespace pd2bw::executor {

double health_gradient_sum(std::span<const double> health, int64_t stages) {
  double total = 0;
  for (int64_t i = 0; i < stages; ++i) total += health[static_cast<size_t>(i)];
  return total;
}

std::string nonfinite_verdict(std::span<const double> health, int64_t count) {
  std::vector<int64_t> stages;
  for (int64_t i = 0; i < count; ++i)
    if (!std::isfinite(health[static_cast<size_t>(i)])) stages.push_back(i);
  const double losses = health[static_cast<size_t>(count)];
  std::string out;
  if (losses > 0) out = fmt::format("the loss of {:.0f} microbatch{}", losses, losses > 1 ? "es" : "");
  if (!stages.empty())
    out += fmt::format("{}the gradient norm (stage{} {})", out.empty() ? "" : " and ", stages.size() > 1 ? "s" : "",
                       fmt::join(stages, ", "));
  return out;
}

Error nonfinite_error(int64_t step, const std::string& what, const char* verb) {
  return Error(fmt::format("step {}: {} {} not finite; training stopped, and no checkpoint holds this step",
                           step + 1, what, verb),
               "lower --lr or keep --clip on, then --resume from the last checkpoint; or pass --skip-nonfinite "
               "to skip such steps");
}

// The replicas' gradients are already summed (AllReduce), so every slot but the losses is the same on
// every replica; the rank of the last chunk first sums its replicas' loss counts, so that one is too.
template <typename T>
std::vector<double> StageWorker<T>::Impl::own_health(Comm& comm, int64_t step, double scale) {
  const int64_t n = cfg.chunks_total();
  std::vector<double> health(static_cast<size_t>(n + 1), 0.0);
  // The head's copy of a tied table is counted once, on the embedding's chunk (the copy is last).
  for (ChunkState<T>& ch : chunks) health[static_cast<size_t>(ch.chunk)] = ch.grad_sum_of_squares() * scale * scale;
  if (holds(n - 1)) {
    // Every microbatch's forward (and recompute) wrote its loss into the step's slots by now.
    std::vector<double> bad{0.0};
    if (const auto it = losses.find(step); it != losses.end()) {
      std::vector<double> values(static_cast<size_t>(cfg.microbatches));
      backend->to_host(it->second.values.view(), values.data());
      for (const double v : values) bad[0] += std::isfinite(v) ? 0.0 : 1.0;
    }
    if (cfg.width > 1) comm.allreduce_sum(stage_comm_group, std::span<double>(bad));
    health.back() = bad[0];
  }
  return health;
}

// Sends never wait for their receive (Comm::send), so a rank posts its share at its own end of the step
// and goes on; the messages of one pair and tag arrive in step order.
template <typename T>
void StageWorker<T>::Impl::post_health(Comm& comm, int64_t step, std::span<const double> own) {
  const int64_t tag = make_tag(TagKind::health, 0, 1, step, 0);
  for (const int64_t r : replica_group())
    if (r != rank) comm.send(r, tag, own);
}

template <typename T>
std::vector<double> StageWorker<T>::Impl::gather_health(Comm& comm, int64_t step, const std::vector<double>& own) {
  const int64_t tag = make_tag(TagKind::health, 0, 1, step, 0);
  std::vector<double> sum, theirs(own.size());
  for (const int64_t r : replica_group()) {
    const std::vector<double>* part = &own;
    if (r != rank) {
      comm.recv(r, tag, std::span<double>(theirs));
      part = &theirs;
    }
    if (sum.empty()) {
      sum = *part;
      continue;
    }
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += (*part)[i];
  }
  return sum;
}

template struct StageWorker<float>::Impl;
template struct StageWorker<double>::Impl;

}  // namespace pd2bw::executor

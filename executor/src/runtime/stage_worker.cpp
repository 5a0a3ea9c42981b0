// The op interpreter: one rank walks the op list of its position from the schedule generator,
// dispatching each op to the model chunk it names and exchanging activations and gradients with the
// neighbouring chunks; and the in-process job that runs every rank as a thread.
#include <fmt/format.h>

#include <optional>

#include "fault.hpp"
#include "pd2bw/error.hpp"
#include "stage_state.hpp"

namespace pd2bw::executor {

template <typename T>
StageWorker<T>::StageWorker(const PipelineConfig& config, int64_t rank) : impl_(std::make_unique<Impl>(config, rank)) {}
template <typename T>
StageWorker<T>::StageWorker(const PipelineConfig& config, int64_t rank, Comm& comm) : StageWorker(config, rank) {
  impl_->bind_groups(comm);
}
template <typename T>
StageWorker<T>::~StageWorker() = default;
template <typename T>
StageWorker<T>::StageWorker(StageWorker&&) noexcept = default;

template <typename T>
void StageWorker<T>::run(Comm& comm, const MicrobatchSource& data, int64_t first_step, int64_t steps, LossSink* sink) {
  Impl& s = *impl_;
  if (first_step != s.steps_done)
    throw Error(
        fmt::format("stage {}: asked to run from step {} but {} steps are done", s.stage, first_step, s.steps_done));
  s.bind_groups(comm);
  int64_t entered = -1;  // the last step whose first op ran (for fault injection)
  for (pipeline::StageOpStream ops(pipeline::schedule_spec(s.cfg, steps), s.stage, s.recompute); !ops.done();
       ops.next()) {
    const pipeline::Op& op = ops.op();
    const int64_t step = first_step + op.step;
    if (step != entered) fault_point("step", s.rank, entered = step);
    if (s.open && s.settle_due(op, step)) s.settle(comm, sink);
    s.run_op(comm, data, op, step, sink);
  }
  if (s.open) s.settle(comm, sink);
  s.resolve_times();
  size_t left = 0;
  for (const ChunkState<T>& ch : s.chunks) left += ch.live.size();
  if (left > 0) throw Error(fmt::format("stage {}: {} microbatches left in flight", s.stage, left));
}

template <typename T>
void StageWorker<T>::Impl::run_op(Comm& comm, const MicrobatchSource& data, const pipeline::Op& op, int64_t step,
                                  LossSink* sink) {
  using K = pipeline::OpKind;
  if (op.kind == K::update) return begin_update(comm, step, sink);
  ChunkState<T>& ch = chunk(op.chunk);
  const auto key = std::make_pair(step, op.microbatch);
  switch (op.kind) {
    case K::allreduce:
      return allreduce_grads(comm, ch);
    case K::recv_activation:
      return receive(comm, ch, TagKind::activation, key);
    case K::send_activation:
      return hand_on(comm, ch, TagKind::activation, key);
    case K::recv_gradient:
      return receive(comm, ch, TagKind::gradient, key);
    case K::send_gradient:
      return hand_on(comm, ch, TagKind::gradient, key);
    default:
      return compute_op(ch, op.kind, key, data, sink != nullptr);
  }
}

// A forward, recompute, backward, B or W of microbatch `key` on chunk ch, timed. The last chunk's forward
// writes the microbatch's loss (report: hand it to the sink at the update). A microbatch ends its life on
// its chunk at its last op there: the first chunk's backward or any W (else its send_gradient).
template <typename T>
void StageWorker<T>::Impl::compute_op(ChunkState<T>& ch, pipeline::OpKind kind, const std::pair<int64_t, int64_t>& key,
                                      const MicrobatchSource& data, bool report) {
  using K = pipeline::OpKind;
  const auto [step, k] = key;
  Microbatch& mb = kind == K::forward ? ch.live[key] : ch.live.at(key);
  const ConstView params = ch.buffer_of(version_of_step(step)).cview();
  if (kind == K::forward) ch.load_batch(mb, data, step, k, replica);
  const TimerMark t0 = backend->mark();
  switch (kind) {
    case K::forward:
    case K::recompute: {
      const bool again = kind == K::recompute;
      ch.forward(mb, params, ch.last ? loss_slot(step, k, report && !again) : View{}, recompute && !again);
      time_since(t0);
      if (again)
        mb.output.reset();
      else if (recompute)
        mb.drop_stash();  // keep only the chunk's input
      return;
    }
    case K::backward:
      ch.backward(mb, params);
      break;
    case K::backward_input:
      ch.backward_input(mb, params);
      break;
    case K::backward_weight:
      ch.backward_weight(mb, params);
      break;
    default:
      throw Error(fmt::format("stage {}: {} is not a compute op", stage, pipeline::to_string(kind)));
  }
  time_since(t0);
  if (kind == K::backward_input) return;
  ++computed_backwards;
  if (kind == K::backward_weight || ch.first) ch.live.erase(key);
}

// Whether the open update must settle before `op` (of `step`) runs: op reads the version it writes,
// or is the next update, or (with the gradient not parked) adds to or sums the gradients.
template <typename T>
bool StageWorker<T>::Impl::settle_due(const pipeline::Op& op, int64_t step) const {
  using K = pipeline::OpKind;
  switch (op.kind) {
    case K::update:
      return true;
    case K::allreduce:
    case K::backward:
    case K::backward_weight:
      if (chunks.front().parked != open->step) return true;
      [[fallthrough]];
    case K::forward:
    case K::recompute:
    case K::backward_input:
      return version_of_step(step) > open->step;
    default:
      return false;
  }
}

template <typename T>
ThreadsJob<T>::ThreadsJob(const PipelineConfig& config) : config_(config) {
  config_.validate();
  comms_ = make_threads_comms(config_.ranks_total());
  // Each rank builds its worker on its own thread: making the groups is collective.
  std::vector<std::optional<StageWorker<T>>> built(comms_.size());
  run_on_threads(comms_,
                 [&](Comm& comm) { built[static_cast<size_t>(comm.rank())].emplace(config_, comm.rank(), comm); });
  for (auto& w : built) workers_.push_back(std::move(*w));
}

template <typename T>
void ThreadsJob<T>::run(const MicrobatchSource& data, int64_t first_step, int64_t steps, LossSink* sink) {
  run_on_threads(
      comms_, [&](Comm& comm) { workers_[static_cast<size_t>(comm.rank())].run(comm, data, first_step, steps, sink); });
}

template class StageWorker<float>;
template class StageWorker<double>;
template class ThreadsJob<float>;
template class ThreadsJob<double>;

}  // namespace pd2bw::executor

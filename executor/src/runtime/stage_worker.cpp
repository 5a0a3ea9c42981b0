// The op interpreter: one rank walks the op list of its stage from the schedule generator, exchanging
// activations and gradients with its neighbours, and the in-process job that runs every rank as a thread.
#include <fmt/format.h>

#include <chrono>
#include <optional>

#include "fault.hpp"
#include "pd2bw/error.hpp"
#include "stage_state.hpp"

namespace pd2bw::executor {

namespace {

double steady_ms() {
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

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
    throw Error(fmt::format("stage {}: asked to run from step {} but {} steps are done", s.stage, first_step,
                            s.steps_done));
  s.bind_groups(comm);
  const int64_t act = s.activation_numel();
  const auto& c = s.cfg;
  Backend& be = *s.backend;
  const auto ops = pipeline::stage_ops({c.schedule, c.depth, c.microbatches, steps, c.width}, s.stage, s.recompute);
  int64_t entered = -1;  // the last step whose first op ran (for fault injection)
  for (const pipeline::Op& op : ops) {
    const int64_t step = first_step + op.step, k = op.microbatch;
    if (step != entered) fault_point("step", s.rank, entered = step);
    const auto key = std::make_pair(step, k);
    const ConstView params = s.buffer_of(s.version_of_step(step)).cview();
    switch (op.kind) {
      case pipeline::OpKind::recv_activation: {
        auto& mb = s.live[key];
        mb.input = be.alloc(s.compute, act);
        s.recv(comm, s.rank_of(s.stage - 1, s.replica), make_tag(TagKind::activation, step, k), mb.input.view());
        break;
      }
      case pipeline::OpKind::forward: {
        auto& mb = s.live[key];
        s.load_batch(mb, data, step, k);
        const TimerMark t0 = be.mark();
        s.forward(mb, step, params, sink != nullptr, k, s.recompute);
        s.time_since(t0);
        if (s.recompute) mb.drop_stash();  // keep only the stage input
        break;
      }
      case pipeline::OpKind::send_activation: {
        auto& mb = s.live.at(key);
        s.send(comm, s.rank_of(s.stage + 1, s.replica), make_tag(TagKind::activation, step, k), mb.output.view());
        mb.output.reset();
        break;
      }
      case pipeline::OpKind::recv_gradient: {
        auto& mb = s.live.at(key);
        mb.grad_out = be.alloc(s.compute, act);
        s.recv(comm, s.rank_of(s.stage + 1, s.replica), make_tag(TagKind::gradient, step, k), mb.grad_out.view());
        break;
      }
      case pipeline::OpKind::recompute: {
        auto& mb = s.live.at(key);
        const TimerMark t0 = be.mark();
        s.forward(mb, step, params, false, k, false);
        s.time_since(t0);
        mb.output.reset();
        break;
      }
      case pipeline::OpKind::backward: {
        auto& mb = s.live.at(key);
        const TimerMark t0 = be.mark();
        s.backward(mb, params);
        s.time_since(t0);
        ++s.computed_microbatches;
        if (s.first) s.live.erase(key);
        break;
      }
      case pipeline::OpKind::backward_input:
      case pipeline::OpKind::backward_weight:
        s.split_backward_op(op.kind, key, params);
        break;
      case pipeline::OpKind::send_gradient: {
        auto& mb = s.live.at(key);
        s.send(comm, s.rank_of(s.stage - 1, s.replica), make_tag(TagKind::gradient, step, k), mb.grad_in.view());
        mb.grad_in.reset();
        if (!mb.awaiting_weight) s.live.erase(key);  // a split backward's W still reads the stash
        break;
      }
      case pipeline::OpKind::allreduce:
        s.allreduce_grads(comm);
        break;
      case pipeline::OpKind::update:
        const std::string skipped = s.update(comm, step);
        s.report_losses(step, sink);
        if (!skipped.empty() && sink) sink->on_skip(step, skipped);
        if (s.update_end.size() <= static_cast<size_t>(step)) s.update_end.resize(static_cast<size_t>(step) + 1, 0.0);
        s.update_end[static_cast<size_t>(step)] = steady_ms();
        if (sink) sink->on_update(step);
        break;
    }
  }
  s.resolve_times();
  if (!s.live.empty()) throw Error(fmt::format("stage {}: {} microbatches left in flight", s.stage, s.live.size()));
}

template <typename T>
int64_t StageWorker<T>::stage() const { return impl_->stage; }
template <typename T>
int64_t StageWorker<T>::replica() const { return impl_->replica; }
template <typename T>
int64_t StageWorker<T>::steps_done() const { return impl_->steps_done; }
template <typename T>
const ParamLayout& StageWorker<T>::layout() const { return impl_->layout; }
template <typename T>
std::span<T> StageWorker<T>::moment1() { return impl_->host_view(impl_->m1, impl_->host_m1); }
template <typename T>
std::span<T> StageWorker<T>::moment2() { return impl_->host_view(impl_->m2, impl_->host_m2); }
template <typename T>
int64_t StageWorker<T>::versions_allocated() const { return impl_->allocated; }
template <typename T>
int64_t StageWorker<T>::master_buffers() const { return impl_->mixed ? 1 : 0; }
template <typename T>
DType StageWorker<T>::compute_dtype() const { return impl_->compute; }
template <typename T>
int64_t StageWorker<T>::peak_bytes() const { return impl_->backend->memory().peak_bytes; }
template <typename T>
MemoryStats StageWorker<T>::memory() const { return impl_->backend->memory(); }
template <typename T>
double StageWorker<T>::compute_ms_per_microbatch() const {
  return impl_->computed_microbatches > 0 ? impl_->compute_ms / static_cast<double>(impl_->computed_microbatches) : 0.0;
}
template <typename T>
const std::vector<double>& StageWorker<T>::update_end_ms() const { return impl_->update_end; }

template <typename T>
std::span<T> StageWorker<T>::weights(int64_t version) {
  Impl& s = *impl_;
  const bool held = version == s.steps_done || (s.two_bw() && version == s.steps_done - 1 && version >= 0);
  if (!held) throw Error(fmt::format("stage {}: weight version {} is not held (steps done {})", s.stage, version, s.steps_done));
  std::vector<T>& mirror = version == s.steps_done ? s.host_current : s.host_previous;
  if (!s.mixed) return s.host_view(s.buffer_of(version), mirror);
  if (version == s.steps_done) return s.host_view(s.master, mirror);
  if (s.widened.empty()) s.widened = s.backend->alloc(dtype_of<T>(), s.numel);
  s.backend->copy(s.buffer_of(version).view(), s.widened.view());
  return s.host_view(s.widened, mirror);
}

// With a master copy, `current` goes to the master and its cast to the compute buffer (as an update
// makes it), and `previous` (a widened bf16 copy) is narrowed back exactly.
template <typename T>
void StageWorker<T>::restore(int64_t steps, std::span<const T> previous, std::span<const T> current,
                             std::span<const T> m1, std::span<const T> m2) {
  Impl& s = *impl_;
  const auto n = static_cast<size_t>(s.numel);
  const bool want_prev = s.two_bw() && steps > 0;
  if (current.size() != n || m1.size() != static_cast<size_t>(s.m1.numel()) ||
      m2.size() != static_cast<size_t>(s.m2.numel()) || (want_prev ? previous.size() != n : !previous.empty()))
    throw Error(fmt::format("stage {}: restored state has the wrong sizes", s.stage));
  Backend& be = *s.backend;
  s.steps_done = steps;
  const auto put = [&](std::span<const T> host, Buffer& dst) {
    if (dst.empty()) {
      dst = be.alloc(s.compute, s.numel);
      ++s.allocated;
    }
    if (!s.mixed) return be.from_host(host.data(), dst.view());
    Buffer staged = be.alloc(dtype_of<T>(), s.numel);
    be.from_host(host.data(), staged.view());
    be.copy(staged.view(), dst.view());
  };
  put(current, s.buffer_of(steps));
  if (s.mixed) be.from_host(current.data(), s.master.view());
  if (want_prev) put(previous, s.buffer_of(steps - 1));
  be.from_host(m1.data(), s.m1.view());
  be.from_host(m2.data(), s.m2.view());
}

template <typename T>
ThreadsJob<T>::ThreadsJob(const PipelineConfig& config) : config_(config) {
  config_.validate();
  comms_ = make_threads_comms(config_.ranks_total());
  // Each rank builds its worker on its own thread: making the groups is collective.
  std::vector<std::optional<StageWorker<T>>> built(comms_.size());
  run_on_threads(comms_, [&](Comm& comm) { built[static_cast<size_t>(comm.rank())].emplace(config_, comm.rank(), comm); });
  for (auto& w : built) workers_.push_back(std::move(*w));
}

template <typename T>
void ThreadsJob<T>::run(const MicrobatchSource& data, int64_t first_step, int64_t steps, LossSink* sink) {
  run_on_threads(comms_, [&](Comm& comm) {
    workers_[static_cast<size_t>(comm.rank())].run(comm, data, first_step, steps, sink);
  });
}

template class StageWorker<float>;
template class StageWorker<double>;
template class ThreadsJob<float>;
template class ThreadsJob<double>;

}  // namespace pd2bw::executor

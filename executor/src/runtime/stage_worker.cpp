// The op interpreter: one rank walks the op list of its stage from the schedule generator, exchanging
// activations and gradients with its neighbours, and the in-process job that runs every rank as a thread.
#include <fmt/format.h>

#include <time.h>

#include <chrono>
#include <optional>

#include "pd2bw/error.hpp"
#include "stage_state.hpp"

namespace pd2bw::executor {

namespace {

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

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
  const auto act = static_cast<size_t>(s.activation_numel());
  const auto& c = s.cfg;
  const auto ops = planner::stage_ops({c.schedule, c.depth, c.microbatches, steps, c.width}, s.stage, s.recompute);
  for (const planner::Op& op : ops) {
    const int64_t step = first_step + op.step, k = op.microbatch;
    const auto key = std::make_pair(step, k);
    const T* params = s.buffer_of(s.version_of_step(step)).data();
    switch (op.kind) {
      case planner::OpKind::recv_activation: {
        auto& mb = s.live[key];
        mb.input.resize(act);
        comm.recv(s.rank_of(s.stage - 1, s.replica), make_tag(TagKind::activation, step, k), std::span<T>(mb.input));
        break;
      }
      case planner::OpKind::forward: {
        auto& mb = s.live[key];
        if (s.first || s.last) {
          const auto n = static_cast<size_t>(c.microbatch_size * c.seq);
          mb.tokens.resize(n);
          mb.targets.resize(n);
          data.fill(step, k, s.replica, mb.tokens.data(), mb.targets.data());
          if (!s.last) mb.targets = {};
        }
        const double t0 = thread_cpu_ms();
        s.forward(mb, step, params, sink, k);
        s.compute_cpu_ms += thread_cpu_ms() - t0;
        if (s.recompute) mb.drop_stash();  // keep only the stage input
        break;
      }
      case planner::OpKind::send_activation: {
        auto& mb = s.live.at(key);
        comm.send(s.rank_of(s.stage + 1, s.replica), make_tag(TagKind::activation, step, k), std::span<const T>(mb.output));
        mb.output = {};
        break;
      }
      case planner::OpKind::recv_gradient: {
        auto& mb = s.live.at(key);
        mb.grad_out.resize(act);
        comm.recv(s.rank_of(s.stage + 1, s.replica), make_tag(TagKind::gradient, step, k), std::span<T>(mb.grad_out));
        break;
      }
      case planner::OpKind::recompute: {
        auto& mb = s.live.at(key);
        const double t0 = thread_cpu_ms();
        s.forward(mb, step, params, nullptr, k);
        s.compute_cpu_ms += thread_cpu_ms() - t0;
        mb.output = {};
        break;
      }
      case planner::OpKind::backward: {
        auto& mb = s.live.at(key);
        const double t0 = thread_cpu_ms();
        s.backward(mb, params);
        s.compute_cpu_ms += thread_cpu_ms() - t0;
        ++s.computed_microbatches;
        s.account();  // the peak includes the stash freed just now
        if (s.first) s.live.erase(key);
        break;
      }
      case planner::OpKind::send_gradient: {
        auto& mb = s.live.at(key);
        comm.send(s.rank_of(s.stage - 1, s.replica), make_tag(TagKind::gradient, step, k), std::span<const T>(mb.grad_in));
        s.live.erase(key);
        break;
      }
      case planner::OpKind::allreduce:
        comm.allreduce_sum(s.stage_comm_group, std::span<T>(s.grads));
        break;
      case planner::OpKind::update:
        s.update(comm, step);
        if (s.update_end.size() <= static_cast<size_t>(step)) s.update_end.resize(static_cast<size_t>(step) + 1, 0.0);
        s.update_end[static_cast<size_t>(step)] = steady_ms();
        if (sink) sink->on_update(step);
        break;
    }
    s.account();
  }
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
std::span<T> StageWorker<T>::moment1() { return impl_->m1; }
template <typename T>
std::span<T> StageWorker<T>::moment2() { return impl_->m2; }
template <typename T>
int64_t StageWorker<T>::versions_allocated() const { return impl_->allocated; }
template <typename T>
int64_t StageWorker<T>::peak_bytes() const { return impl_->peak; }
template <typename T>
double StageWorker<T>::compute_ms_per_microbatch() const {
  return impl_->computed_microbatches > 0 ? impl_->compute_cpu_ms / static_cast<double>(impl_->computed_microbatches) : 0.0;
}
template <typename T>
const std::vector<double>& StageWorker<T>::update_end_ms() const { return impl_->update_end; }

template <typename T>
std::span<T> StageWorker<T>::weights(int64_t version) {
  Impl& s = *impl_;
  const bool held = version == s.steps_done || (s.two_bw() && version == s.steps_done - 1 && version >= 0);
  if (!held) throw Error(fmt::format("stage {}: weight version {} is not held (steps done {})", s.stage, version, s.steps_done));
  return s.buffer_of(version);
}

template <typename T>
void StageWorker<T>::restore(int64_t steps, std::span<const T> previous, std::span<const T> current,
                             std::span<const T> m1, std::span<const T> m2) {
  Impl& s = *impl_;
  const auto n = static_cast<size_t>(s.numel);
  const bool want_prev = s.two_bw() && steps > 0;
  if (current.size() != n || m1.size() != s.m1.size() || m2.size() != s.m2.size() ||
      (want_prev ? previous.size() != n : !previous.empty()))
    throw Error(fmt::format("stage {}: restored state has the wrong sizes", s.stage));
  s.steps_done = steps;
  auto& cur = s.buffer_of(steps);
  cur.assign(current.begin(), current.end());
  if (want_prev) {
    auto& prev = s.buffer_of(steps - 1);
    prev.assign(previous.begin(), previous.end());
    s.allocated = 2;
  }
  s.m1.assign(m1.begin(), m1.end());
  s.m2.assign(m2.begin(), m2.end());
  s.account();
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

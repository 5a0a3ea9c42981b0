// Streams and events of the emulated device: each stream is a FIFO of tasks run in order by a worker
// thread of its own, so streams overlap as on the device and a missing wait between two of them shows.
// The legacy default stream (0) orders against every blocking stream, as CUDA's legacy stream does.
#include <cstdio>
#include <cstdlib>

#include "runtime_state.hpp"

namespace pd2bw_emu {
namespace {

void worker_loop(CUstream_st* s) {
  Device& d = device();
  std::unique_lock lock(d.mu);
  for (;;) {
    d.changed.wait(lock, [&] { return !s->queue.empty() || s->stopping; });
    if (s->queue.empty()) return;
    std::function<void()> task = std::move(s->queue.front());
    s->queue.pop_front();
    lock.unlock();
    task();
    lock.lock();
    ++s->completed;
    d.changed.notify_all();
  }
}

void start(CUstream_st* s) { s->worker = std::thread(worker_loop, s); }

// Waits (device mutex held) until `s` has finished its first `count` tasks.
void wait_for(std::unique_lock<std::mutex>& lock, CUstream_st* s, uint64_t count) {
  device().changed.wait(lock, [&] { return s->completed >= count; });
}

bool live(Device& d, cudaStream_t s) {
  if (s == nullptr) return true;
  for (CUstream_st* x : d.streams)
    if (x == s) return true;
  return false;
}

}  // namespace

Device& device() {
  static Device* d = [] {
    auto* dev = new Device;  // lives until exit: worker threads may outlive static destructors
    start(&dev->legacy);
    return dev;
  }();
  return *d;
}

cudaError_t enqueue(cudaStream_t stream, std::function<cudaError_t()> task) {
  Device& d = device();
  std::unique_lock lock(d.mu);
  if (d.sticky != cudaSuccess) return set_last_error(d.sticky);
  if (!live(d, stream)) return set_last_error(cudaErrorInvalidResourceHandle);
  CUstream_st* s = stream == nullptr ? &d.legacy : stream;
  // What this task must wait for besides its own stream: the legacy stream's earlier work (for a
  // blocking stream), or every blocking stream's earlier work (for the legacy stream).
  std::vector<std::pair<CUstream_st*, uint64_t>> after;
  if (s == &d.legacy) {
    for (CUstream_st* x : d.streams)
      if ((x->flags & cudaStreamNonBlocking) == 0) after.emplace_back(x, x->submitted);
  } else if ((s->flags & cudaStreamNonBlocking) == 0) {
    after.emplace_back(&d.legacy, d.legacy.submitted);
  }
  ++s->submitted;
  s->queue.push_back([after = std::move(after), task = std::move(task)] {
    Device& dev = device();
    {
      std::unique_lock l(dev.mu);
      for (const auto& [x, count] : after) wait_for(l, x, count);
      if (dev.sticky != cudaSuccess) return;  // a faulted device runs nothing more
    }
    const cudaError_t rc = task();
    if (rc != cudaSuccess) fail(rc, "an operation queued on a stream failed");
  });
  d.changed.notify_all();
  return cudaSuccess;
}

}  // namespace pd2bw_emu

using pd2bw_emu::Device;
using pd2bw_emu::device;
using pd2bw_emu::set_last_error;

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (stream == nullptr || flags > cudaStreamNonBlocking) return set_last_error(cudaErrorInvalidValue);
  auto* s = new CUstream_st;
  s->flags = flags;
  Device& d = device();
  {
    std::lock_guard lock(d.mu);
    d.streams.push_back(s);
  }
  pd2bw_emu::start(s);
  *stream = s;
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return cudaStreamCreateWithFlags(stream, cudaStreamDefault); }

// Waits for the stream's work, then ends its worker (the device would release it once the work is done).
cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  Device& d = device();
  {
    std::unique_lock lock(d.mu);
    if (stream == nullptr || !pd2bw_emu::live(d, stream)) return set_last_error(cudaErrorInvalidResourceHandle);
    std::erase(d.streams, stream);
    stream->stopping = true;
    d.changed.notify_all();
  }
  stream->worker.join();
  std::lock_guard lock(d.mu);
  d.retired.push_back(stream);  // legacy-stream work queued earlier may still look at its counters
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  Device& d = device();
  if (stream == nullptr) {  // the legacy stream: also every blocking stream's earlier work
    const cudaError_t rc = pd2bw_emu::enqueue(nullptr, [] { return cudaSuccess; });
    if (rc != cudaSuccess) return rc;
  }
  std::unique_lock lock(d.mu);
  if (!pd2bw_emu::live(d, stream)) return set_last_error(cudaErrorInvalidResourceHandle);
  CUstream_st* s = stream == nullptr ? &d.legacy : stream;
  pd2bw_emu::wait_for(lock, s, s->submitted);
  return d.sticky == cudaSuccess ? cudaSuccess : set_last_error(d.sticky);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  Device& d = device();
  std::lock_guard lock(d.mu);
  if (!pd2bw_emu::live(d, stream)) return set_last_error(cudaErrorInvalidResourceHandle);
  if (d.sticky != cudaSuccess) return set_last_error(d.sticky);
  const CUstream_st* s = stream == nullptr ? &d.legacy : stream;
  return s->completed == s->submitted ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaDeviceSynchronize() {
  Device& d = device();
  std::unique_lock lock(d.mu);
  const std::vector<CUstream_st*> all = d.streams;
  for (CUstream_st* s : all) pd2bw_emu::wait_for(lock, s, s->submitted);
  pd2bw_emu::wait_for(lock, &d.legacy, d.legacy.submitted);
  return d.sticky == cudaSuccess ? cudaSuccess : set_last_error(d.sticky);
}

// ---- events -------------------------------------------------------------------------------------------
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (event == nullptr || (flags & ~(cudaEventBlockingSync | cudaEventDisableTiming)) != 0)
    return set_last_error(cudaErrorInvalidValue);
  *event = new CUevent_st;
  (*event)->state->flags = flags;
  return cudaSuccess;
}
cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

// Queued records and waits keep the event's state; the handle goes at once.
cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (event == nullptr) return set_last_error(cudaErrorInvalidResourceHandle);
  delete event;
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  if (event == nullptr) return set_last_error(cudaErrorInvalidResourceHandle);
  std::shared_ptr<EventState> e = event->state;
  uint64_t generation = 0;
  {
    std::lock_guard lock(device().mu);
    generation = ++e->recorded;
  }
  return pd2bw_emu::enqueue(stream, [e, generation] {
    Device& d = device();
    std::lock_guard lock(d.mu);
    if (generation > e->completed) {
      e->completed = generation;
      e->when = std::chrono::steady_clock::now();
    }
    d.changed.notify_all();
    return cudaSuccess;
  });
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (event == nullptr) return set_last_error(cudaErrorInvalidResourceHandle);
  Device& d = device();
  std::lock_guard lock(d.mu);
  if (d.sticky != cudaSuccess) return set_last_error(d.sticky);
  return event->state->completed >= event->state->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (event == nullptr) return set_last_error(cudaErrorInvalidResourceHandle);
  Device& d = device();
  const std::shared_ptr<EventState> e = event->state;
  std::unique_lock lock(d.mu);
  const uint64_t target = e->recorded;
  d.changed.wait(lock, [&] { return e->completed >= target || d.sticky != cudaSuccess; });
  return d.sticky == cudaSuccess ? cudaSuccess : set_last_error(d.sticky);
}

// Both events must have completed a record, and both must keep timestamps.
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return set_last_error(cudaErrorInvalidValue);
  if (start == nullptr || end == nullptr) return set_last_error(cudaErrorInvalidResourceHandle);
  Device& d = device();
  std::lock_guard lock(d.mu);
  const EventState &a = *start->state, &b = *end->state;
  if ((a.flags | b.flags) & cudaEventDisableTiming) return set_last_error(cudaErrorInvalidResourceHandle);
  if (a.recorded == 0 || b.recorded == 0) return set_last_error(cudaErrorInvalidResourceHandle);
  if (a.completed < a.recorded || b.completed < b.recorded) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b.when - a.when).count();
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  if (event == nullptr) return set_last_error(cudaErrorInvalidResourceHandle);
  if (flags != 0) return set_last_error(cudaErrorInvalidValue);
  std::shared_ptr<EventState> e = event->state;
  uint64_t target = 0;
  {
    std::lock_guard lock(device().mu);
    target = e->recorded;  // the record most recently asked for; none: nothing to wait for
  }
  return pd2bw_emu::enqueue(stream, [e, target] {
    Device& d = device();
    std::unique_lock lock(d.mu);
    d.changed.wait(lock, [&] { return e->completed >= target || d.sticky != cudaSuccess; });
    return cudaSuccess;
  });
}

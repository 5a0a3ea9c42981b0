// What a rank's worker shows of its chunks (weights, moments, layouts, memory, times) and restoring them
// from a checkpoint.
#include <fmt/format.h>

#include <algorithm>

#include "pd2bw/error.hpp"
#include "stage_state.hpp"

namespace pd2bw::executor {

template <typename T>
int64_t StageWorker<T>::stage() const {
  return impl_->stage;
}
template <typename T>
int64_t StageWorker<T>::replica() const {
  return impl_->replica;
}
template <typename T>
const std::vector<int64_t>& StageWorker<T>::chunks() const {
  return impl_->chunk_ids;
}
template <typename T>
int64_t StageWorker<T>::steps_done() const {
  return impl_->steps_done;
}
template <typename T>
const ParamLayout& StageWorker<T>::layout(int64_t chunk) const {
  return impl_->only_chunk(chunk).layout;
}
template <typename T>
std::span<T> StageWorker<T>::moment1(int64_t chunk) {
  auto& ch = impl_->only_chunk(chunk);
  return ch.host_view(ch.m1, ch.host_m1);
}
template <typename T>
std::span<T> StageWorker<T>::moment2(int64_t chunk) {
  auto& ch = impl_->only_chunk(chunk);
  return ch.host_view(ch.m2, ch.host_m2);
}
template <typename T>
int64_t StageWorker<T>::versions_allocated() const {
  int64_t most = 0;
  for (const ChunkState<T>& ch : impl_->chunks) most = std::max(most, ch.allocated);
  return most;
}
template <typename T>
int64_t StageWorker<T>::master_buffers() const {
  return impl_->mixed ? 1 : 0;
}
template <typename T>
DType StageWorker<T>::compute_dtype() const {
  return impl_->compute;
}
template <typename T>
int64_t StageWorker<T>::peak_bytes() const {
  return impl_->backend->memory().peak_bytes;
}
template <typename T>
MemoryStats StageWorker<T>::memory() const {
  return impl_->backend->memory();
}
// Each microbatch passes through every chunk of the rank once: v backwards (or W's) per microbatch.
template <typename T>
double StageWorker<T>::compute_ms_per_microbatch() const {
  const Impl& s = *impl_;
  const auto microbatches = static_cast<double>(s.computed_backwards) / static_cast<double>(s.chunks.size());
  return s.computed_backwards > 0 ? s.compute_ms / microbatches : 0.0;
}
template <typename T>
const std::vector<double>& StageWorker<T>::update_end_ms() const {
  return impl_->update_end;
}

template <typename T>
std::span<T> StageWorker<T>::weights(int64_t version, int64_t chunk) {
  Impl& s = *impl_;
  ChunkState<T>& ch = s.only_chunk(chunk);
  const bool held = version == s.steps_done || (ch.two_bw() && version == s.steps_done - 1 && version >= 0);
  if (!held)
    throw Error(
        fmt::format("stage {}: weight version {} is not held (steps done {})", ch.chunk, version, s.steps_done));
  std::vector<T>& mirror = version == s.steps_done ? ch.host_current : ch.host_previous;
  if (!ch.mixed) return ch.host_view(ch.buffer_of(version), mirror);
  if (version == s.steps_done) return ch.host_view(ch.master, mirror);
  if (ch.widened.empty()) ch.widened = s.backend->alloc(dtype_of<T>(), ch.numel);
  s.backend->copy(ch.buffer_of(version).view(), ch.widened.view());
  return ch.host_view(ch.widened, mirror);
}

// With a master copy, `current` goes to the master and its cast to the compute buffer (as an update
// makes it), and `previous` (a widened bf16 copy) is narrowed back exactly.
template <typename T>
void StageWorker<T>::restore(int64_t steps, std::span<const T> previous, std::span<const T> current,
                             std::span<const T> m1, std::span<const T> m2, int64_t chunk) {
  Impl& s = *impl_;
  ChunkState<T>& ch = s.only_chunk(chunk);
  const auto n = static_cast<size_t>(ch.numel);
  const bool want_prev = ch.two_bw() && steps > 0;
  if (current.size() != n || m1.size() != static_cast<size_t>(ch.m1.numel()) ||
      m2.size() != static_cast<size_t>(ch.m2.numel()) || (want_prev ? previous.size() != n : !previous.empty()))
    throw Error(fmt::format("stage {}: restored state has the wrong sizes", ch.chunk));
  Backend& be = *s.backend;
  s.steps_done = steps;
  const auto put = [&](std::span<const T> host, Buffer& dst) {
    if (dst.empty()) {
      dst = be.alloc(ch.compute, ch.numel);
      ++ch.allocated;
    }
    if (!ch.mixed) return be.from_host(host.data(), dst.view());
    Buffer staged = be.alloc(dtype_of<T>(), ch.numel);
    be.from_host(host.data(), staged.view());
    be.copy(staged.view(), dst.view());
  };
  put(current, ch.buffer_of(steps));
  if (ch.mixed) be.from_host(current.data(), ch.master.view());
  if (want_prev) put(previous, ch.buffer_of(steps - 1));
  be.from_host(m1.data(), ch.m1.view());
  be.from_host(m2.data(), ch.m2.view());
}

template class StageWorker<float>;
template class StageWorker<double>;

}  // namespace pd2bw::executor

// A rank's messages: activations and gradients between neighbouring model chunks (over Comm to another
// rank, or handed over in place between two chunks of this rank: zb-v's turn, or every boundary when
// d = 1), and the replicas' sum of a chunk's gradients.
#include <fmt/format.h>

#include "pd2bw/error.hpp"
#include "stage_state.hpp"

namespace pd2bw::executor {

template <typename T>
void StageWorker<T>::Impl::send(Comm& comm, int64_t dst, int64_t tag, ConstView data) {
  const auto bytes = static_cast<size_t>(data.bytes());
  if (backend->host_visible()) return comm.send(dst, tag, {data.data, bytes, MemoryKind::host});
  if (comm.accepts(MemoryKind::device))
    return comm.send(dst, tag, {data.data, bytes, MemoryKind::device}, Stream{backend->native_stream()});
  staging.resize(bytes);
  backend->to_host(data, staging.data());
  comm.send(dst, tag, {staging.data(), bytes, MemoryKind::host});
}

template <typename T>
void StageWorker<T>::Impl::recv(Comm& comm, int64_t src, int64_t tag, View data) {
  const auto bytes = static_cast<size_t>(data.bytes());
  if (backend->host_visible()) return comm.recv(src, tag, {data.data, bytes, MemoryKind::host});
  if (comm.accepts(MemoryKind::device))
    return comm.recv(src, tag, {data.data, bytes, MemoryKind::device}, Stream{backend->native_stream()});
  staging.resize(bytes);
  comm.recv(src, tag, {staging.data(), bytes, MemoryKind::host});
  backend->from_host(staging.data(), data);
}

// The replicas' sum of the step's gradients of chunk ch, in place.
template <typename T>
void StageWorker<T>::Impl::allreduce_grads(Comm& comm, ChunkState<T>& ch) {
  Buffer& grads = ch.grads;
  if (backend->host_visible()) return comm.allreduce_sum(stage_comm_group, ch.host_span(grads));
  const ScalarType type = dtype_of<T>() == DType::f32 ? ScalarType::f32 : ScalarType::f64;
  const auto bytes = static_cast<size_t>(grads.bytes());
  if (comm.accepts(MemoryKind::device))
    return comm.allreduce_sum(stage_comm_group, type, {grads.data<void>(), bytes, MemoryKind::device},
                              Stream{backend->native_stream()});
  std::vector<T> host(static_cast<size_t>(grads.numel()));
  backend->to_host(grads.view(), host.data());
  comm.allreduce_sum(stage_comm_group, std::span<T>(host));
  backend->from_host(host.data(), grads.view());
}

// An activation comes from chunk - 1 (over the boundary chunk - 1 | chunk), a gradient from chunk + 1
// (over chunk | chunk + 1). A chunk of this rank handed it over already, when it sent it (the schedule
// orders that send before this receive).
template <typename T>
void StageWorker<T>::Impl::receive(Comm& comm, ChunkState<T>& ch, TagKind kind,
                                   const std::pair<int64_t, int64_t>& key) {
  const bool activation = kind == TagKind::activation;
  const int64_t from = ch.chunk + (activation ? -1 : 1);
  Microbatch& mb = activation ? ch.live[key] : ch.live.at(key);
  Buffer& into = activation ? mb.input : mb.grad_out;
  if (holds(from)) {
    if (into.empty())
      throw Error(
          fmt::format("rank {}: chunk {} receives the {} of step {}, microbatch {} from chunk {} of the same "
                      "rank before it was sent",
                      rank, ch.chunk, activation ? "activation" : "gradient", key.first + 1, key.second, from));
    return;
  }
  into = backend->alloc(compute, activation_numel());
  recv(comm, rank_of_chunk(from), tag(kind, activation ? from : ch.chunk, key), into.view());
}

// An activation goes to chunk + 1, a gradient to chunk - 1: over Comm, or into that chunk's microbatch
// when this rank holds it. The gradient's sender is done with the microbatch unless its W is still to run.
template <typename T>
void StageWorker<T>::Impl::hand_on(Comm& comm, ChunkState<T>& ch, TagKind kind,
                                   const std::pair<int64_t, int64_t>& key) {
  const bool activation = kind == TagKind::activation;
  const int64_t to = ch.chunk + (activation ? 1 : -1);
  Microbatch& mb = ch.live.at(key);
  Buffer& out = activation ? mb.output : mb.grad_in;
  if (ChunkState<T>* local = find(to)) {
    if (activation)
      local->live[key].input = std::move(out);
    else
      local->live.at(key).grad_out = std::move(out);
  } else {
    send(comm, rank_of_chunk(to), tag(kind, activation ? ch.chunk : to, key), out.view());
    out.reset();
  }
  if (!activation && !mb.awaiting_weight) ch.live.erase(key);  // a split backward's W still reads the stash
}

template void StageWorker<float>::Impl::send(Comm&, int64_t, int64_t, ConstView);
template void StageWorker<double>::Impl::send(Comm&, int64_t, int64_t, ConstView);
template void StageWorker<float>::Impl::recv(Comm&, int64_t, int64_t, View);
template void StageWorker<double>::Impl::recv(Comm&, int64_t, int64_t, View);
template void StageWorker<float>::Impl::allreduce_grads(Comm&, ChunkState<float>&);
template void StageWorker<double>::Impl::allreduce_grads(Comm&, ChunkState<double>&);
template void StageWorker<float>::Impl::receive(Comm&, ChunkState<float>&, TagKind, const std::pair<int64_t, int64_t>&);
template void StageWorker<double>::Impl::receive(Comm&, ChunkState<double>&, TagKind,
                                                 const std::pair<int64_t, int64_t>&);
template void StageWorker<float>::Impl::hand_on(Comm&, ChunkState<float>&, TagKind, const std::pair<int64_t, int64_t>&);
template void StageWorker<double>::Impl::hand_on(Comm&, ChunkState<double>&, TagKind,
                                                 const std::pair<int64_t, int64_t>&);

}  // namespace pd2bw::executor

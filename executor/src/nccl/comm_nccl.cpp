// The `nccl` transport: one process per rank and GPU. Host messages go over MPI as in the mpi
// transport. Device messages between two ranks that are neighbours in a group's member order (the
// stages of a replica, the replicas of a stage) go over NCCL: every such ordered pair has a 2-rank
// communicator of its own with a stream of its own on each side, so a send that waits for its receiver
// never holds up another transfer of either rank, nor the caller's stream. (On a GPU this relies on the
// NCCL kernels of a rank's few communicators running side by side, which NCCL does not promise in
// general: its guide calls concurrent communicators deadlock-prone.) Other device messages are staged
// through host memory.
//
// Ordering with the caller's stream S (Comm's Stream; null: the legacy default stream, and the call
// completes before returning). No call synchronises the whole device, since a pair's stream may be
// blocked in a transfer that waits for a peer: a call without a stream waits for S alone, and S waits
// for a pair's stream only where it needs that stream's transfer (a receive).
// - send: S copies the message into a stream-ordered staging buffer (the caller may reuse its buffer
//   once S is past the copy), the pair's stream waits for S, and ncclSend reads the copy there. S never
//   waits for the pair's stream, which may still hold an earlier send until its receiver takes it.
// - recv: a small header (tag, bytes) sent over MPI tells the receiver what comes next on the pair's
//   communicator; a message for another tag is parked in a buffer of its own until asked for, so
//   messages of one (source, tag) are delivered in order whatever the order of the receives. The
//   pair's stream waits for S before ncclRecv writes into the caller's buffer, and S waits for it.
// - allreduce_sum of device memory: ncclAllReduce on S over the group's communicator (NCCL's order of
//   summation, not the fixed order of the default; the emulated device's NCCL adds in member order,
//   which is the default's); host memory uses the fixed-order default.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <vector>

#include "mpi/mpi_internal.hpp"
#include "mpi/peer_watch.hpp"
#include "nccl_handles.hpp"
#include "nccl_transport.hpp"
#include "pd2bw/error.hpp"

namespace pd2bw::executor::nccl {

namespace {

struct Header {
  int64_t tag = 0;
  int64_t bytes = 0;
};

// One direction between two neighbours: a 2-rank communicator and this side's stream for it.
struct Pair {
  CommHandle comm;
  StreamHandle stream;
  int peer = 0;  // the other side's rank in `comm`
};

// What the transport attaches to a group (Group::native): the communicator of its allreduce.
struct NativeGroup {
  CommHandle all;
};

// A device message received before its receive was asked for.
struct Parked {
  void* data = nullptr;
  size_t bytes = 0;
  cudaEvent_t ready = nullptr;
};

cudaStream_t stream_of(Stream s) { return static_cast<cudaStream_t>(s.handle); }

class NcclComm final : public Comm {
 public:
  NcclComm(MPI_Comm world, int64_t device)
      : host_(world), headers_(world), ids_(world), watch_(world), device_(static_cast<int>(device)) {
    int count = 0;
    cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
    if (device < 0 || device >= count)
      throw UsageError(fmt::format("rank {}: the plan puts this rank on GPU {}, but this node has {} GPU(s)", host_.rank(),
                                   device, count),
                       "plan with --gpus-per-node at most the GPUs each node has");
    cuda_check(cudaSetDevice(device_), "cudaSetDevice");
  }

  ~NcclComm() override {
    for (auto& [key, queue] : parked_)
      for (Parked& p : queue) {
        cudaEventSynchronize(p.ready);
        cudaEventDestroy(p.ready);
        cudaFree(p.data);
      }
  }

  int64_t rank() const override { return host_.rank(); }
  int64_t size() const override { return host_.size(); }
  bool accepts(MemoryKind) const override { return true; }
  void watch_peers(double timeout_s, std::vector<int64_t> peers, std::vector<std::string> names) override {
    watch_.start(timeout_s, std::move(peers), std::move(names));
  }
  void set_stop_note(const std::string& note) override { watch_.set_note(note); }
  std::string stop_note() const override { return watch_.note(); }

  void abort(const std::string& why) override {
    for (auto& [key, pair] : pairs_) pair->comm.abort();
    for (const auto& g : groups_)
      if (const auto native = g.lock()) native->all.abort();
    std::fprintf(stderr, "pd2bw: error: rank %lld ends the job: %s\n", static_cast<long long>(rank()), why.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

 protected:
  void do_send(int64_t dst, int64_t tag, ConstMessageBuffer data, Stream stream) override {
    if (data.memory == MemoryKind::host) return host_.send(dst, tag, data.data, data.bytes);
    const cudaStream_t s = stream_of(stream);
    Pair* pair = pair_of(rank(), dst);
    if (pair == nullptr) return staged_send(dst, tag, data, s);
    const Header h{tag, static_cast<int64_t>(data.bytes)};
    headers_.send(dst, tag, &h, sizeof h);
    if (data.bytes == 0) return;
    const cudaStream_t ps = pair->stream.get();
    void* copy = nullptr;
    cuda_check(cudaMallocAsync(&copy, data.bytes, s), "cudaMallocAsync");
    cuda_check(cudaMemcpyAsync(copy, data.data, data.bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
    order_after(ps, s);
    nccl_check(ncclSend(copy, data.bytes, ncclUint8, pair->peer, pair->comm.get(), ps), "ncclSend");
    cuda_check(cudaFreeAsync(copy, ps), "cudaFreeAsync");
    if (s == nullptr) cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");  // the copy is made
  }

  void do_recv(int64_t src, int64_t tag, MessageBuffer data, Stream stream) override {
    if (data.memory == MemoryKind::host) return host_.recv(src, tag, data.data, data.bytes);
    Pair* pair = pair_of(src, rank());
    const cudaStream_t s = stream_of(stream);
    if (pair == nullptr) return staged_recv(src, tag, data, s);
    if (take_parked(src, tag, data, s)) return;
    for (;;) {
      Header h;
      headers_.recv_any(src, &h, sizeof h);
      if (h.tag != tag) {
        park(src, h, *pair);
        continue;
      }
      if (h.bytes != static_cast<int64_t>(data.bytes))
        throw Error(fmt::format("rank {}: device message from rank {} (tag {}) has {} bytes, expected {}", rank(), src,
                                tag, h.bytes, data.bytes));
      if (data.bytes == 0) return;
      const cudaStream_t ps = pair->stream.get();
      order_after(ps, s);
      nccl_check(ncclRecv(data.data, data.bytes, ncclUint8, pair->peer, pair->comm.get(), ps), "ncclRecv");
      order_after(s, ps);
      if (s == nullptr) cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
      return;
    }
  }

  std::shared_ptr<void> make_native_group(const std::vector<int64_t>& members) override {
    if (members.size() < 2) return nullptr;
    const auto me = static_cast<size_t>(std::find(members.begin(), members.end(), rank()) - members.begin());
    for (size_t k = 0; k + 1 < members.size(); ++k) {
      if (k + 1 != me && k != me) continue;
      connect(members[k], members[k + 1]);
      connect(members[k + 1], members[k]);
    }
    auto native = std::make_shared<NativeGroup>();
    ncclUniqueId id{};
    share_id(members, id);
    native->all = CommHandle(static_cast<int>(members.size()), id, static_cast<int>(me));
    groups_.push_back(native);
    return native;
  }

  void do_allreduce_sum(const Group& group, ScalarType type, MessageBuffer values, Stream stream) override {
    if (values.memory == MemoryKind::host) return Comm::do_allreduce_sum(group, type, values, stream);
    auto* native = static_cast<NativeGroup*>(group.native().get());
    if (native == nullptr) throw Error("nccl transport: a device allreduce over a group without a communicator");
    const size_t width = type == ScalarType::f32 ? sizeof(float) : sizeof(double);
    const cudaStream_t s = stream_of(stream);
    nccl_check(ncclAllReduce(values.data, values.data, values.bytes / width,
                             type == ScalarType::f32 ? ncclFloat32 : ncclFloat64, ncclSum, native->all.get(), s),
               "ncclAllReduce");
    if (s == nullptr) cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  }

 private:
  // The members[0] of a new communicator makes its id and sends it to the others.
  void share_id(const std::vector<int64_t>& members, ncclUniqueId& id) {
    if (members[0] == rank()) {
      nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      for (size_t k = 1; k < members.size(); ++k) ids_.send(members[k], 0, &id, sizeof id);
    } else {
      ids_.recv(members[0], 0, &id, sizeof id);
    }
  }

  // The communicator of messages from `from` to `to` (this rank is one of them); made once.
  void connect(int64_t from, int64_t to) {
    const auto key = std::make_pair(from, to);
    if (pairs_.count(key)) return;
    ncclUniqueId id{};
    share_id({std::min(from, to), std::max(from, to)}, id);
    auto pair = std::make_unique<Pair>();
    const int mine = rank() == std::min(from, to) ? 0 : 1;
    pair->comm = CommHandle(2, id, mine);
    pair->peer = 1 - mine;
    pairs_.emplace(key, std::move(pair));
  }

  Pair* pair_of(int64_t from, int64_t to) {
    const auto it = pairs_.find({from, to});
    return it == pairs_.end() ? nullptr : it->second.get();
  }

  void park(int64_t src, const Header& h, Pair& pair) {
    Parked p;
    p.bytes = static_cast<size_t>(h.bytes);
    const cudaStream_t ps = pair.stream.get();
    if (p.bytes > 0) {
      cuda_check(cudaMallocAsync(&p.data, p.bytes, ps), "cudaMallocAsync");
      nccl_check(ncclRecv(p.data, p.bytes, ncclUint8, pair.peer, pair.comm.get(), ps), "ncclRecv");
    }
    cuda_check(cudaEventCreateWithFlags(&p.ready, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(p.ready, ps), "cudaEventRecord");
    parked_[{src, h.tag}].push_back(p);
  }

  bool take_parked(int64_t src, int64_t tag, MessageBuffer data, cudaStream_t s) {
    const auto it = parked_.find({src, tag});
    if (it == parked_.end() || it->second.empty()) return false;
    const Parked p = it->second.front();
    it->second.pop_front();
    if (p.bytes != data.bytes)
      throw Error(fmt::format("rank {}: device message from rank {} (tag {}) has {} bytes, expected {}", rank(), src, tag,
                              p.bytes, data.bytes));
    cuda_check(cudaStreamWaitEvent(s, p.ready, 0), "cudaStreamWaitEvent");
    cudaEventDestroy(p.ready);
    if (p.bytes > 0) {
      cuda_check(cudaMemcpyAsync(data.data, p.data, p.bytes, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync");
      cuda_check(cudaFreeAsync(p.data, s), "cudaFreeAsync");
    }
    if (s == nullptr) cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return true;
  }

  // Ranks without a pair of their own: through host memory over MPI.
  void staged_send(int64_t dst, int64_t tag, ConstMessageBuffer data, cudaStream_t s) {
    std::vector<std::byte> h(data.bytes);
    if (!h.empty()) cuda_check(cudaMemcpyAsync(h.data(), data.data, data.bytes, cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
    cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    host_.send(dst, tag, h.data(), h.size());
  }
  void staged_recv(int64_t src, int64_t tag, MessageBuffer data, cudaStream_t s) {
    std::vector<std::byte> h(data.bytes);
    host_.recv(src, tag, h.data(), h.size());
    if (!h.empty()) cuda_check(cudaMemcpyAsync(data.data, h.data(), data.bytes, cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
    cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");  // h dies here
  }

  mpi::Port host_;     // Comm's host messages, under their own tags
  mpi::Port headers_;  // one header per device message on a pair, in the pair's order
  mpi::Port ids_;      // NCCL unique ids of new communicators
  mpi::PeerWatch watch_;  // heartbeats: a lost or stalled peer ends the job
  int device_;
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<Pair>> pairs_;  // (from, to) -> its communicator
  std::map<std::pair<int64_t, int64_t>, std::deque<Parked>> parked_;    // (source, tag) -> early arrivals
  std::vector<std::weak_ptr<NativeGroup>> groups_;                      // to abort their communicators
};

}  // namespace

std::unique_ptr<Comm> make_comm(MPI_Comm world, int64_t device) { return std::make_unique<NcclComm>(world, device); }

}  // namespace pd2bw::executor::nccl

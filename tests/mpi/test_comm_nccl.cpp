// The nccl transport in a real MPI job: ctest runs this as `mpirun -np 3 test_comm_nccl`, on the
// emulated device in cuda-emu builds (whose NCCL runs over MPI) and on real GPUs elsewhere (exit 77,
// skipped, where this node has fewer GPUs than processes). Rank r uses GPU r of its node. Every rank runs
// every case in the same order; the group {0, 1, 2} gives the neighbour pairs (0, 1) and (1, 2) NCCL
// communicators of their own, so 0 -> 1 and 1 -> 2 go over NCCL and 0 -> 2 is staged through host memory.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include "nccl/nccl_handles.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/process_group.hpp"

namespace ex = pd2bw::executor;
using pd2bw::executor::nccl::cuda_check;

namespace {

ex::ProcessGroup* g_group = nullptr;
ex::ProcessGroup& group() { return *g_group; }

std::unique_ptr<ex::Comm> make_comm() { return group().make_comm("nccl", group().node_rank()); }

// Device memory with `values` in it, read back with read() (after the stream's earlier work).
template <typename T>
struct DeviceBuffer {
  explicit DeviceBuffer(const std::vector<T>& values) : n(values.size()) {
    cuda_check(cudaMalloc(&p, std::max<size_t>(n, 1) * sizeof(T)), "cudaMalloc");
    if (n > 0) cuda_check(cudaMemcpy(p, values.data(), n * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  std::vector<T> read(cudaStream_t s = nullptr) const {
    std::vector<T> v(n);
    if (n > 0) cuda_check(cudaMemcpyAsync(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
    cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
    return v;
  }
  ex::MessageBuffer buffer() { return {p, n * sizeof(T), ex::MemoryKind::device}; }
  void* p = nullptr;
  size_t n;
};

// A stream of the caller's (as the cuda backend's compute stream).
struct CallerStream {
  CallerStream() { cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate"); }
  ~CallerStream() { cudaStreamDestroy(s); }
  CallerStream(const CallerStream&) = delete;
  CallerStream& operator=(const CallerStream&) = delete;
  ex::Stream stream() const { return ex::Stream{s}; }
  cudaStream_t s = nullptr;
};

std::vector<int> values(int first, size_t n) {
  std::vector<int> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = first + static_cast<int>(i);
  return v;
}

// A host message that says "go on" (the receiving side waits for it before it receives).
void go(ex::Comm& comm, int64_t to) {
  const std::vector<int> one{1};
  comm.send(to, 99, std::span<const int>(one));
}
void wait_for_go(ex::Comm& comm, int64_t from) {
  std::vector<int> one(1);
  comm.recv(from, 99, std::span<int>(one));
}

// Whether `s` finishes its work within 20 s (polling, so that a wait that never ends fails the case).
bool drains(cudaStream_t s) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (cudaStreamQuery(s) == cudaSuccess) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// Rank r's allreduce contribution. On the emulated device: large, minus large, small, so that only
// adding ranks 0 and 1 first keeps the small value; on a GPU, values whose sums are exact in any order
// (NCCL picks its own).
template <typename T>
std::vector<T> contribution(int64_t r, size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    const auto k = static_cast<T>(i % 7 + 1);
#if PD2BW_CUDA_EMULATED
    const T large = sizeof(T) == 4 ? T(1e8) : T(1e17);
    v[i] = r == 0 ? large * k : r == 1 ? -large * k : k;
#else
    v[i] = k * static_cast<T>(0.5) + static_cast<T>(r);
#endif
  }
  return v;
}

template <typename T>
void check_device_sum_is_host_sum(ex::Comm& comm, const ex::Group& g, ex::Stream stream) {
  constexpr size_t kN = 1031;
  std::vector<T> host = contribution<T>(comm.rank(), kN);
  DeviceBuffer<T> device(host);
  comm.allreduce_sum(g, std::span<T>(host));  // the fixed-order default
  comm.allreduce_sum(g, sizeof(T) == 4 ? ex::ScalarType::f32 : ex::ScalarType::f64, device.buffer(), stream);
  const std::vector<T> got = device.read(static_cast<cudaStream_t>(stream.handle));
  for (size_t i = 0; i < kN; ++i) REQUIRE(std::memcmp(&got[i], &host[i], sizeof(T)) == 0);
}

}  // namespace

TEST_CASE("device messages of several tags received out of order are parked, each tag in order; 0 bytes too") {
  const auto comm = make_comm();
  const ex::Group all = comm->group({0, 1, 2});
  CallerStream caller;
  constexpr int kRounds = 4;
  if (comm->rank() == 0) {
    std::vector<std::unique_ptr<DeviceBuffer<int>>> sent;
    for (int i = 0; i < kRounds; ++i) {
      sent.push_back(std::make_unique<DeviceBuffer<int>>(values(100 * i, 300)));
      comm->send(1, 5, sent.back()->buffer(), caller.stream());
      sent.push_back(std::make_unique<DeviceBuffer<int>>(values(-100 * i, 7)));
      comm->send(1, 6, sent.back()->buffer(), caller.stream());
      comm->send(1, 7, {nullptr, 0, ex::MemoryKind::device}, caller.stream());
    }
    // Nothing is received yet: the caller's stream must not wait for the pair's sends.
    CHECK_MESSAGE(drains(caller.s), "the caller's stream waits for a send's receiver");
    go(*comm, 1);
    DeviceBuffer<int> far(values(5000, 33));
    comm->send(2, 5, far.buffer(), caller.stream());  // not a neighbour: staged through host memory
    cuda_check(cudaStreamSynchronize(caller.s), "cudaStreamSynchronize");
    comm->recv(1, 8, {nullptr, 0, ex::MemoryKind::host});  // the receiver is done with our buffers
  } else if (comm->rank() == 1) {
    wait_for_go(*comm, 0);
    DeviceBuffer<int> big(std::vector<int>(300, 0)), small(std::vector<int>(7, 0));
    for (int i = 0; i < kRounds; ++i) comm->recv(0, 7, {nullptr, 0, ex::MemoryKind::device}, caller.stream());
    for (int i = 0; i < kRounds; ++i) {
      comm->recv(0, 6, small.buffer(), caller.stream());
      CHECK(small.read(caller.s) == values(-100 * i, 7));
    }
    for (int i = 0; i < kRounds; ++i) {
      comm->recv(0, 5, big.buffer(), caller.stream());
      CHECK(big.read(caller.s) == values(100 * i, 300));
    }
    comm->send(0, 8, {nullptr, 0, ex::MemoryKind::host});
  } else {
    DeviceBuffer<int> far(std::vector<int>(33, 0));
    comm->recv(0, 5, far.buffer(), caller.stream());
    CHECK(far.read(caller.s) == values(5000, 33));
  }
  group().barrier();
}

TEST_CASE("without a stream a send returns before its receive, and a receive returns with the message") {
  const auto comm = make_comm();
  const ex::Group all = comm->group({0, 1, 2});
  if (comm->rank() == 1) {
    DeviceBuffer<double> a(std::vector<double>(1000, 1.5)), b(std::vector<double>(10, -2.0));
    auto sends = std::async(std::launch::async, [&] {
      comm->send(2, 3, a.buffer());
      comm->send(2, 3, b.buffer());
    });
    const bool returned = sends.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    CHECK_MESSAGE(returned, "a send without a stream waited for its receive");
    go(*comm, 2);
    sends.get();
    comm->recv(2, 8, {nullptr, 0, ex::MemoryKind::host});
  } else if (comm->rank() == 2) {
    wait_for_go(*comm, 1);
    DeviceBuffer<double> a(std::vector<double>(1000, 0.0)), b(std::vector<double>(10, 0.0));
    comm->recv(1, 3, a.buffer());
    comm->recv(1, 3, b.buffer());
    CallerStream unordered;  // no stream: the message is there, whoever reads it
    CHECK(a.read(unordered.s) == std::vector<double>(1000, 1.5));
    CHECK(b.read(unordered.s) == std::vector<double>(10, -2.0));
    comm->send(1, 8, {nullptr, 0, ex::MemoryKind::host});
  }
  group().barrier();
}

TEST_CASE("a send reads the caller's buffer in stream order; the receiver's stream sees the message") {
  const auto comm = make_comm();
  const ex::Group all = comm->group({0, 1, 2});
  CallerStream caller;
  DeviceBuffer<unsigned char> buf(std::vector<unsigned char>(1 << 15, 0));
  if (comm->rank() == 1) {  // the send must carry the first memset's bytes, not the second's
    cuda_check(cudaMemsetAsync(buf.p, 1, buf.n, caller.s), "cudaMemsetAsync");
    comm->send(2, 4, buf.buffer(), caller.stream());
    cuda_check(cudaMemsetAsync(buf.p, 2, buf.n, caller.s), "cudaMemsetAsync");
    CHECK(buf.read(caller.s) == std::vector<unsigned char>(buf.n, 2));
    comm->recv(2, 8, {nullptr, 0, ex::MemoryKind::host});
  } else if (comm->rank() == 2) {  // the copy queued after the receive sees the message
    comm->recv(1, 4, buf.buffer(), caller.stream());
    CHECK(buf.read(caller.s) == std::vector<unsigned char>(buf.n, 1));
    comm->send(1, 8, {nullptr, 0, ex::MemoryKind::host});
  }
  group().barrier();
}

TEST_CASE("a parked message is copied out only once it has arrived") {
  const auto comm = make_comm();
  const ex::Group all = comm->group({0, 1, 2});
  CallerStream caller;
  DeviceBuffer<int> message(comm->rank() == 1 ? values(7, 1 << 16) : std::vector<int>(1 << 16, 0));
  if (comm->rank() == 1) {
    // The caller's stream is busy for a while, so the message leaves well after both headers.
    DeviceBuffer<unsigned char> busy(std::vector<unsigned char>(size_t{64} << 20, 0));
    for (int k = 0; k < 4; ++k) cuda_check(cudaMemsetAsync(busy.p, k, busy.n, caller.s), "cudaMemsetAsync");
    comm->send(2, 5, message.buffer(), caller.stream());
    comm->send(2, 6, {nullptr, 0, ex::MemoryKind::device}, caller.stream());
    comm->recv(2, 8, {nullptr, 0, ex::MemoryKind::host});
  } else if (comm->rank() == 2) {
    comm->recv(1, 6, {nullptr, 0, ex::MemoryKind::device}, caller.stream());  // parks tag 5's message
    comm->recv(1, 5, message.buffer(), caller.stream());
    CHECK(message.read(caller.s) == values(7, 1 << 16));
    comm->send(1, 8, {nullptr, 0, ex::MemoryKind::host});
  }
  group().barrier();
}

TEST_CASE("a device allreduce_sum equals the fixed-order host sum, bit for bit, on every member") {
  const auto comm = make_comm();
  const ex::Group all = comm->group({0, 1, 2});
  CallerStream caller;
  check_device_sum_is_host_sum<float>(*comm, all, caller.stream());
  check_device_sum_is_host_sum<double>(*comm, all, caller.stream());
  check_device_sum_is_host_sum<float>(*comm, all, ex::Stream{});
  if (comm->rank() != 0) {  // members out of rank order: the sum starts at rank 2
    const ex::Group pair = comm->group({2, 1});
    check_device_sum_is_host_sum<double>(*comm, pair, caller.stream());
  }
#if PD2BW_CUDA_EMULATED
  const auto a = contribution<float>(0, 8), b = contribution<float>(1, 8), c = contribution<float>(2, 8);
  CHECK((a[0] + b[0]) + c[0] != a[0] + (b[0] + c[0]));  // the data tells the fixed order from another one
#endif
  group().barrier();
}

int main(int argc, char** argv) {
  int failures = 0;
  {
    auto joined = ex::join_process_group();
    g_group = joined.get();
    int count = 0;
    const bool enough = cudaGetDeviceCount(&count) == cudaSuccess && joined->node_rank() < count;
    if (!joined->all_agree(enough)) {
      if (joined->rank() == 0) std::printf("fewer GPUs than processes on a node: skipped\n");
      return 77;
    }
    doctest::Context context(argc, argv);
    const int rc = context.run();
    failures = joined->all_agree(rc == 0) ? 0 : 1;  // one verdict for the job
    g_group = nullptr;
  }
  return failures;
}

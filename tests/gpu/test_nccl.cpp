// The nccl transport on one GPU (NCCL cannot place two ranks of one communicator on one GPU): NCCL's
// allreduce and point-to-point calls run for real on a communicator of one rank, through the
// transport's own handles, with the results read back and compared; and the transport itself in a job
// of one process. Exits 77 (skipped) where there is no GPU.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <fmt/format.h>

#include <cstdio>
#include <vector>

#include "nccl/nccl_handles.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/process_group.hpp"

namespace ex = pd2bw::executor;
using namespace pd2bw::executor::nccl;

namespace {

// Device memory freed on every path.
struct DeviceFloats {
  explicit DeviceFloats(size_t n) { cuda_check(cudaMalloc(&p, n * sizeof(float)), "cudaMalloc"); }
  ~DeviceFloats() { cudaFree(p); }
  DeviceFloats(const DeviceFloats&) = delete;
  DeviceFloats& operator=(const DeviceFloats&) = delete;
  float* p = nullptr;
};

}  // namespace

TEST_CASE("NCCL allreduce and a send/receive to itself on one GPU return the values sent") {
  cuda_check(cudaSetDevice(0), "cudaSetDevice");
  ncclUniqueId id{};
  nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
  CommHandle comm(1, id, 0);
  StreamHandle stream;
  constexpr size_t kN = 1027;  // not a multiple of any vector width
  std::vector<float> host(kN), back(kN, -1.0f);
  for (size_t i = 0; i < kN; ++i) host[i] = static_cast<float>(i) * 0.5f - 7.0f;
  DeviceFloats a(kN), b(kN);
  const cudaStream_t s = stream.get();
  cuda_check(cudaMemcpyAsync(a.p, host.data(), kN * sizeof(float), cudaMemcpyHostToDevice, s), "cudaMemcpyAsync");
  nccl_check(ncclAllReduce(a.p, a.p, kN, ncclFloat32, ncclSum, comm.get(), s), "ncclAllReduce");
  nccl_check(ncclGroupStart(), "ncclGroupStart");
  nccl_check(ncclSend(a.p, kN, ncclFloat32, 0, comm.get(), s), "ncclSend");
  nccl_check(ncclRecv(b.p, kN, ncclFloat32, 0, comm.get(), s), "ncclRecv");
  nccl_check(ncclGroupEnd(), "ncclGroupEnd");
  cuda_check(cudaMemcpyAsync(back.data(), b.p, kN * sizeof(float), cudaMemcpyDeviceToHost, s), "cudaMemcpyAsync");
  cuda_check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  for (size_t i = 0; i < kN; ++i) REQUIRE(back[i] == host[i]);  // a sum over one rank and a copy are exact
}

TEST_CASE("the nccl transport in a job of one process: device memory accepted, a bad GPU index refused") {
  auto group = ex::join_process_group();
  REQUIRE(group->size() == 1);
  int count = 0;
  cuda_check(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  CHECK_THROWS_WITH_AS(group->make_comm("nccl", count), doctest::Contains("GPU(s)"), pd2bw::UsageError);
  const auto comm = group->make_comm("nccl", 0);
  CHECK(comm->accepts(ex::MemoryKind::device));
  const ex::Group alone = comm->group({0});
  CHECK(alone.native() == nullptr);  // a group of one needs no communicator
  std::vector<float> v{1.5f};
  comm->allreduce_sum(alone, std::span<float>(v));
  CHECK(v[0] == 1.5f);
}

int main(int argc, char** argv) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::printf("no GPU: skipped\n");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}

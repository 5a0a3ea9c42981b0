// The nccl transport's one-GPU self check: NCCL's allreduce and point-to-point calls, run for real on
// a communicator of one rank, with the results read back and compared.
#include <fmt/format.h>

#include <vector>

#include "nccl_handles.hpp"
#include "nccl_transport.hpp"
#include "pd2bw/error.hpp"

namespace pd2bw::executor::nccl {

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

void self_check(int64_t device) {
  cuda_check(cudaSetDevice(static_cast<int>(device)), "cudaSetDevice");
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
  for (size_t i = 0; i < kN; ++i)
    if (back[i] != host[i])  // a sum over one rank and a copy are exact
      throw Error(fmt::format("NCCL self check: element {} came back as {}, expected {}", i, back[i], host[i]));
}

}  // namespace pd2bw::executor::nccl

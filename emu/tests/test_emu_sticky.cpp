// A kernel fault makes the emulated device fail for good, as a real one does: the finding is printed,
// and every later call returns the sticky cudaErrorLaunchFailure, which cudaGetLastError does not clear.
// (A binary of its own: the device stays failed until the process ends.)
#include <string>

#include "emu_test_util.hpp"

namespace {

// Lanes 16..31 return before lanes 0..15 shuffle with the whole warp: a finding.
void exited_lane_kernel(int* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

}  // namespace

TEST_CASE("a faulting kernel leaves the device failed with a sticky error") {
  int* out = nullptr;
  REQUIRE(cudaMalloc(&out, 32 * sizeof(int)) == cudaSuccess);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);
  REQUIRE(pd2bw_emu::launch<exited_lane_kernel>(1, 32, 0, s, out) == cudaSuccess);  // the launch itself is fine
  CHECK(cudaStreamSynchronize(s) == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);
  CHECK(cudaGetLastError() == cudaErrorLaunchFailure);  // sticky: not cleared by reading it
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 16) == cudaErrorLaunchFailure);
  int host[4] = {};
  CHECK(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost) == cudaErrorLaunchFailure);
  CHECK(pd2bw_emu::launch<exited_lane_kernel>(1, 32, 0, s, out) == cudaErrorLaunchFailure);
  const std::vector<std::string> found = pd2bw_emu::take_findings();
  REQUIRE(found.size() == 1);
  CHECK(found[0].find("exited_lane_kernel") != std::string::npos);
}

// The emulated device against the CUDA semantics it promises: every block and thread of a 3-D launch,
// barriers, warp shuffles and votes, the launch-configuration errors, streams and events, memory checks,
// bf16 rounding, and the findings (a missing __syncthreads() is caught as a race, a shuffle naming an
// exited lane, a deadlock). Kernels here are device code: compiled with the race detector's hooks.
#include <cuda_bf16.h>
#include <cstdlib>
#include <string>

#include "emu_test_util.hpp"

namespace {

// out[global linear id] = the id computed from the built-ins, + 1 (so a missed thread shows as 0).
void ids_kernel(int* out) {
  const unsigned bx = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  const unsigned tx = threadIdx.x + blockDim.x * (threadIdx.y + blockDim.y * threadIdx.z);
  const unsigned per_block = blockDim.x * blockDim.y * blockDim.z;
  out[bx * per_block + tx] += static_cast<int>(bx * per_block + tx) + 1;
}

// Block sum of x (256 threads) by a tree in shared memory; `barrier` false leaves out the barrier
// between the levels (the planted bug the race detector must catch).
template <bool barrier>
void block_sum_kernel(const float* x, float* out) {
  EMU_SHARED(float, s, 256);
  const unsigned t = threadIdx.x;
  s[t] = x[blockIdx.x * 256 + t];
  __syncthreads();
  for (unsigned half = 128; half > 0; half /= 2) {
    if (t < half) s[t] += s[t + half];
    if (barrier) __syncthreads();
  }
  if (t == 0) out[blockIdx.x] = s[0];
}

// Per lane: xor-16, down-1, up-3, idx-5 shuffles and a ballot of odd lanes.
void shuffle_kernel(int* out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int base = static_cast<int>(threadIdx.x) * 5;
  out[base + 0] = __shfl_xor_sync(0xffffffffu, lane, 16);
  out[base + 1] = __shfl_down_sync(0xffffffffu, lane, 1);
  out[base + 2] = __shfl_up_sync(0xffffffffu, lane, 3);
  out[base + 3] = __shfl_sync(0xffffffffu, lane * 10, 5, 16);
  out[base + 4] = static_cast<int>(__ballot_sync(0xffffffffu, lane % 2));
}

// Lanes 16..31 return before lanes 0..15 shuffle with the whole warp.
void exited_lane_kernel(int* out) {
  if (threadIdx.x >= 16) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1, 1);
}

// Lanes 0..15 wait at a shuffle that lanes 16..31 never join (they wait at a barrier): a deadlock.
void deadlock_kernel(int* out) {
  if (threadIdx.x < 16) {
    out[threadIdx.x] = __shfl_sync(0xffffffffu, 1, 0);
  } else {
    __syncthreads();
  }
}

void add_one_kernel(float* x, int n) {
  const int i = static_cast<int>(blockIdx.x * blockDim.x + threadIdx.x);
  if (i < n) x[i] += 1.0f;
}

}  // namespace

TEST_CASE("every block and thread of a 3-D launch runs once and sees its own built-ins") {
  const dim3 grid(3, 2, 2), block(5, 3, 2);
  const size_t n = 3 * 2 * 2 * 5 * 3 * 2;
  DeviceArray<int> out(n);
  REQUIRE(cudaMemset(out.p, 0, n * sizeof(int)) == cudaSuccess);
  REQUIRE(pd2bw_emu::launch<ids_kernel>(grid, block, 0, nullptr, out.p) == cudaSuccess);
  const std::vector<int> h = out.read();
  for (size_t i = 0; i < n; ++i) CHECK(h[i] == static_cast<int>(i) + 1);
}

TEST_CASE("a shared-memory tree sum with its barriers gives the same bits in every thread order") {
  std::vector<float> x(4 * 256);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>((i * 37) % 101) * 0.25f - 3.0f;
  DeviceArray<float> in(x.size()), out(4);
  in.write(x);
  std::vector<float> first;
  for (const char* order : {"forward", "reverse", "shuffle:7", "shuffle:8"}) {
    setenv("PD2BW_EMU_ORDER", order, 1);
    REQUIRE(pd2bw_emu::launch<block_sum_kernel<true>>(4, 256, 0, nullptr, in.p, out.p) == cudaSuccess);
    const std::vector<float> h = out.read();
    if (first.empty()) first = h;
    CHECK(h == first);
  }
  unsetenv("PD2BW_EMU_ORDER");
  double expect = 0;
  for (int i = 0; i < 256; ++i) expect += x[static_cast<size_t>(i)];
  CHECK(first[0] == doctest::Approx(expect).epsilon(1e-6));
  CHECK(pd2bw_emu::take_findings().empty());
}

TEST_CASE("the race detector catches a missing __syncthreads()") {
  if (!pd2bw_emu::race_detector_active()) {
    MESSAGE("this build has no load/store hooks (clang's cuda-emu preset has them): race check skipped");
    return;
  }
  std::vector<float> x(256, 1.0f);
  DeviceArray<float> in(256), out(1);
  in.write(x);
  pd2bw_emu::record_findings_only(true);
  REQUIRE(pd2bw_emu::launch<block_sum_kernel<false>>(1, 256, 0, nullptr, in.p, out.p) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const std::vector<std::string> found = pd2bw_emu::take_findings();
  pd2bw_emu::record_findings_only(false);
  for (const auto& f : found) MESSAGE(f);
  REQUIRE(found.size() == 1);
  CHECK(found[0].find("shared-memory race") != std::string::npos);
  CHECK(found[0].find("block_sum_kernel") != std::string::npos);
}

TEST_CASE("warp shuffles and votes return what the device's definitions say") {
  DeviceArray<int> out(64 * 5);
  REQUIRE(pd2bw_emu::launch<shuffle_kernel>(1, 64, 0, nullptr, out.p) == cudaSuccess);
  const std::vector<int> h = out.read();
  for (int t = 0; t < 64; ++t) {
    const int lane = t % 32, *r = &h[static_cast<size_t>(t) * 5];
    CHECK(r[0] == (lane ^ 16));
    CHECK(r[1] == (lane == 31 ? 31 : lane + 1));  // past the end: its own value
    CHECK(r[2] == (lane < 3 ? lane : lane - 3));
    CHECK(r[3] == ((lane & 16) + 5) * 10);  // lane 5 of its 16-lane segment
    CHECK(static_cast<unsigned>(r[4]) == 0xaaaaaaaau);
  }
}

TEST_CASE("a shuffle naming an exited lane and threads that never meet are findings") {
  DeviceArray<int> out(64);
  pd2bw_emu::record_findings_only(true);
  REQUIRE(pd2bw_emu::launch<exited_lane_kernel>(1, 32, 0, nullptr, out.p) == cudaSuccess);
  REQUIRE(pd2bw_emu::launch<deadlock_kernel>(1, 32, 0, nullptr, out.p) == cudaSuccess);
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  const std::vector<std::string> found = pd2bw_emu::take_findings();
  pd2bw_emu::record_findings_only(false);
  for (const auto& f : found) MESSAGE(f);
  REQUIRE(found.size() == 2);
  CHECK(found[0].find("exited_lane_kernel") != std::string::npos);
  CHECK(found[0].find("which has exited") != std::string::npos);
  CHECK(found[1].find("deadlock_kernel") != std::string::npos);
  CHECK(found[1].find("waits at __syncthreads()") != std::string::npos);
}

TEST_CASE("launch configurations the device refuses give its errors, which are not sticky") {
  DeviceArray<float> x(8);
  CHECK(pd2bw_emu::launch<add_one_kernel>(1, 1025, 0, nullptr, x.p, 8) == cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError() == cudaErrorInvalidConfiguration);
  CHECK(cudaGetLastError() == cudaSuccess);
  CHECK(pd2bw_emu::launch<add_one_kernel>(dim3(1, 65536), 32, 0, nullptr, x.p, 8) == cudaErrorInvalidConfiguration);
  CHECK(pd2bw_emu::launch<add_one_kernel>(dim3(0), 32, 0, nullptr, x.p, 8) == cudaErrorInvalidConfiguration);
  CHECK(pd2bw_emu::launch<add_one_kernel>(1, dim3(32, 1, 65), 0, nullptr, x.p, 8) == cudaErrorInvalidConfiguration);
  CHECK(pd2bw_emu::launch<add_one_kernel>(1, 32, (48 << 10) + 1, nullptr, x.p, 8) == cudaErrorInvalidValue);
  CHECK(cudaGetLastError() == cudaErrorInvalidValue);
  CHECK(pd2bw_emu::launch<add_one_kernel>(1, dim3(32, 32), 48 << 10, nullptr, x.p, 8) == cudaSuccess);
  CHECK(cudaDeviceSynchronize() == cudaSuccess);
}

TEST_CASE("streams run in order, an event orders two streams, and events time what lies between") {
  constexpr int n = 1000;
  DeviceArray<float> x(n);
  REQUIRE(cudaMemset(x.p, 0, n * sizeof(float)) == cudaSuccess);
  cudaStream_t a = nullptr, b = nullptr;
  cudaEvent_t start = nullptr, done = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking) == cudaSuccess);
  REQUIRE(cudaEventCreate(&start) == cudaSuccess);
  REQUIRE(cudaEventCreate(&done) == cudaSuccess);
  REQUIRE(cudaEventRecord(start, a) == cudaSuccess);
  for (int k = 0; k < 5; ++k) REQUIRE(pd2bw_emu::launch<add_one_kernel>(4, 256, 0, a, x.p, n) == cudaSuccess);
  REQUIRE(cudaEventRecord(done, a) == cudaSuccess);
  REQUIRE(cudaStreamWaitEvent(b, done, 0) == cudaSuccess);
  REQUIRE(pd2bw_emu::launch<add_one_kernel>(4, 256, 0, b, x.p, n) == cudaSuccess);
  std::vector<float> h(n);
  REQUIRE(cudaMemcpyAsync(h.data(), x.p, n * sizeof(float), cudaMemcpyDeviceToHost, b) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(b) == cudaSuccess);
  for (float v : h) CHECK(v == 6.0f);
  float ms = -1;
  CHECK(cudaEventElapsedTime(&ms, start, done) == cudaSuccess);
  CHECK(ms >= 0.0f);
  CHECK(cudaEventQuery(done) == cudaSuccess);
  cudaEvent_t untimed = nullptr;
  REQUIRE(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming) == cudaSuccess);
  REQUIRE(cudaEventRecord(untimed, a) == cudaSuccess);
  REQUIRE(cudaEventSynchronize(untimed) == cudaSuccess);
  CHECK(cudaEventElapsedTime(&ms, start, untimed) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
  for (cudaEvent_t e : {start, done, untimed}) CHECK(cudaEventDestroy(e) == cudaSuccess);
  CHECK(cudaStreamDestroy(a) == cudaSuccess);
  CHECK(cudaStreamDestroy(b) == cudaSuccess);
  CHECK(cudaStreamSynchronize(a) == cudaErrorInvalidResourceHandle);
  (void)cudaGetLastError();
}

TEST_CASE("memory calls check their pointers as the device does") {
  void* p = nullptr;
  CHECK(cudaMalloc(&p, 0) == cudaSuccess);
  CHECK(p == nullptr);
  int host[8] = {};
  CHECK(cudaFree(host) == cudaErrorInvalidDevicePointer);
  DeviceArray<int> d(4);
  CHECK(cudaMemcpy(host, d.p, 16, cudaMemcpyDeviceToHost) == cudaSuccess);  // d holds 16 bytes
  CHECK(cudaMemcpy(host, d.p, 17, cudaMemcpyDeviceToHost) == cudaErrorInvalidValue);
  CHECK(cudaMemcpy(host, host + 4, 4, cudaMemcpyHostToDevice) == cudaErrorInvalidValue);
  CHECK(cudaMemset(host, 0, 4) == cudaErrorInvalidValue);
  (void)cudaGetLastError();
  size_t free_bytes = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total) == cudaSuccess);
  CHECK(total - free_bytes >= 16);
  CHECK(cudaMalloc(&p, total) == cudaErrorMemoryAllocation);
  CHECK(cudaGetLastError() == cudaErrorMemoryAllocation);
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  CHECK(std::string(prop.name).find("H200") != std::string::npos);
  CHECK(prop.major == 9);
  CHECK(prop.multiProcessorCount == 132);
}

TEST_CASE("bf16 conversions round to nearest even, once") {
  auto bits = [](__nv_bfloat16 b) { return static_cast<unsigned>(b.__x); };
  CHECK(bits(__float2bfloat16_rn(1.0f)) == 0x3f80u);
  CHECK(bits(__float2bfloat16_rn(1.0f + 0x1p-8f)) == 0x3f80u);             // a tie: to even (down)
  CHECK(bits(__float2bfloat16_rn(1.0f + 3 * 0x1p-8f)) == 0x3f82u);         // a tie: to even (up)
  CHECK(bits(__float2bfloat16_rn(1.0f + 0x1p-8f + 0x1p-20f)) == 0x3f81u);  // above the tie
  CHECK(bits(__float2bfloat16_rn(std::nanf(""))) == 0x7fffu);
  CHECK(bits(__float2bfloat16_rn(3.4e38f)) == 0x7f80u);  // rounds past the largest: inf
  // 1 + 2^-8 + 2^-30 is above the tie; through float it would land on the tie and go down to 1.
  CHECK(bits(__double2bfloat16(1.0 + 0x1p-8 + 0x1p-30)) == 0x3f81u);
  CHECK(bits(__double2bfloat16(-(1.0 + 0x1p-8 + 0x1p-30))) == 0xbf81u);
  CHECK(bits(__double2bfloat16(1.0 + 0x1p-8)) == 0x3f80u);
  CHECK(bits(__double2bfloat16(1e300)) == 0x7f80u);
  CHECK(__bfloat162float(__float2bfloat16_rn(-2.5f)) == -2.5f);
}

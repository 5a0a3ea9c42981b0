// What kernel code sees on the emulated device: the built-in variables (threadIdx, blockIdx, blockDim,
// gridDim, warpSize), __syncthreads, warp shuffles and votes, atomics, __ldg and the device math
// intrinsics, and the launch and shared-memory seams. Included by cuda_runtime.h; not for direct use.
//
// A kernel launch runs every block of the grid in turn on the stream's worker thread; within a block
// every thread is a fiber that runs until it reaches __syncthreads(), a warp shuffle or vote (each a
// rendezvous of the lanes it names) or the end of the kernel. The order in which a block's threads run
// between two such points is chosen per launch (PD2BW_EMU_ORDER: forward, reverse, shuffle or
// shuffle:SEED), so code that depends on one order shows it; the race detector (race.hpp) flags a
// shared-memory access that conflicts with another thread's since the last barrier.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <tuple>
#include <type_traits>
#include <utility>

namespace pd2bw_emu {

// The running GPU thread of the calling fiber.
struct GpuThread {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
extern thread_local GpuThread* tls_current_thread;
[[noreturn]] void outside_kernel(const char* what);
inline const GpuThread& current_thread(const char* what) {
  if (tls_current_thread == nullptr) outside_kernel(what);
  return *tls_current_thread;
}

// __syncthreads: every live thread of the block arrives before any leaves (threads that returned count
// as arrived, as on the device).
void syncthreads();

// One warp rendezvous: every lane in `mask` (which must include the caller) deposits `value`; returns
// the value of lane `source_of(lane)` (kind: 0 idx, 1 up, 2 down, 3 xor; arg the lane/delta/mask; lanes
// in groups of `width`), or for votes (kind 4) the ballot of the lanes' nonzero values.
uint64_t warp_rendezvous(unsigned mask, uint64_t value, int kind, int arg, int width);

// Static __shared__ memory of the running block: the array declared at `site` (one per declaration),
// `bytes` long, allocated on first use in each block and freed at the block's end.
void* shared_array(const void* site, size_t bytes, size_t align);
// The block's dynamic shared memory (the launch's shared_bytes).
void* dynamic_shared();

// ---- launching ----------------------------------------------------------------------------------------
struct LaunchConfig {
  dim3 grid, block;
  size_t shared_bytes = 0;
  cudaStream_t stream = nullptr;
  const char* kernel = "";  // the kernel's name, for reports
};
// Checks the configuration as the device does (an error is returned and left for cudaGetLastError),
// then queues the kernel on the stream: `body` runs once per GPU thread.
cudaError_t launch_erased(const LaunchConfig& config, std::function<void()> body);

template <auto Kernel>
const char* kernel_name() {
  return __PRETTY_FUNCTION__;  // names Kernel with its template arguments
}

template <auto Kernel, typename... P, typename... A>
cudaError_t launch_kernel(void (*)(P...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, A&&... args) {
  static_assert(sizeof...(P) == sizeof...(A), "a kernel launch with the wrong number of arguments");
  auto params = std::make_shared<std::tuple<std::decay_t<P>...>>(std::forward<A>(args)...);
  return launch_erased({grid, block, shared_bytes, stream, kernel_name<Kernel>()},
                       [params] { std::apply(Kernel, *params); });
}

// Kernel<<<grid, block, shared_bytes, stream>>>(args...): the arguments are converted to the kernel's
// parameter types and copied at launch, as the device does.
template <auto Kernel, typename... A>
cudaError_t launch(dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream, A&&... args) {
  return launch_kernel<Kernel>(Kernel, grid, block, shared_bytes, stream, std::forward<A>(args)...);
}

template <typename T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffles move at most 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof v);
  return bits;
}
template <typename T>
T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof v);
  return v;
}

}  // namespace pd2bw_emu

// ---- built-in variables -------------------------------------------------------------------------------
#define threadIdx (::pd2bw_emu::current_thread("threadIdx").thread_idx)
#define blockIdx (::pd2bw_emu::current_thread("blockIdx").block_idx)
#define blockDim (::pd2bw_emu::current_thread("blockDim").block_dim)
#define gridDim (::pd2bw_emu::current_thread("gridDim").grid_dim)
inline constexpr int warpSize = 32;

inline void __syncthreads() { ::pd2bw_emu::syncthreads(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { (void)::pd2bw_emu::warp_rendezvous(mask, 0, 4, 0, 32); }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

// ---- warp shuffles and votes --------------------------------------------------------------------------
template <typename T>
T __shfl_sync(unsigned mask, T var, int src_lane, int width = 32) {
  return ::pd2bw_emu::from_bits<T>(::pd2bw_emu::warp_rendezvous(mask, ::pd2bw_emu::to_bits(var), 0, src_lane, width));
}
template <typename T>
T __shfl_up_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return ::pd2bw_emu::from_bits<T>(
      ::pd2bw_emu::warp_rendezvous(mask, ::pd2bw_emu::to_bits(var), 1, static_cast<int>(delta), width));
}
template <typename T>
T __shfl_down_sync(unsigned mask, T var, unsigned delta, int width = 32) {
  return ::pd2bw_emu::from_bits<T>(
      ::pd2bw_emu::warp_rendezvous(mask, ::pd2bw_emu::to_bits(var), 2, static_cast<int>(delta), width));
}
template <typename T>
T __shfl_xor_sync(unsigned mask, T var, int lane_mask, int width = 32) {
  return ::pd2bw_emu::from_bits<T>(::pd2bw_emu::warp_rendezvous(mask, ::pd2bw_emu::to_bits(var), 3, lane_mask, width));
}
inline unsigned __ballot_sync(unsigned mask, int predicate) {
  return static_cast<unsigned>(::pd2bw_emu::warp_rendezvous(mask, predicate != 0, 4, 0, 32));
}
inline int __any_sync(unsigned mask, int predicate) { return __ballot_sync(mask, predicate) != 0; }
inline int __all_sync(unsigned mask, int predicate) { return (__ballot_sync(mask, predicate) & mask) == mask; }

// ---- atomics (device-wide: blocks of other streams run on other host threads) ----------------------
template <typename T>
T __pd2bw_emu_atomic_update(T* address, T (*op)(T, T), T value) {
  std::atomic_ref<T> ref(*address);
  T old = ref.load();
  while (!ref.compare_exchange_weak(old, op(old, value))) {
  }
  return old;
}
template <typename T>
T atomicAdd(T* address, T value) {
  return __pd2bw_emu_atomic_update<T>(address, [](T a, T b) { return static_cast<T>(a + b); }, value);
}
template <typename T>
T atomicMin(T* address, T value) {
  return __pd2bw_emu_atomic_update<T>(address, [](T a, T b) { return b < a ? b : a; }, value);
}
template <typename T>
T atomicMax(T* address, T value) {
  return __pd2bw_emu_atomic_update<T>(address, [](T a, T b) { return a < b ? b : a; }, value);
}
template <typename T>
T atomicExch(T* address, T value) {
  return std::atomic_ref<T>(*address).exchange(value);
}
template <typename T>
T atomicCAS(T* address, T compare, T value) {
  std::atomic_ref<T>(*address).compare_exchange_strong(compare, value);
  return compare;
}

// ---- loads and math intrinsics (IEEE, round to nearest even, as the device's _rn forms) -------------
template <typename T>
T __ldg(const T* p) {
  return *p;
}
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
inline double __ddiv_rn(double a, double b) { return a / b; }
inline double __dsqrt_rn(double a) { return std::sqrt(a); }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __fsqrt_rn(float a) { return std::sqrt(a); }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float rsqrtf(float a) { return 1.0f / std::sqrt(a); }
inline float __expf(float a) { return std::exp(a); }
inline float __logf(float a) { return std::log(a); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float a) { return a < 0.0f ? 0.0f : (a > 1.0f ? 1.0f : a); }
// The device's integer min/max overloads.
inline int min(int a, int b) { return b < a ? b : a; }
inline int max(int a, int b) { return a < b ? b : a; }
inline unsigned min(unsigned a, unsigned b) { return b < a ? b : a; }
inline unsigned max(unsigned a, unsigned b) { return a < b ? b : a; }
inline long long min(long long a, long long b) { return b < a ? b : a; }
inline long long max(long long a, long long b) { return a < b ? b : a; }
inline long min(long a, long b) { return b < a ? b : a; }
inline long max(long a, long b) { return a < b ? b : a; }

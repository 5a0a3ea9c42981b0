// The emulated device's runtime API: errors, the device and its properties (an H200's), memory and
// copies. Streams and events are in runtime_streams.cpp, kernel launch in launch.cpp.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "runtime_state.hpp"

namespace pd2bw_emu {
namespace {

thread_local cudaError_t tls_last_error = cudaSuccess;
thread_local int tls_device = 0;

// CUDA_VISIBLE_DEVICES="" hides every device, as on a real machine; else PD2BW_EMU_DEVICES (default 8,
// one node's worth) devices, all of them views of this one emulated device.
int visible_devices() {
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  if (visible != nullptr && *visible == '\0') return 0;
  const char* n = std::getenv("PD2BW_EMU_DEVICES");
  return n != nullptr ? std::atoi(n) : 8;
}

// [p, p + bytes) inside one entry of `table`.
bool inside(const std::map<uintptr_t, size_t>& table, const void* p, size_t bytes) {
  const auto a = reinterpret_cast<uintptr_t>(p);
  auto it = table.upper_bound(a);
  if (it == table.begin()) return false;
  --it;
  return a >= it->first && a - it->first <= it->second && bytes <= it->second - (a - it->first);
}

}  // namespace

size_t device_memory_bytes() {
  const char* cap = std::getenv("PD2BW_EMU_MEMORY");
  const size_t h200 = size_t{143771} << 20;  // 143,771 MiB, as nvidia-smi reports an H200
  return cap != nullptr ? std::strtoull(cap, nullptr, 10) : h200;
}

cudaError_t set_last_error(cudaError_t error) {
  if (error != cudaSuccess) tls_last_error = error;
  return error;
}

cudaError_t sticky_error() {
  std::lock_guard lock(device().mu);
  return device().sticky;
}

void fail(cudaError_t error, const std::string& message) {
  Device& d = device();
  std::lock_guard lock(d.mu);
  if (d.sticky == cudaSuccess) {
    d.sticky = error;
    std::fprintf(stderr, "pd2bw-emu: %s (%s: the device is now unusable, as after a kernel fault)\n", message.c_str(),
                 cudaGetErrorName(error));
    std::fflush(stderr);
  }
  d.changed.notify_all();
}

bool device_accessible(const void* p, size_t bytes) {
  Device& d = device();
  std::lock_guard lock(d.mu);
  return inside(d.allocations, p, bytes) || inside(d.pinned, p, bytes);
}

}  // namespace pd2bw_emu

using pd2bw_emu::Device;
using pd2bw_emu::device;
using pd2bw_emu::set_last_error;

// ---- errors -------------------------------------------------------------------------------------------
cudaError_t cudaGetLastError() {
  const cudaError_t sticky = pd2bw_emu::sticky_error();
  const cudaError_t last = pd2bw_emu::tls_last_error;
  pd2bw_emu::tls_last_error = cudaSuccess;
  return sticky != cudaSuccess ? sticky : last;
}
cudaError_t cudaPeekAtLastError() {
  const cudaError_t sticky = pd2bw_emu::sticky_error();
  return sticky != cudaSuccess ? sticky : pd2bw_emu::tls_last_error;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInitializationError: return "cudaErrorInitializationError";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer: return "cudaErrorInvalidDevicePointer";
    case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

const char* cudaGetErrorString(cudaError_t error) {
  switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInitializationError: return "initialization error";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevicePointer: return "invalid device pointer";
    case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorLaunchOutOfResources: return "too many resources requested for launch";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
  }
  return "unknown error";
}

// ---- the device ---------------------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return set_last_error(cudaErrorInvalidValue);
  *count = pd2bw_emu::visible_devices();
  return *count > 0 ? cudaSuccess : set_last_error(cudaErrorNoDevice);
}

cudaError_t cudaSetDevice(int index) {
  const int n = pd2bw_emu::visible_devices();
  if (n == 0) return set_last_error(cudaErrorNoDevice);
  if (index < 0 || index >= n) return set_last_error(cudaErrorInvalidDevice);
  pd2bw_emu::tls_device = index;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* index) {
  if (index == nullptr) return set_last_error(cudaErrorInvalidValue);
  if (pd2bw_emu::visible_devices() == 0) return set_last_error(cudaErrorNoDevice);
  *index = pd2bw_emu::tls_device;
  return cudaSuccess;
}

// An H200 SXM's properties (Hopper, sm_90, 132 SMs), with "(emulated)" in the name.
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int index) {
  if (prop == nullptr) return set_last_error(cudaErrorInvalidValue);
  if (index < 0 || index >= pd2bw_emu::visible_devices()) return set_last_error(cudaErrorInvalidDevice);
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "%s", "NVIDIA H200 (emulated)");
  prop->totalGlobalMem = pd2bw_emu::device_memory_bytes();
  prop->sharedMemPerBlock = 48 << 10;
  prop->sharedMemPerBlockOptin = 227 << 10;
  prop->regsPerBlock = 65536;
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->maxThreadsDim[0] = 1024, prop->maxThreadsDim[1] = 1024, prop->maxThreadsDim[2] = 64;
  prop->maxGridSize[0] = 0x7fffffff, prop->maxGridSize[1] = 65535, prop->maxGridSize[2] = 65535;
  prop->clockRate = 1980000;
  prop->totalConstMem = 65536;
  prop->major = 9, prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->memoryBusWidth = 6144;
  prop->l2CacheSize = 50 << 20;
  prop->maxThreadsPerMultiProcessor = 2048;
  return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return set_last_error(cudaErrorInvalidValue);
  *version = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaRuntimeGetVersion(int* version) { return cudaDriverGetVersion(version); }

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return set_last_error(cudaErrorInvalidValue);
  Device& d = device();
  std::lock_guard lock(d.mu);
  *total_bytes = pd2bw_emu::device_memory_bytes();
  *free_bytes = *total_bytes - d.allocated;
  return cudaSuccess;
}

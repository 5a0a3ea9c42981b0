// Memory of the emulated device: device allocations are host memory from posix_memalign (256-byte
// aligned like cudaMalloc's, exactly the size asked for so AddressSanitizer flags the first byte past
// the end), recorded so copies and kernels' pointers can be checked; pinned host memory is mapped (its
// device pointer is its host pointer, as with unified addressing). Copies and memsets queue on streams.
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "runtime_state.hpp"

using pd2bw_emu::Device;
using pd2bw_emu::device;
using pd2bw_emu::set_last_error;

namespace {

// The host's physical memory: a request beyond it fails as the device's would, before malloc is asked.
size_t host_memory() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  return pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : SIZE_MAX;
}

cudaError_t allocate(void** ptr, size_t bytes, bool pinned) {
  if (ptr == nullptr) return set_last_error(cudaErrorInvalidValue);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  Device& d = device();
  if (const cudaError_t sticky = pd2bw_emu::sticky_error(); sticky != cudaSuccess) return set_last_error(sticky);
  {
    std::lock_guard lock(d.mu);
    if (!pinned && (bytes > pd2bw_emu::device_memory_bytes() - d.allocated || bytes > host_memory() / 2))
      return set_last_error(cudaErrorMemoryAllocation);
  }
  void* p = nullptr;
  if (posix_memalign(&p, 256, bytes) != 0) return set_last_error(cudaErrorMemoryAllocation);
  std::lock_guard lock(d.mu);
  (pinned ? d.pinned : d.allocations)[reinterpret_cast<uintptr_t>(p)] = bytes;
  if (!pinned) d.allocated += bytes;
  *ptr = p;
  return cudaSuccess;
}

// Frees a whole allocation of `table` (a pointer inside one, or unknown, is an error).
cudaError_t release(std::map<uintptr_t, size_t>& table, void* ptr, bool device_memory) {
  if (ptr == nullptr) return cudaSuccess;
  Device& d = device();
  {
    std::lock_guard lock(d.mu);
    const auto it = table.find(reinterpret_cast<uintptr_t>(ptr));
    if (it == table.end()) return set_last_error(device_memory ? cudaErrorInvalidDevicePointer : cudaErrorInvalidValue);
    if (device_memory) d.allocated -= it->second;
    table.erase(it);
  }
  std::free(ptr);
  return cudaSuccess;
}

bool is_host_kind(cudaMemcpyKind kind, bool source) {
  if (kind == cudaMemcpyHostToHost) return true;
  return source ? kind == cudaMemcpyHostToDevice : kind == cudaMemcpyDeviceToHost;
}

// A copy's device side must lie in device-accessible memory, as the device would fault otherwise.
cudaError_t check_copy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (kind < cudaMemcpyHostToHost || kind > cudaMemcpyDefault) return set_last_error(cudaErrorInvalidMemcpyDirection);
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return set_last_error(cudaErrorInvalidValue);
  if (kind == cudaMemcpyDefault) return cudaSuccess;  // unified addressing: any pointer
  if (!is_host_kind(kind, true) && !pd2bw_emu::device_accessible(src, bytes)) return set_last_error(cudaErrorInvalidValue);
  if (!is_host_kind(kind, false) && !pd2bw_emu::device_accessible(dst, bytes)) return set_last_error(cudaErrorInvalidValue);
  return cudaSuccess;
}

}  // namespace

cudaError_t cudaMalloc(void** ptr, size_t bytes) { return allocate(ptr, bytes, false); }
cudaError_t cudaFree(void* ptr) {
  // cudaFree waits for the device: work queued earlier may still use the memory.
  if (ptr != nullptr) (void)cudaDeviceSynchronize();
  return release(device().allocations, ptr, true);
}

cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream) {
  (void)stream;  // stream-ordered allocation: memory that exists at once is valid for the stream's later work
  return allocate(ptr, bytes, false);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  if (ptr == nullptr) return cudaSuccess;
  {
    Device& d = device();
    std::lock_guard lock(d.mu);
    if (d.allocations.count(reinterpret_cast<uintptr_t>(ptr)) == 0) return set_last_error(cudaErrorInvalidDevicePointer);
  }
  return pd2bw_emu::enqueue(stream, [ptr] { return release(device().allocations, ptr, true); });
}

cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  if (flags > (cudaHostAllocPortable | cudaHostAllocMapped)) return set_last_error(cudaErrorInvalidValue);
  return allocate(ptr, bytes, true);
}
cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return allocate(ptr, bytes, true); }
cudaError_t cudaFreeHost(void* ptr) {
  if (ptr != nullptr) (void)cudaDeviceSynchronize();
  return release(device().pinned, ptr, false);
}

cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned flags) {
  if (device_ptr == nullptr || flags != 0 || !pd2bw_emu::device_accessible(host_ptr, 1))
    return set_last_error(cudaErrorInvalidValue);
  *device_ptr = host_ptr;
  return cudaSuccess;
}

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (attributes == nullptr) return set_last_error(cudaErrorInvalidValue);
  *attributes = cudaPointerAttributes{};
  Device& d = device();
  std::lock_guard lock(d.mu);
  auto in = [&](const std::map<uintptr_t, size_t>& table) {
    const auto a = reinterpret_cast<uintptr_t>(ptr);
    auto it = table.upper_bound(a);
    return it != table.begin() && a - std::prev(it)->first < std::prev(it)->second;
  };
  if (in(d.allocations)) {
    attributes->type = cudaMemoryTypeDevice;
    attributes->devicePointer = const_cast<void*>(ptr);
  } else if (in(d.pinned)) {
    attributes->type = cudaMemoryTypeHost;
    attributes->devicePointer = attributes->hostPointer = const_cast<void*>(ptr);
  } else {
    attributes->type = cudaMemoryTypeUnregistered;
    attributes->hostPointer = const_cast<void*>(ptr);
  }
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t rc = check_copy(dst, src, bytes, kind); rc != cudaSuccess) return rc;
  if (bytes == 0) return cudaSuccess;
  const cudaError_t rc = pd2bw_emu::enqueue(stream, [dst, src, bytes] {
    std::memmove(dst, src, bytes);
    return cudaSuccess;
  });
  if (rc != cudaSuccess) return rc;
  // With pageable host memory on either side the call returns only once the copy is done (CUDA's rule
  // for device-to-pageable copies; for pageable-to-device it returns once the source was read).
  const bool pageable = !pd2bw_emu::device_accessible(dst, bytes) || !pd2bw_emu::device_accessible(src, bytes);
  return pageable ? cudaStreamSynchronize(stream) : cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t rc = cudaMemcpyAsync(dst, src, bytes, kind, nullptr); rc != cudaSuccess) return rc;
  return cudaStreamSynchronize(nullptr);
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (bytes == 0) return cudaSuccess;
  if (!pd2bw_emu::device_accessible(ptr, bytes)) return set_last_error(cudaErrorInvalidValue);
  return pd2bw_emu::enqueue(stream, [ptr, value, bytes] {
    std::memset(ptr, value, bytes);
    return cudaSuccess;
  });
}

cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (const cudaError_t rc = cudaMemsetAsync(ptr, value, bytes, nullptr); rc != cudaSuccess) return rc;
  return cudaStreamSynchronize(nullptr);
}

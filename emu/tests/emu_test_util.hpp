// Helpers of the emulated device's own tests: a shared array declared as the cuda backend's seam does
// (executor/src/cuda/cuda_api.hpp), and device buffers freed on every path.
#pragma once

#include <cuda_runtime.h>
#include <doctest/doctest.h>

#include <vector>

#include "pd2bw_emu/checks.hpp"

#define EMU_SHARED(T, name, n)         \
  static const char name##_site = 0; \
  T(&name)[n] = *static_cast<T(*)[n]>(::pd2bw_emu::shared_array(&name##_site, sizeof(T[n]), alignof(T)))

template <typename T>
struct DeviceArray {
  explicit DeviceArray(size_t n) : size(n) { REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess); }
  ~DeviceArray() { (void)cudaFree(p); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  std::vector<T> read() const {
    std::vector<T> h(size);
    REQUIRE(cudaMemcpy(h.data(), p, size * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
    return h;
  }
  void write(const std::vector<T>& h) {
    REQUIRE(cudaMemcpy(p, h.data(), size * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  T* p = nullptr;
  size_t size = 0;
};

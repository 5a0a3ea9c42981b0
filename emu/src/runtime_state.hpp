// The emulated device's shared state: the error state, the allocation table and the streams with their
// worker threads. Private to emu/src.
#pragma once

#include <cuda_runtime.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pd2bw_emu/stream.hpp"

struct CUstream_st {
  unsigned flags = 0;
  std::deque<std::function<void()>> queue;  // guarded by the device mutex
  uint64_t submitted = 0, completed = 0;    // tasks queued / finished
  bool stopping = false;
  std::thread worker;
};

// An event's state lives apart from its handle: work queued on a stream that records or waits for it
// holds the state, so the handle may be destroyed at once, as CUDA allows.
struct EventState {
  unsigned flags = 0;
  uint64_t recorded = 0, completed = 0;  // generations: records asked for / records the stream reached
  std::chrono::steady_clock::time_point when{};
};
struct CUevent_st {
  std::shared_ptr<EventState> state = std::make_shared<EventState>();
};

namespace pd2bw_emu {

// One mutex for the device's bookkeeping and one condition variable that every change notifies.
struct Device {
  std::mutex mu;
  std::condition_variable changed;
  cudaError_t sticky = cudaSuccess;
  std::map<uintptr_t, size_t> allocations;   // cudaMalloc: start -> bytes
  std::map<uintptr_t, size_t> pinned;        // cudaHostAlloc / cudaMallocHost
  size_t allocated = 0;
  std::vector<CUstream_st*> streams;         // every live stream but the legacy one
  std::vector<CUstream_st*> retired;         // destroyed streams (kept: see cudaStreamDestroy)
  CUstream_st legacy;                        // stream 0
};
Device& device();

// The emulated device's size: an H200's memory unless PD2BW_EMU_MEMORY (bytes) says less.
size_t device_memory_bytes();

}  // namespace pd2bw_emu

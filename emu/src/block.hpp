// One block of a kernel launch on the emulated device: its GPU threads, each run as a fiber by the
// block's scheduler (launch.cpp), its shared memory and the race detector's record of it (race.cpp).
// Private to emu/src.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace pd2bw_emu {

enum class ThreadState { unstarted, running, ready, at_barrier, at_warp, done };

struct Fiber;

// A pending warp shuffle or vote of one lane.
struct WarpCall {
  unsigned mask = 0;
  uint64_t value = 0, result = 0;
  int kind = 0, arg = 0, width = 32;
};

struct ThreadRecord {
  GpuThread pub{};
  int linear = 0;
  ThreadState state = ThreadState::unstarted;
  Fiber* fiber = nullptr;
  WarpCall warp;
};

// The race detector's record of one byte of shared memory in the current barrier interval (epoch).
struct ByteRecord {
  int32_t writer = -1;  // linear thread index of the last write
  uint32_t write_epoch = 0;
  int32_t reader = -1;  // of the reads this epoch: the reader, or -2 for several
  uint32_t read_epoch = 0;
};

struct SharedArray {
  const void* site = nullptr;  // the declaration (null: dynamic shared memory)
  char* data = nullptr;
  size_t bytes = 0;
  std::vector<ByteRecord> record;
};

struct Block {
  const LaunchConfig* config = nullptr;
  const std::function<void()>* body = nullptr;
  std::vector<ThreadRecord> threads;
  std::vector<int> order;     // the order threads are started and resumed in this interval
  size_t next_start = 0;      // position in `order` of the next thread to start
  uint32_t epoch = 1;         // barrier intervals so far
  std::vector<SharedArray> shared;
  size_t static_shared_bytes = 0;
  std::string fault;          // the first finding, if any
  std::mt19937_64* rng = nullptr;

  ThreadRecord* take_unstarted();
  void add_finding(const std::string& what);
  std::string thread_name(int linear) const;
};

// The block the calling host thread is running (null outside a kernel).
extern thread_local Block* tls_block;

// The running thread's record (aborts outside a kernel).
ThreadRecord& running_thread(const char* what);
// Hands the running thread's fiber back to the block's scheduler until the scheduler resumes it (its
// state says what it waits for).
void suspend(ThreadRecord& t);

// The race detector's checks of one access by the running thread (race.cpp).
void check_access(const void* address, size_t bytes, bool store);
// Whether a finding fails the launch (see checks.hpp).
bool fail_on_findings();
// Releases the block's shared memory.
void free_shared(Block& block);

}  // namespace pd2bw_emu

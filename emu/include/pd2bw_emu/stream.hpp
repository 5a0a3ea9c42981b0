// The emulated device's stream machinery, for the emulated libraries (cuBLASLt/cuBLAS in blas.cpp,
// NCCL in nccl.cpp) that queue work of their own on a stream. Private to emu/.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <functional>
#include <string>

namespace pd2bw_emu {

// Queues `task` on `stream` after the work queued there before (and, for the legacy default stream 0,
// after all earlier work of the blocking streams; work on a blocking stream also waits for earlier work
// on stream 0), as the device orders a kernel. `task` runs on the stream's worker thread; it returns
// cudaSuccess or the error that makes the device fail (sticky; see fail()). Returns cudaSuccess, the
// sticky error if there is one, or cudaErrorInvalidResourceHandle for a destroyed stream.
cudaError_t enqueue(cudaStream_t stream, std::function<cudaError_t()> task);

// Whether every byte of [p, p + bytes) is memory a kernel may touch: one cudaMalloc allocation, or one
// mapped pinned host allocation.
bool device_accessible(const void* p, size_t bytes);

// Makes the device fail with a sticky `error` (as a faulting kernel does): `message` is printed once
// ("pd2bw-emu: <message>") and every later runtime call returns the error.
void fail(cudaError_t error, const std::string& message);

// The sticky error (cudaSuccess while the device is healthy).
cudaError_t sticky_error();

// Remembers `error` for cudaGetLastError/cudaPeekAtLastError and returns it.
cudaError_t set_last_error(cudaError_t error);

}  // namespace pd2bw_emu

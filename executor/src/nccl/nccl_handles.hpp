// Move-only owners of the CUDA and NCCL objects the nccl transport uses, and the checks that turn
// their error codes into pd2bw errors (private to the transport).
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <utility>

namespace pd2bw::executor::nccl {

// Throw Error("<what> failed: <CUDA's / NCCL's message>") when the call did not succeed.
void cuda_check(cudaError_t rc, const char* what);
void nccl_check(ncclResult_t rc, const char* what);

// A non-blocking stream of this transport's (never the legacy default stream).
class StreamHandle {
 public:
  StreamHandle();
  ~StreamHandle();
  StreamHandle(StreamHandle&& o) noexcept : s_(std::exchange(o.s_, nullptr)) {}
  StreamHandle& operator=(StreamHandle&&) = delete;
  StreamHandle(const StreamHandle&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// One NCCL communicator, destroyed with the handle (or aborted first, see abort()).
class CommHandle {
 public:
  CommHandle() = default;
  CommHandle(int ranks, const ncclUniqueId& id, int rank);
  ~CommHandle();
  CommHandle(CommHandle&& o) noexcept : c_(std::exchange(o.c_, nullptr)) {}
  CommHandle& operator=(CommHandle&& o) noexcept {
    std::swap(c_, o.c_);
    return *this;
  }
  CommHandle(const CommHandle&) = delete;
  ncclComm_t get() const { return c_; }
  // Ends the communicator at once (ncclCommAbort), for a job that failed: its peers may be gone.
  void abort();

 private:
  ncclComm_t c_ = nullptr;
};

// Makes `waiter` wait for the work enqueued on `signaller` so far (an event recorded and waited on).
void order_after(cudaStream_t waiter, cudaStream_t signaller);

}  // namespace pd2bw::executor::nccl

// The CUDA and NCCL handles of the nccl transport.
#include "nccl_handles.hpp"

#include <fmt/format.h>

#include "pd2bw/error.hpp"

namespace pd2bw::executor::nccl {

void cuda_check(cudaError_t rc, const char* what) {
  if (rc != cudaSuccess) throw Error(fmt::format("{} failed: {}", what, cudaGetErrorString(rc)));
}

void nccl_check(ncclResult_t rc, const char* what) {
  if (rc != ncclSuccess && rc != ncclInProgress)
    throw Error(fmt::format("{} failed: {}", what, ncclGetErrorString(rc)),
                "NCCL_DEBUG=WARN (or INFO) in the environment makes NCCL say more");
}

StreamHandle::StreamHandle() { cuda_check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate"); }

StreamHandle::~StreamHandle() {
  if (s_ != nullptr) cudaStreamDestroy(s_);
}

CommHandle::CommHandle(int ranks, const ncclUniqueId& id, int rank) {
  nccl_check(ncclCommInitRank(&c_, ranks, id, rank), "ncclCommInitRank");
}

CommHandle::~CommHandle() {
  if (c_ != nullptr) ncclCommDestroy(c_);
}

void CommHandle::abort() {
  if (c_ != nullptr) ncclCommAbort(c_);
  c_ = nullptr;
}

void order_after(cudaStream_t waiter, cudaStream_t signaller) {
  if (waiter == signaller) return;
  cudaEvent_t e = nullptr;
  cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  const cudaError_t recorded = cudaEventRecord(e, signaller);
  const cudaError_t waited = recorded == cudaSuccess ? cudaStreamWaitEvent(waiter, e, 0) : recorded;
  cudaEventDestroy(e);  // released once the wait is satisfied
  cuda_check(waited, "cudaStreamWaitEvent");
}

}  // namespace pd2bw::executor::nccl

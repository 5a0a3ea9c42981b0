// What the emulated NCCL's files share (private to emu/src): a communicator's state, one queued
// operation, and the group runner that executes a group's operations over MPI on a stream's worker.
#pragma once

#include <mpi.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

namespace pd2bw_emu::nccl {

// One communicator, shared by its handle and by the operations queued on it (which may outlive an
// aborted handle).
struct CommState {
  MPI_Comm mpi = MPI_COMM_NULL;  // the members, in NCCL rank order; null for a communicator of one rank
  int nranks = 1, rank = 0, device = 0;
  int tag_span = 1 << 14;  // point-to-point tags are [0, span), collectives' [span, 2 * span)
  std::atomic<bool> aborted{false};
  std::atomic<int> async_error{ncclSuccess};

  std::mutex mu;
  std::condition_variable idle;          // notified when `queued` drops
  int64_t queued = 0;                    // operations issued and not yet finished
  std::vector<uint64_t> sent, received;  // point-to-point operations issued per peer, to tag them
  uint64_t collectives = 0;              // collectives issued, to tag them

  CommState() = default;
  CommState(const CommState&) = delete;
  CommState& operator=(const CommState&) = delete;
  ~CommState();  // frees `mpi` unless aborted (an aborted communicator talks to nobody, not even MPI)
};

enum class OpKind { send, recv, allreduce, broadcast };

// One checked NCCL call, waiting in its group or queued on its stream.
struct Op {
  OpKind kind = OpKind::send;
  std::shared_ptr<CommState> comm;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0, bytes = 0;
  ncclDataType_t type = ncclUint8;
  ncclRedOp_t reduce = ncclSum;
  int peer = 0;  // send, recv: the peer; broadcast: the root
  int tag = 0;   // the MPI tag, given when the operation is issued (in call order)
  cudaStream_t stream = nullptr;
};

// Runs a group's operations to completion on the calling stream worker: they progress together, so
// none waits for another. Returns cudaSuccess (also when a communicator was aborted: its operations
// just stop), or, after failing the device with a message naming the operation, cudaErrorLaunchFailure.
cudaError_t run_group(const std::vector<Op>& ops);

// Waits for every request (polling with Backoff). Throws std::runtime_error("<what>: <MPI's message>")
// when MPI fails.
void wait_all(std::vector<MPI_Request>& requests, const char* what);

// Throws std::runtime_error("<what> failed: <MPI's message>") when rc is not MPI_SUCCESS.
void mpi_check(int rc, const char* what);

// Prints "pd2bw-emu: NCCL: <message> (<result's description>)" on stderr, remembers the message for
// ncclGetLastError (per thread) and returns `result`.
ncclResult_t report(ncclResult_t result, const std::string& message);

// Bytes of one element; 0 for a value that is no ncclDataType_t.
size_t type_bytes(ncclDataType_t type);

// Polls with a growing pause: spins for 20 us, yields until 200 us, then sleeps 50 us between polls, so
// a rank that waits for a slow peer leaves the core to the processes that share it.
class Backoff {
 public:
  void pause();
  void reset() { polls_ = 0; }

 private:
  int64_t polls_ = 0;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace pd2bw_emu::nccl

// The handle an application holds (ncclComm_t): the state stays while queued operations use it.
struct ncclComm {
  std::shared_ptr<pd2bw_emu::nccl::CommState> state;
};

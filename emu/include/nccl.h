// The emulated device's NCCL: the subset of NCCL's API that pd2bw's nccl transport uses, over MPI, so
// that `--transport nccl` runs under mpirun on machines without a GPU. Types, values and signatures are
// NCCL's; the semantics follow NCCL's user guide:
// - ncclGetUniqueId makes an id that the application hands to every member (over MPI, say);
//   ncclCommInitRank is collective over the communicator's members only.
// - A communication call checks its arguments, then queues its operation on the stream and returns
//   (ncclSuccess); the operation runs when the stream reaches it and holds the stream until it is done
//   (a send until its receive takes it, as NCCL's send blocks the GPU). A communicator's point-to-point
//   operations with one peer match in the order they were called, as do its collectives.
// - Between ncclGroupStart and ncclGroupEnd (nestable, per thread) operations are only collected; the
//   outermost ncclGroupEnd issues them together, so they progress independently (a send and a receive
//   between two ranks in one group do not deadlock). A group with operations on several streams makes
//   every one of those streams wait for the others before it and for the group after it.
// - ncclAllReduce adds (multiplies, ...) the ranks' values in rank order, ((x0 + x1) + x2) + ..., so
//   every member gets the same bits and runs repeat bit for bit.
// Differences from NCCL: the process that calls ncclGetUniqueId must be a member of the communicator
// (it collects the others); a communicator of more than one rank needs MPI initialised with
// MPI_THREAD_MULTIPLE (its operations call MPI from the streams' worker threads), and its set-up uses
// point-to-point messages on MPI_COMM_WORLD with tags in [20000, 32000); a communicator of one rank
// needs no MPI; ncclCommInitRank runs at once, even inside a group. A failed call prints why
// ("pd2bw-emu: NCCL: ...") on stderr and returns an error; a failure while an operation runs (a size
// mismatch, an MPI error) fails the emulated device, as a faulting kernel does. Float16, bfloat16 and
// fp8 reductions are not emulated (ncclInvalidArgument).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#define NCCL_MAJOR 2
#define NCCL_MINOR 28
#define NCCL_PATCH 9
#define NCCL_SUFFIX "-pd2bw-emu"
#define NCCL_VERSION_CODE 22809
#define NCCL_VERSION(X, Y, Z) (((X) <= 2 && (Y) <= 8) ? (X) * 1000 + (Y) * 100 + (Z) : (X) * 10000 + (Y) * 100 + (Z))

#define NCCL_UNIQUE_ID_BYTES 128
// What the members of one communicator share: made by ncclGetUniqueId, opaque to the application.
struct ncclUniqueId {
  char internal[NCCL_UNIQUE_ID_BYTES];
};

// One rank's handle of a communicator (null: none).
struct ncclComm;
using ncclComm_t = ncclComm*;

enum ncclResult_t : int {
  ncclSuccess = 0,
  ncclUnhandledCudaError = 1,
  ncclSystemError = 2,
  ncclInternalError = 3,
  ncclInvalidArgument = 4,
  ncclInvalidUsage = 5,
  ncclRemoteError = 6,
  ncclInProgress = 7,
  ncclNumResults = 8,
};

// A fixed underlying type: a value that is no datatype (or op) is refused, not undefined behaviour.
enum ncclDataType_t : int {
  ncclInt8 = 0,
  ncclChar = 0,
  ncclUint8 = 1,
  ncclInt32 = 2,
  ncclInt = 2,
  ncclUint32 = 3,
  ncclInt64 = 4,
  ncclUint64 = 5,
  ncclFloat16 = 6,
  ncclHalf = 6,
  ncclFloat32 = 7,
  ncclFloat = 7,
  ncclFloat64 = 8,
  ncclDouble = 8,
  ncclBfloat16 = 9,
  ncclFloat8e4m3 = 10,
  ncclFloat8e5m2 = 11,
  ncclNumTypes = 12,
};

// ncclAvg divides the sum by the number of ranks (integer division for integer types).
enum ncclRedOp_t : int {
  ncclSum = 0,
  ncclProd = 1,
  ncclMax = 2,
  ncclMin = 3,
  ncclAvg = 4,
  ncclNumOps = 5,
  ncclMaxRedOp = 0x7fffffff,
};

// ---- version, errors ----------------------------------------------------------------------------------
ncclResult_t ncclGetVersion(int* version);
// A short description of `result` (static storage).
const char* ncclGetErrorString(ncclResult_t result);
// The message of the last failed call on this thread (`comm` is ignored); "" when none.
const char* ncclGetLastError(ncclComm_t comm);
// ncclSuccess, or the error of an operation of `comm` that failed while it ran.
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error);

// ---- communicators ------------------------------------------------------------------------------------
// A new id; its maker must call ncclCommInitRank with it (see above). Never fails.
ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id);
// Joins the communicator of `nranks` ranks named by `comm_id` as rank `rank`, on the current device;
// returns once every member has joined. ncclInvalidArgument for a bad count, rank or id; ncclInvalidUsage
// when MPI is needed but missing or below MPI_THREAD_MULTIPLE, or when the members disagree (their
// counts, a rank taken twice); ncclSystemError when MPI fails.
ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank);
// Waits until the operations queued on `comm` have run, then frees it (ncclCommDestroy cannot end a
// communicator whose peers are gone: ncclCommAbort does).
ncclResult_t ncclCommDestroy(ncclComm_t comm);
// Frees `comm` at once, without talking to any peer: its queued and running operations stop where they
// are (their streams go on; the buffers they were given hold unspecified values).
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommCount(ncclComm_t comm, int* count);
ncclResult_t ncclCommUserRank(ncclComm_t comm, int* rank);
ncclResult_t ncclCommCuDevice(ncclComm_t comm, int* device);

// ---- group calls --------------------------------------------------------------------------------------
ncclResult_t ncclGroupStart();
// Issues the group's operations (outermost call). Returns the first error of a call inside the group,
// whose operations are then all dropped; ncclInvalidUsage without a matching ncclGroupStart.
ncclResult_t ncclGroupEnd();

// ---- communication (device buffers: cudaMalloc'd or mapped pinned memory; any pointer for count 0) --
// Every member's recvbuff gets the element-wise reduction of the members' sendbuffs (in place when
// sendbuff == recvbuff).
ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream);
// Every member's recvbuff gets root's sendbuff (sendbuff is read on root only).
ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream);
// Point-to-point: `peer` calls the other one with the same count and datatype; a rank may send to
// itself when the receive is in the same group.
ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);
ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream);

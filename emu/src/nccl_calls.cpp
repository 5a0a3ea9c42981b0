// The emulated NCCL's communication calls and group calls: each call checks its arguments and becomes
// an Op; a group (per thread) collects them, and issuing tags them in call order (the k-th send to a
// peer meets the peer's k-th receive from this rank; the k-th collective meets every member's k-th),
// then queues them as one task on their stream (nccl_ops.cpp runs it).
#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>

#include "nccl_internal.hpp"
#include "pd2bw_emu/stream.hpp"

namespace pd2bw_emu::nccl {

namespace {

struct GroupState {
  int depth = 0;
  std::vector<Op> ops;
  ncclResult_t error = ncclSuccess;  // the first failed call inside the group
};
thread_local GroupState tls_group;

// The operations of one issued group while they are queued or running: each communicator counts them
// until they finish (or are dropped unrun), so that ncclCommDestroy can wait for them.
class Issued {
 public:
  explicit Issued(std::vector<Op> ops) : ops_(std::move(ops)) {
    for (const Op& op : ops_) {
      const std::lock_guard lock(op.comm->mu);
      ++op.comm->queued;
    }
  }
  ~Issued() { finish(); }
  Issued(const Issued&) = delete;
  Issued& operator=(const Issued&) = delete;
  const std::vector<Op>& ops() const { return ops_; }
  void finish() {
    if (finished_) return;
    finished_ = true;
    for (const Op& op : ops_) {
      const std::lock_guard lock(op.comm->mu);
      --op.comm->queued;
      op.comm->idle.notify_all();
    }
  }

 private:
  std::vector<Op> ops_;
  bool finished_ = false;
};

void give_tag(Op& op) {
  CommState& c = *op.comm;
  const std::lock_guard lock(c.mu);
  const auto span = static_cast<uint64_t>(c.tag_span);
  const auto peer = static_cast<size_t>(op.peer);
  if (op.kind == OpKind::send) op.tag = static_cast<int>(c.sent[peer]++ % span);
  if (op.kind == OpKind::recv) op.tag = static_cast<int>(c.received[peer]++ % span);
  if (op.kind == OpKind::allreduce || op.kind == OpKind::broadcast)
    op.tag = static_cast<int>(span + c.collectives++ % span);
}

// Makes `waiter` wait for the work queued on `signaller` so far.
cudaError_t order_after(cudaStream_t waiter, cudaStream_t signaller) {
  cudaEvent_t event = nullptr;
  cudaError_t rc = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
  if (rc != cudaSuccess) return rc;
  rc = cudaEventRecord(event, signaller);
  if (rc == cudaSuccess) rc = cudaStreamWaitEvent(waiter, event, 0);
  const cudaError_t destroyed = cudaEventDestroy(event);  // released once the wait is over
  return rc == cudaSuccess ? destroyed : rc;
}

// Queues a group's operations as one task: on the stream of the first, after the other streams' work
// so far, and with the other streams waiting for it.
ncclResult_t issue(std::vector<Op> ops) {
  for (Op& op : ops) give_tag(op);
  std::vector<cudaStream_t> streams;
  for (const Op& op : ops)
    if (std::find(streams.begin(), streams.end(), op.stream) == streams.end()) streams.push_back(op.stream);
  auto issued = std::make_shared<Issued>(std::move(ops));
  const cudaStream_t lead = streams.front();
  cudaError_t rc = cudaSuccess;
  for (size_t k = 1; k < streams.size() && rc == cudaSuccess; ++k) rc = order_after(lead, streams[k]);
  if (rc == cudaSuccess)
    rc = enqueue(lead, [issued] {
      const cudaError_t result = run_group(issued->ops());
      issued->finish();
      return result;
    });
  for (size_t k = 1; k < streams.size() && rc == cudaSuccess; ++k) rc = order_after(streams[k], lead);
  if (rc != cudaSuccess)
    return report(ncclUnhandledCudaError, std::string("queueing on a stream failed: ") + cudaGetErrorString(rc));
  return ncclSuccess;
}

// An operation of a call whose arguments passed the checks: into the group, or issued now.
ncclResult_t submit(Op op) {
  if (tls_group.depth > 0) {
    tls_group.ops.push_back(std::move(op));
    return ncclSuccess;
  }
  std::vector<Op> one;
  one.push_back(std::move(op));
  return issue(std::move(one));
}

// A failed check: reported, and remembered by the group it was called in.
ncclResult_t refuse(ncclResult_t result, const std::string& message) {
  if (tls_group.depth > 0 && tls_group.error == ncclSuccess) tls_group.error = result;
  return report(result, message);
}

// Checks what every communication call has; fills op.bytes. Returns the message of a failed check ("").
std::string check_common(const char* call, ncclComm_t comm, size_t count, ncclDataType_t type, Op& op) {
  if (comm == nullptr) return std::string(call) + ": comm is null";
  const size_t width = type_bytes(type);
  if (width == 0)
    return std::string(call) + ": datatype " + std::to_string(static_cast<int>(type)) + " is no NCCL type";
  if (count > SIZE_MAX / width) return std::string(call) + ": count " + std::to_string(count) + " is too large";
  op.count = count;
  op.bytes = count * width;
  op.type = type;
  return "";
}

std::string check_rank(const char* call, const char* what, int r, const CommState& c) {
  if (r >= 0 && r < c.nranks) return "";
  return std::string(call) + ": " + what + " " + std::to_string(r) + " is not a rank of this communicator of " +
         std::to_string(c.nranks);
}

std::string check_buffer(const char* call, const char* what, const void* p, size_t bytes) {
  if (bytes == 0 || device_accessible(p, bytes)) return "";
  return std::string(call) + ": " + what + " is not " + std::to_string(bytes) + " bytes of device memory";
}

}  // namespace

}  // namespace pd2bw_emu::nccl


using pd2bw_emu::nccl::Op;
using pd2bw_emu::nccl::OpKind;

ncclResult_t ncclGroupStart() {
  ++pd2bw_emu::nccl::tls_group.depth;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  auto& group = pd2bw_emu::nccl::tls_group;
  if (group.depth == 0) return pd2bw_emu::nccl::report(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--group.depth > 0) return ncclSuccess;
  std::vector<Op> ops = std::move(group.ops);
  group.ops.clear();
  const ncclResult_t error = std::exchange(group.error, ncclSuccess);
  if (error != ncclSuccess) return error;  // the whole group is dropped; its calls said why
  return ops.empty() ? ncclSuccess : pd2bw_emu::nccl::issue(std::move(ops));
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  using namespace pd2bw_emu::nccl;
  Op op{OpKind::send, nullptr, sendbuff, nullptr, 0, 0, ncclUint8, ncclSum, peer, 0, stream};
  std::string why = check_common("ncclSend", comm, count, datatype, op);
  if (why.empty()) why = check_rank("ncclSend", "peer", peer, *comm->state);
  if (why.empty()) why = check_buffer("ncclSend", "sendbuff", sendbuff, op.bytes);
  if (!why.empty()) return refuse(ncclInvalidArgument, why);
  op.comm = comm->state;
  return submit(std::move(op));
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  using namespace pd2bw_emu::nccl;
  Op op{OpKind::recv, nullptr, nullptr, recvbuff, 0, 0, ncclUint8, ncclSum, peer, 0, stream};
  std::string why = check_common("ncclRecv", comm, count, datatype, op);
  if (why.empty()) why = check_rank("ncclRecv", "peer", peer, *comm->state);
  if (why.empty()) why = check_buffer("ncclRecv", "recvbuff", recvbuff, op.bytes);
  if (!why.empty()) return refuse(ncclInvalidArgument, why);
  op.comm = comm->state;
  return submit(std::move(op));
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  using namespace pd2bw_emu::nccl;
  Op o{OpKind::allreduce, nullptr, sendbuff, recvbuff, 0, 0, ncclUint8, op, 0, 0, stream};
  std::string why = check_common("ncclAllReduce", comm, count, datatype, o);
  if (why.empty() && (datatype == ncclFloat16 || datatype == ncclBfloat16 || datatype >= ncclFloat8e4m3))
    why = "ncclAllReduce: the emulation reduces no float16, bfloat16 or fp8 values";
  if (why.empty() && (static_cast<int>(op) < 0 || op >= ncclNumOps))
    why = "ncclAllReduce: op " + std::to_string(static_cast<int>(op)) + " is no built-in reduction";
  if (why.empty()) why = check_buffer("ncclAllReduce", "sendbuff", sendbuff, o.bytes);
  if (why.empty()) why = check_buffer("ncclAllReduce", "recvbuff", recvbuff, o.bytes);
  if (!why.empty()) return refuse(ncclInvalidArgument, why);
  o.comm = comm->state;
  return submit(std::move(o));
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  using namespace pd2bw_emu::nccl;
  Op op{OpKind::broadcast, nullptr, sendbuff, recvbuff, 0, 0, ncclUint8, ncclSum, root, 0, stream};
  std::string why = check_common("ncclBroadcast", comm, count, datatype, op);
  if (why.empty()) why = check_rank("ncclBroadcast", "root", root, *comm->state);
  if (why.empty() && comm->state->rank == root) why = check_buffer("ncclBroadcast", "sendbuff", sendbuff, op.bytes);
  if (why.empty()) why = check_buffer("ncclBroadcast", "recvbuff", recvbuff, op.bytes);
  if (!why.empty()) return refuse(ncclInvalidArgument, why);
  op.comm = comm->state;
  return submit(std::move(op));
}

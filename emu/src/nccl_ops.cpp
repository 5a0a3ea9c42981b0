// The emulated NCCL's operations as they run on a stream's worker thread: a group's operations post
// their MPI requests together and advance as those complete, so none of them waits for another (NCCL's
// group semantics). Sends are synchronous (MPI_Issend): like NCCL's, a send holds its stream until the
// receive takes it, so code that counts on a send being buffered deadlocks here as it may on a GPU.
// An allreduce gathers the values at rank 0, which combines them in rank order and sends the result
// back; a broadcast is the root's sends. Self sends and receives are matched within the group.
#include <sched.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>

#include "nccl_internal.hpp"
#include "pd2bw_emu/stream.hpp"

namespace pd2bw_emu::nccl {

namespace {

constexpr size_t kPieceBytes = size_t{1} << 30;  // MPI counts are ints: larger messages go as pieces

// A failure of an operation while it runs: the device fails with this message.
struct Failure : std::runtime_error {
  Failure(ncclResult_t r, const std::string& what) : std::runtime_error(what), result(r) {}
  ncclResult_t result;
};
struct Aborted {};

// One operation as it runs: its outstanding requests, its stage, and its staging buffers.
struct Running {
  const Op* op = nullptr;
  int stage = 0;
  bool done = false;
  std::vector<MPI_Request> requests;
  std::vector<int> expected;                    // per request: bytes a receive expects; -1 for a send
  std::vector<std::vector<std::byte>> buffers;  // an allreduce's contributions and result
};

std::string describe(const Op& op) {
  static const char* const kNames[] = {"ncclSend", "ncclRecv", "ncclAllReduce", "ncclBroadcast"};
  std::string s = std::string(kNames[static_cast<int>(op.kind)]) + " of " + std::to_string(op.bytes) + " bytes";
  if (op.kind == OpKind::send) s += " to rank " + std::to_string(op.peer);
  if (op.kind == OpKind::recv) s += " from rank " + std::to_string(op.peer);
  if (op.kind == OpKind::broadcast) s += " from root " + std::to_string(op.peer);
  return s + " (rank " + std::to_string(op.comm->rank) + " of a communicator of " + std::to_string(op.comm->nranks) +
         ")";
}

void post_send(Running& r, const void* data, size_t bytes, int peer) {
  const auto* from = static_cast<const std::byte*>(data);
  size_t offset = 0;
  do {
    const auto n = static_cast<int>(std::min(kPieceBytes, bytes - offset));
    r.requests.push_back(MPI_REQUEST_NULL);
    r.expected.push_back(-1);
    mpi_check(MPI_Issend(from + offset, n, MPI_BYTE, peer, r.op->tag, r.op->comm->mpi, &r.requests.back()),
              "MPI_Issend");
    offset += static_cast<size_t>(n);
  } while (offset < bytes);
}

void post_recv(Running& r, void* data, size_t bytes, int peer) {
  auto* to = static_cast<std::byte*>(data);
  size_t offset = 0;
  do {
    const auto n = static_cast<int>(std::min(kPieceBytes, bytes - offset));
    r.requests.push_back(MPI_REQUEST_NULL);
    r.expected.push_back(n);
    mpi_check(MPI_Irecv(to + offset, n, MPI_BYTE, peer, r.op->tag, r.op->comm->mpi, &r.requests.back()), "MPI_Irecv");
    offset += static_cast<size_t>(n);
  } while (offset < bytes);
}

template <typename T>
void combine_as(std::byte* acc, const std::byte* x, size_t n, ncclRedOp_t op) {
  T* a = reinterpret_cast<T*>(acc);
  const T* b = reinterpret_cast<const T*>(x);
  for (size_t i = 0; i < n; ++i) {
    switch (op) {
      case ncclProd: a[i] = static_cast<T>(a[i] * b[i]); break;
      case ncclMax: a[i] = b[i] > a[i] ? b[i] : a[i]; break;
      case ncclMin: a[i] = b[i] < a[i] ? b[i] : a[i]; break;
      default: a[i] = static_cast<T>(a[i] + b[i]); break;  // ncclSum, ncclAvg
    }
  }
}

template <typename T>
void divide_as(std::byte* acc, size_t n, int ranks) {
  T* a = reinterpret_cast<T*>(acc);
  for (size_t i = 0; i < n; ++i) a[i] = static_cast<T>(a[i] / static_cast<T>(ranks));
}

// acc = acc (op) x, element-wise (staging buffers: aligned for every type).
void combine(const Op& op, std::byte* acc, const std::byte* x) {
  switch (op.type) {
    case ncclInt8: return combine_as<int8_t>(acc, x, op.count, op.reduce);
    case ncclUint8: return combine_as<uint8_t>(acc, x, op.count, op.reduce);
    case ncclInt32: return combine_as<int32_t>(acc, x, op.count, op.reduce);
    case ncclUint32: return combine_as<uint32_t>(acc, x, op.count, op.reduce);
    case ncclInt64: return combine_as<int64_t>(acc, x, op.count, op.reduce);
    case ncclUint64: return combine_as<uint64_t>(acc, x, op.count, op.reduce);
    case ncclFloat32: return combine_as<float>(acc, x, op.count, op.reduce);
    case ncclFloat64: return combine_as<double>(acc, x, op.count, op.reduce);
    default: throw Failure(ncclInvalidArgument, describe(op) + ": no reduction of this datatype");
  }
}

void divide(const Op& op, std::byte* acc) {
  switch (op.type) {
    case ncclInt8: return divide_as<int8_t>(acc, op.count, op.comm->nranks);
    case ncclUint8: return divide_as<uint8_t>(acc, op.count, op.comm->nranks);
    case ncclInt32: return divide_as<int32_t>(acc, op.count, op.comm->nranks);
    case ncclUint32: return divide_as<uint32_t>(acc, op.count, op.comm->nranks);
    case ncclInt64: return divide_as<int64_t>(acc, op.count, op.comm->nranks);
    case ncclUint64: return divide_as<uint64_t>(acc, op.count, op.comm->nranks);
    case ncclFloat32: return divide_as<float>(acc, op.count, op.comm->nranks);
    default: return divide_as<double>(acc, op.count, op.comm->nranks);
  }
}

void copy(void* to, const void* from, size_t bytes) {
  if (to != from && bytes > 0) std::memmove(to, from, bytes);
}

// Posts the operation's first requests (or finishes it, where no peer takes part).
void start(Running& r) {
  const Op& op = *r.op;
  const CommState& c = *op.comm;
  if (op.kind == OpKind::send) return post_send(r, op.sendbuff, op.bytes, op.peer);
  if (op.kind == OpKind::recv) return post_recv(r, op.recvbuff, op.bytes, op.peer);
  if (c.nranks == 1 || op.bytes == 0) {  // every member has the same count: nobody sends anything
    if (op.kind == OpKind::allreduce || c.rank == op.peer) copy(op.recvbuff, op.sendbuff, op.bytes);
    r.done = true;
    return;
  }
  if (op.kind == OpKind::broadcast) {
    if (c.rank != op.peer) return post_recv(r, op.recvbuff, op.bytes, op.peer);
    copy(op.recvbuff, op.sendbuff, op.bytes);
    for (int k = 0; k < c.nranks; ++k)
      if (k != c.rank) post_send(r, op.sendbuff, op.bytes, k);
    return;
  }
  r.buffers.resize(static_cast<size_t>(c.nranks));
  if (c.rank == 0) {  // the contributions first; the sum once they are all here
    for (int k = 1; k < c.nranks; ++k) {
      r.buffers[static_cast<size_t>(k)].resize(op.bytes);
      post_recv(r, r.buffers[static_cast<size_t>(k)].data(), op.bytes, k);
    }
    return;
  }
  const auto* mine = static_cast<const std::byte*>(op.sendbuff);
  r.buffers[0].assign(mine, mine + op.bytes);  // a copy: the result may land in the same buffer
  post_send(r, r.buffers[0].data(), op.bytes, 0);
  post_recv(r, op.recvbuff, op.bytes, 0);
}

// The requests of the current stage have completed: the next stage, or done.
void advance(Running& r) {
  r.requests.clear();
  r.expected.clear();
  const Op& op = *r.op;
  if (op.kind != OpKind::allreduce || op.comm->rank != 0 || r.stage != 0) {
    r.done = true;
    return;
  }
  // Rank 0 combines in rank order, ((x0 + x1) + x2) + ..., and sends every member the result.
  std::vector<std::byte>& acc = r.buffers[0];
  const auto* mine = static_cast<const std::byte*>(op.sendbuff);
  acc.assign(mine, mine + op.bytes);
  for (int k = 1; k < op.comm->nranks; ++k) combine(op, acc.data(), r.buffers[static_cast<size_t>(k)].data());
  if (op.reduce == ncclAvg) divide(op, acc.data());
  copy(op.recvbuff, acc.data(), op.bytes);
  for (int k = 1; k < op.comm->nranks; ++k) post_send(r, acc.data(), op.bytes, k);
  r.stage = 1;
}

// Whether the current stage's requests have all completed; checks what the receives got.
bool test(Running& r) {
  const Op& op = *r.op;
  std::vector<MPI_Status> statuses(r.requests.size());
  int flag = 0;
  const int rc = MPI_Testall(static_cast<int>(r.requests.size()), r.requests.data(), &flag, statuses.data());
  if (rc == MPI_ERR_IN_STATUS)
    for (const MPI_Status& s : statuses)
      if (s.MPI_ERROR == MPI_ERR_TRUNCATE)
        throw Failure(ncclInvalidUsage, describe(op) + ": the peer sent more: its count or datatype differs");
  if (rc != MPI_SUCCESS) {
    try {
      mpi_check(rc, "MPI_Testall");
    } catch (const std::runtime_error& e) {
      throw Failure(ncclSystemError, describe(op) + ": " + e.what());
    }
  }
  if (!flag) return false;
  for (size_t k = 0; k < statuses.size(); ++k) {
    if (r.expected[k] < 0) continue;
    int got = 0;
    MPI_Get_count(&statuses[k], MPI_BYTE, &got);
    if (got != r.expected[k])
      throw Failure(ncclInvalidUsage, describe(op) + ": the peer sent " + std::to_string(got) + " bytes where " +
                                          std::to_string(r.expected[k]) +
                                          " were expected: its count or datatype differs");
  }
  return true;
}

// Self sends and receives of one communicator pair up in call order within the group.
void match_self(std::vector<Running>& running) {
  for (Running& s : running) {
    const Op& send = *s.op;
    if (s.done || send.kind != OpKind::send || send.peer != send.comm->rank) continue;
    const auto it = std::find_if(running.begin(), running.end(), [&](const Running& x) {
      return !x.done && x.op->kind == OpKind::recv && x.op->comm == send.comm && x.op->peer == send.comm->rank;
    });
    if (it == running.end())
      throw Failure(ncclInvalidUsage, describe(send) + ": a send to this rank needs its receive in the same group");
    if (it->op->bytes != send.bytes)
      throw Failure(ncclInvalidUsage, describe(send) + " meets " + describe(*it->op) + ": the counts differ");
    copy(it->op->recvbuff, send.sendbuff, send.bytes);
    s.done = it->done = true;
  }
  for (const Running& r : running)
    if (!r.done && r.op->kind == OpKind::recv && r.op->peer == r.op->comm->rank)
      throw Failure(ncclInvalidUsage, describe(*r.op) + ": a receive from this rank needs its send in the same group");
}

void progress(std::vector<Running>& running) {
  Backoff backoff;
  for (;;) {
    bool pending = false, moved = false;
    for (Running& r : running) {
      if (r.done) continue;
      if (r.op->comm->aborted.load()) throw Aborted{};
      if (test(r)) {
        advance(r);
        moved = true;
      }
      pending = pending || !r.done;
    }
    if (!pending) return;
    if (moved) {
      backoff.reset();
    } else {
      backoff.pause();
    }
  }
}

// Leaves the requests of operations that will not finish to MPI: receives are cancelled; their staging
// buffers are kept to the end of the process, since MPI may still touch them.
void abandon(std::vector<Running>& running) {
  static std::mutex mu;
  static auto* kept = new std::vector<std::vector<std::byte>>;  // never freed, on purpose
  for (Running& r : running) {
    for (size_t k = 0; k < r.requests.size(); ++k) {
      if (r.requests[k] == MPI_REQUEST_NULL) continue;
      if (r.expected[k] >= 0) MPI_Cancel(&r.requests[k]);
      MPI_Request_free(&r.requests[k]);
    }
    const std::lock_guard lock(mu);
    for (auto& b : r.buffers) kept->push_back(std::move(b));
  }
}

}  // namespace

void mpi_check(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  MPI_Error_string(rc, text, &length);
  throw std::runtime_error(std::string(what) +
                           " failed: " + std::string(text, static_cast<size_t>(std::max(length, 0))));
}

void wait_all(std::vector<MPI_Request>& requests, const char* what) {
  Backoff backoff;
  for (;;) {
    int flag = 0;
    mpi_check(MPI_Testall(static_cast<int>(requests.size()), requests.data(), &flag, MPI_STATUSES_IGNORE), what);
    if (flag) return;
    backoff.pause();
  }
}

size_t type_bytes(ncclDataType_t type) {
  switch (type) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

void Backoff::pause() {
  using namespace std::chrono;
  const auto now = steady_clock::now();
  if (polls_++ == 0) start_ = now;
  const auto waited = now - start_;
  if (waited < microseconds(20)) return;
  if (waited < microseconds(200)) {
    sched_yield();
    return;
  }
  std::this_thread::sleep_for(microseconds(50));
}

cudaError_t run_group(const std::vector<Op>& ops) {
  std::vector<Running> running(ops.size());
  for (size_t k = 0; k < ops.size(); ++k) running[k].op = &ops[k];
  try {
    for (const Op& op : ops)
      if (op.comm->aborted.load()) throw Aborted{};
    match_self(running);
    for (Running& r : running)
      if (!r.done) start(r);
    progress(running);
  } catch (const Aborted&) {
    abandon(running);
  } catch (const Failure& f) {
    abandon(running);
    for (const Op& op : ops) op.comm->async_error = f.result;
    fail(cudaErrorLaunchFailure, std::string("NCCL (emulated): ") + f.what());
    return cudaErrorLaunchFailure;
  } catch (const std::runtime_error& e) {  // MPI failed while posting
    abandon(running);
    for (const Op& op : ops) op.comm->async_error = ncclSystemError;
    fail(cudaErrorLaunchFailure, std::string("NCCL (emulated): ") + e.what());
    return cudaErrorLaunchFailure;
  }
  return cudaSuccess;
}

}  // namespace pd2bw_emu::nccl

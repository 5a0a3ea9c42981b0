// The emulated NCCL's API (see nccl.h): ids and communicators over MPI, the argument checks of the
// communication calls, and group calls, which collect operations per thread and queue them on their
// streams at the outermost ncclGroupEnd (the operations run in nccl_ops.cpp).
//
// Making a communicator: the id names its maker (an MPI_COMM_WORLD rank) and a serial number of that
// maker's. Every other member reports (world rank, rank, nranks) to the maker on a tag derived from the
// serial; the maker checks the reports and answers each with the table of the members' world ranks in
// NCCL rank order (or a refusal), and the members make an MPI communicator of just themselves
// (MPI_Comm_create_group, collective over the members only).
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>

#include "nccl_internal.hpp"
#include "pd2bw_emu/stream.hpp"

namespace pd2bw_emu::nccl {

thread_local std::string tls_last_error;

ncclResult_t report(ncclResult_t result, const std::string& message) {
  tls_last_error = message;
  std::fprintf(stderr, "pd2bw-emu: NCCL: %s (%s)\n", message.c_str(), ncclGetErrorString(result));
  std::fflush(stderr);
  return result;
}

CommState::~CommState() {
  int finalized = 1;
  MPI_Finalized(&finalized);
  if (mpi != MPI_COMM_NULL && !aborted.load() && !finalized) MPI_Comm_free(&mpi);
}

namespace {

constexpr uint32_t kIdMagic = 0x70643262;  // "pd2b"
constexpr int kFirstTag = 20000;           // the set-up's tags on MPI_COMM_WORLD: [20000, 32000)
constexpr uint64_t kTagSlots = 4000;       // three tags per id
constexpr const char* kDisagree =
    "the members disagree on the number of ranks, or two of them took one rank, or one process holds two ranks";

struct IdFields {
  uint32_t magic = 0;
  int32_t maker = -1;  // MPI_COMM_WORLD rank of the id's maker; -1: made before MPI was initialised
  uint64_t serial = 0;
};

bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized && !finalized;
}

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

const char* thread_level_name(int level) {
  switch (level) {
    case MPI_THREAD_SINGLE: return "MPI_THREAD_SINGLE";
    case MPI_THREAD_FUNNELED: return "MPI_THREAD_FUNNELED";
    case MPI_THREAD_SERIALIZED: return "MPI_THREAD_SERIALIZED";
    default: return "MPI_THREAD_MULTIPLE";
  }
}

// The maker's side of the set-up: collects the other members' reports, then answers every reporter
// with the table (status 0) or a refusal (status 1). Returns the table.
std::vector<int> collect_members(const CommState& c, int tag) {
  std::vector<int> table(static_cast<size_t>(c.nranks), -1);
  table[static_cast<size_t>(c.rank)] = world_rank();
  std::vector<int> reporters;
  bool agreed = true;
  for (int k = 1; k < c.nranks; ++k) {
    int report_of[3] = {};  // world rank, rank, nranks
    MPI_Request request = MPI_REQUEST_NULL;
    mpi_check(MPI_Irecv(report_of, 3, MPI_INT, MPI_ANY_SOURCE, tag, MPI_COMM_WORLD, &request), "MPI_Irecv");
    std::vector<MPI_Request> one{request};
    wait_all(one, "MPI_Irecv");
    reporters.push_back(report_of[0]);
    const int r = report_of[1];
    if (report_of[2] != c.nranks || r < 0 || r >= c.nranks || table[static_cast<size_t>(r)] != -1) {
      agreed = false;
      continue;
    }
    table[static_cast<size_t>(r)] = report_of[0];
  }
  std::vector<int> sorted = table;  // one rank per process: MPI groups cannot hold a process twice
  std::sort(sorted.begin(), sorted.end());
  agreed = agreed && std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end();
  std::vector<int> answer{agreed ? 0 : 1};
  answer.insert(answer.end(), table.begin(), table.end());
  std::vector<MPI_Request> sends(reporters.size(), MPI_REQUEST_NULL);
  for (size_t k = 0; k < reporters.size(); ++k)
    mpi_check(MPI_Isend(answer.data(), static_cast<int>(answer.size()), MPI_INT, reporters[k], tag + 1, MPI_COMM_WORLD,
                        &sends[k]),
              "MPI_Isend");
  wait_all(sends, "MPI_Isend");
  if (!agreed) throw std::invalid_argument(kDisagree);
  return table;
}

// A member's side: reports to the maker and returns the table it answers with.
std::vector<int> report_to_maker(const CommState& c, int maker, int tag) {
  const int mine[3] = {world_rank(), c.rank, c.nranks};
  std::vector<MPI_Request> send{MPI_REQUEST_NULL};
  mpi_check(MPI_Isend(mine, 3, MPI_INT, maker, tag, MPI_COMM_WORLD, &send[0]), "MPI_Isend");
  wait_all(send, "MPI_Isend");
  Backoff backoff;
  MPI_Status status;
  for (int found = 0; !found; backoff.pause())
    mpi_check(MPI_Iprobe(maker, tag + 1, MPI_COMM_WORLD, &found, &status), "MPI_Iprobe");
  int count = 0;
  MPI_Get_count(&status, MPI_INT, &count);
  std::vector<int> answer(static_cast<size_t>(std::max(count, 1)));
  mpi_check(MPI_Recv(answer.data(), count, MPI_INT, maker, tag + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE), "MPI_Recv");
  if (answer[0] != 0 || count != c.nranks + 1)
    throw std::invalid_argument(kDisagree);
  return {answer.begin() + 1, answer.end()};
}

// Makes c.mpi: the members in rank order. Throws std::invalid_argument for a usage error,
// std::runtime_error when MPI fails.
void connect(CommState& c, const IdFields& id) {
  if (!mpi_running())
    throw std::invalid_argument(
        "a communicator of more than one rank needs MPI: initialise it first with MPI_Init_thread(..., "
        "MPI_THREAD_MULTIPLE, ...)");
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE)
    throw std::invalid_argument(
        std::string("the emulated NCCL calls MPI from the streams' worker threads, so MPI must be "
                    "initialised with MPI_THREAD_MULTIPLE; this process has ") +
        thread_level_name(level));
  if (id.maker < 0) throw std::invalid_argument("the id was made before MPI was initialised");
  const int tag = kFirstTag + static_cast<int>(id.serial % kTagSlots) * 3;
  const std::vector<int> table = world_rank() == id.maker ? collect_members(c, tag) : report_to_maker(c, id.maker, tag);
  MPI_Group world = MPI_GROUP_NULL, members = MPI_GROUP_NULL;
  mpi_check(MPI_Comm_group(MPI_COMM_WORLD, &world), "MPI_Comm_group");
  const int rc = MPI_Group_incl(world, c.nranks, table.data(), &members);
  MPI_Group_free(&world);
  mpi_check(rc, "MPI_Group_incl");
  const int made = MPI_Comm_create_group(MPI_COMM_WORLD, members, tag + 2, &c.mpi);
  MPI_Group_free(&members);
  mpi_check(made, "MPI_Comm_create_group");
  mpi_check(MPI_Comm_set_errhandler(c.mpi, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
  void* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &found);
  if (found && ub != nullptr) c.tag_span = std::clamp(*static_cast<int*>(ub) / 2, 1 << 14, 1 << 24);
}

}  // namespace

}  // namespace pd2bw_emu::nccl

using pd2bw_emu::nccl::CommState;


ncclResult_t ncclGetVersion(int* version) {
  if (version == nullptr) return pd2bw_emu::nccl::report(ncclInvalidArgument, "ncclGetVersion: version is null");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t result) {
  switch (result) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t) { return pd2bw_emu::nccl::tls_last_error.c_str(); }

ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* async_error) {
  if (comm == nullptr || async_error == nullptr)
    return pd2bw_emu::nccl::report(ncclInvalidArgument, "ncclCommGetAsyncError: a null argument");
  *async_error = static_cast<ncclResult_t>(comm->state->async_error.load());
  return ncclSuccess;
}

ncclResult_t ncclGetUniqueId(ncclUniqueId* unique_id) {
  using namespace pd2bw_emu::nccl;
  if (unique_id == nullptr) return report(ncclInvalidArgument, "ncclGetUniqueId: unique_id is null");
  static std::atomic<uint64_t> serial{0};
  IdFields id;
  id.magic = kIdMagic;
  id.maker = mpi_running() ? world_rank() : -1;
  id.serial = ++serial;
  std::memset(unique_id->internal, 0, sizeof unique_id->internal);
  std::memcpy(unique_id->internal, &id, sizeof id);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId comm_id, int rank) {
  using namespace pd2bw_emu::nccl;
  if (comm == nullptr) return report(ncclInvalidArgument, "ncclCommInitRank: comm is null");
  *comm = nullptr;
  if (nranks < 1 || rank < 0 || rank >= nranks)
    return report(ncclInvalidArgument, "ncclCommInitRank: rank " + std::to_string(rank) + " of " +
                                           std::to_string(nranks) + " ranks");
  IdFields id;
  std::memcpy(&id, comm_id.internal, sizeof id);
  if (id.magic != kIdMagic)
    return report(ncclInvalidArgument, "ncclCommInitRank: the id was not made by ncclGetUniqueId");
  auto state = std::make_shared<CommState>();
  state->nranks = nranks;
  state->rank = rank;
  state->sent.assign(static_cast<size_t>(nranks), 0);
  state->received.assign(static_cast<size_t>(nranks), 0);
  if (cudaGetDevice(&state->device) != cudaSuccess)
    return report(ncclUnhandledCudaError, "ncclCommInitRank: cudaGetDevice failed");
  if (nranks > 1) {
    try {
      connect(*state, id);
    } catch (const std::invalid_argument& e) {
      return report(ncclInvalidUsage, std::string("ncclCommInitRank: ") + e.what());
    } catch (const std::runtime_error& e) {
      return report(ncclSystemError, std::string("ncclCommInitRank: ") + e.what());
    }
  }
  *comm = new ncclComm{std::move(state)};
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  CommState& c = *comm->state;
  {
    std::unique_lock lock(c.mu);
    c.idle.wait(lock, [&] { return c.queued == 0; });
  }
  delete comm;  // the state goes with the last operation that holds it
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;
  comm->state->aborted = true;  // running operations see it within a poll; queued ones do nothing
  delete comm;
  return ncclSuccess;
}

ncclResult_t ncclCommCount(ncclComm_t comm, int* count) {
  if (comm == nullptr || count == nullptr)
    return pd2bw_emu::nccl::report(ncclInvalidArgument, "ncclCommCount: a null argument");
  *count = comm->state->nranks;
  return ncclSuccess;
}

ncclResult_t ncclCommUserRank(ncclComm_t comm, int* rank) {
  if (comm == nullptr || rank == nullptr)
    return pd2bw_emu::nccl::report(ncclInvalidArgument, "ncclCommUserRank: a null argument");
  *rank = comm->state->rank;
  return ncclSuccess;
}

ncclResult_t ncclCommCuDevice(ncclComm_t comm, int* device) {
  if (comm == nullptr || device == nullptr)
    return pd2bw_emu::nccl::report(ncclInvalidArgument, "ncclCommCuDevice: a null argument");
  *device = comm->state->device;
  return ncclSuccess;
}

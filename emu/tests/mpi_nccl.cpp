// The emulated NCCL in a real MPI job: ctest runs this under mpirun with 3 processes (and the cases
// marked skip, which need a job of their own, with 2). Every process runs every case in the same order;
// the communicators are made of MPI_COMM_WORLD's ranks in order unless a case says otherwise.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <mpi.h>
#include <nccl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// A tag of the test's own host messages (outside the emulation's set-up tags).
constexpr int kTestTag = 77;

// The communicator of world ranks `members` (NCCL rank k is members[k]), whose id `maker` makes and
// sends to the others; null on a process that is not a member.
ncclComm_t make_comm(const std::vector<int>& members, int maker) {
  const int me = world_rank();
  int rank = -1;
  for (size_t k = 0; k < members.size(); ++k)
    if (members[k] == me) rank = static_cast<int>(k);
  if (rank < 0) return nullptr;
  ncclUniqueId id{};
  if (me == maker) {
    REQUIRE(ncclGetUniqueId(&id) == ncclSuccess);
    for (const int m : members)
      if (m != me) MPI_Send(&id, sizeof id, MPI_BYTE, m, kTestTag, MPI_COMM_WORLD);
  } else {
    MPI_Recv(&id, sizeof id, MPI_BYTE, maker, kTestTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
  ncclComm_t comm = nullptr;
  REQUIRE(ncclCommInitRank(&comm, static_cast<int>(members.size()), id, rank) == ncclSuccess);
  return comm;
}

std::vector<int> everyone() {
  std::vector<int> all(static_cast<size_t>(world_size()));
  for (size_t k = 0; k < all.size(); ++k) all[k] = static_cast<int>(k);
  return all;
}

// Device memory holding `values`, read back with read(); freed with the object.
template <typename T>
struct Device {
  explicit Device(const std::vector<T>& values) : n(values.size()) {
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&p), std::max<size_t>(n, 1) * sizeof(T)) == cudaSuccess);
    if (n > 0) REQUIRE(cudaMemcpy(p, values.data(), n * sizeof(T), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
  // The values once `stream` has reached this point (the copy waits for the stream's earlier work).
  std::vector<T> read(cudaStream_t stream = nullptr) const {
    std::vector<T> v(n);
    if (n > 0) REQUIRE(cudaMemcpyAsync(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, stream) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
    return v;
  }
  T* p = nullptr;
  size_t n;
};

struct Stream {
  explicit Stream(unsigned flags = cudaStreamNonBlocking) {
    REQUIRE(cudaStreamCreateWithFlags(&s, flags) == cudaSuccess);
  }
  ~Stream() { cudaStreamDestroy(s); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t s = nullptr;
};

std::vector<int> iota_from(int first, size_t n) {
  std::vector<int> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = first + static_cast<int>(i);
  return v;
}

// Rank r's allreduce contribution: large, minus large, small, so that only adding ranks 0 and 1 first
// keeps the small value.
template <typename T>
std::vector<T> contribution(int r, size_t n) {
  const T large = sizeof(T) == 4 ? T(1e8) : T(1e17);  // adding the small value to it rounds the small away
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i) {
    const auto k = static_cast<T>(i % 7 + 1);
    v[i] = r % 3 == 0 ? large * k : r % 3 == 1 ? -large * k : k;
  }
  return v;
}

template <typename T>
void check_rank_order_sum(ncclDataType_t type) {
  const ncclComm_t comm = make_comm(everyone(), 0);
  constexpr size_t kN = 1031;
  Device<T> in_place(contribution<T>(world_rank(), kN)), out(std::vector<T>(kN, T{-1}));
  Device<T> in(contribution<T>(world_rank(), kN));
  REQUIRE(ncclAllReduce(in_place.p, in_place.p, kN, type, ncclSum, comm, nullptr) == ncclSuccess);
  REQUIRE(ncclAllReduce(in.p, out.p, kN, type, ncclSum, comm, nullptr) == ncclSuccess);
  const std::vector<T> got = in_place.read(), got_out = out.read();
  CHECK(in.read() == contribution<T>(world_rank(), kN));  // out of place: the input is left alone
  std::vector<std::vector<T>> all;
  for (int r = 0; r < world_size(); ++r) all.push_back(contribution<T>(r, kN));
  bool order_matters = false;
  for (size_t i = 0; i < kN; ++i) {
    T reference = all.front()[i], reversed = all.back()[i];
    for (size_t r = 1; r < all.size(); ++r) reference = reference + all[r][i];
    for (size_t r = all.size() - 1; r-- > 0;) reversed = reversed + all[r][i];
    REQUIRE(std::memcmp(&got[i], &reference, sizeof(T)) == 0);
    REQUIRE(std::memcmp(&got_out[i], &reference, sizeof(T)) == 0);
    order_matters = order_matters || reversed != reference;
  }
  if (world_size() >= 3) CHECK(order_matters);  // the data tells rank order from another one
  REQUIRE(ncclCommDestroy(comm) == ncclSuccess);
}

}  // namespace

TEST_CASE("a communicator of some processes: only its members call ncclCommInitRank, made by any of them") {
  const int n = world_size();
  const std::vector<int> members{n - 1, n - 2};  // NCCL rank 0 is the last process; the id's maker is rank 1
  const ncclComm_t comm = make_comm(members, n - 2);
  if (comm != nullptr) {
    int count = 0, rank = -1;
    CHECK(ncclCommCount(comm, &count) == ncclSuccess);
    CHECK(ncclCommUserRank(comm, &rank) == ncclSuccess);
    CHECK(count == 2);
    CHECK(members[static_cast<size_t>(rank)] == world_rank());
    Device<int> buf(rank == 0 ? iota_from(5, 1000) : std::vector<int>(1000, 0));
    if (rank == 0) CHECK(ncclSend(buf.p, 1000, ncclInt32, 1, comm, nullptr) == ncclSuccess);
    if (rank == 1) CHECK(ncclRecv(buf.p, 1000, ncclInt32, 0, comm, nullptr) == ncclSuccess);
    CHECK(buf.read() == iota_from(5, 1000));
    CHECK(ncclCommDestroy(comm) == ncclSuccess);
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("sends and receives in one group progress together: a ring exchange and a send to oneself") {
  const ncclComm_t comm = make_comm(everyone(), 0);
  const int r = world_rank(), n = world_size();
  constexpr size_t kN = 4099;
  Device<int> mine(iota_from(r * 10000, kN)), from_left(std::vector<int>(kN, -1)), from_self(std::vector<int>(kN, -1));
  Stream stream;
  REQUIRE(ncclGroupStart() == ncclSuccess);
  CHECK(ncclSend(mine.p, kN, ncclInt32, (r + 1) % n, comm, stream.s) == ncclSuccess);
  CHECK(ncclRecv(from_left.p, kN, ncclInt32, (r + n - 1) % n, comm, stream.s) == ncclSuccess);
  CHECK(ncclSend(mine.p, kN, ncclInt32, r, comm, stream.s) == ncclSuccess);
  CHECK(ncclRecv(from_self.p, kN, ncclInt32, r, comm, stream.s) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  CHECK(from_left.read(stream.s) == iota_from(((r + n - 1) % n) * 10000, kN));
  CHECK(from_self.read(stream.s) == iota_from(r * 10000, kN));
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("a call returns once queued, and sends meet receives in call order whatever order streams run them") {
  const ncclComm_t comm = make_comm(everyone(), 0);
  const int r = world_rank();
  Device<int> x(iota_from(100, 64)), y(iota_from(900, 64)), gate(std::vector<int>{42});
  Device<int> got_x(std::vector<int>(64, 0)), got_y(std::vector<int>(64, 0));
  Stream a, b;
  if (r == 0) {
    // x is sent after a receive that waits for rank 1's gate; y, sent later, goes at once on stream b.
    CHECK(ncclRecv(gate.p, 1, ncclInt32, 1, comm, a.s) == ncclSuccess);
    CHECK(ncclSend(x.p, 64, ncclInt32, 1, comm, a.s) == ncclSuccess);
    CHECK(ncclSend(y.p, 64, ncclInt32, 1, comm, b.s) == ncclSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CHECK(cudaStreamQuery(a.s) == cudaErrorNotReady);  // the gate is not sent yet
    CHECK(cudaStreamQuery(b.s) == cudaErrorNotReady);  // y waits for rank 1's second receive
    const int go = 1;
    MPI_Send(&go, 1, MPI_INT, 1, kTestTag, MPI_COMM_WORLD);
  } else if (r == 1) {
    CHECK(ncclRecv(got_x.p, 64, ncclInt32, 0, comm, a.s) == ncclSuccess);
    CHECK(ncclRecv(got_y.p, 64, ncclInt32, 0, comm, a.s) == ncclSuccess);
    int go = 0;
    MPI_Recv(&go, 1, MPI_INT, 0, kTestTag, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    CHECK(ncclSend(gate.p, 1, ncclInt32, 0, comm, b.s) == ncclSuccess);
    CHECK(got_x.read(a.s) == iota_from(100, 64));
    CHECK(got_y.read(a.s) == iota_from(900, 64));
  }
  CHECK(cudaStreamSynchronize(a.s) == cudaSuccess);
  CHECK(cudaStreamSynchronize(b.s) == cudaSuccess);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("ncclAllReduce adds in rank order, bit for bit, in place and out of place") {
  check_rank_order_sum<float>(ncclFloat32);
  check_rank_order_sum<double>(ncclFloat64);
}

TEST_CASE("ncclAllReduce's other reductions and integer types; a count of 0 touches nothing") {
  const ncclComm_t comm = make_comm(everyone(), 0);
  const int r = world_rank(), n = world_size();
  const std::vector<int> mine{r + 1, -(r + 1), 3 * r + 2};
  Device<int> sum(mine), prod(mine), max(mine), min(mine), avg(mine);
  Device<int64_t> wide(std::vector<int64_t>{int64_t{1} << (40 + r)});
  CHECK(ncclAllReduce(sum.p, sum.p, 3, ncclInt32, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(ncclAllReduce(prod.p, prod.p, 3, ncclInt32, ncclProd, comm, nullptr) == ncclSuccess);
  CHECK(ncclAllReduce(max.p, max.p, 3, ncclInt32, ncclMax, comm, nullptr) == ncclSuccess);
  CHECK(ncclAllReduce(min.p, min.p, 3, ncclInt32, ncclMin, comm, nullptr) == ncclSuccess);
  CHECK(ncclAllReduce(avg.p, avg.p, 3, ncclInt32, ncclAvg, comm, nullptr) == ncclSuccess);
  CHECK(ncclAllReduce(wide.p, wide.p, 1, ncclInt64, ncclSum, comm, nullptr) == ncclSuccess);
  CHECK(ncclAllReduce(nullptr, nullptr, 0, ncclFloat32, ncclSum, comm, nullptr) == ncclSuccess);
  std::vector<int> e_sum(3, 0), e_prod(3, 1), e_max(3, INT32_MIN), e_min(3, INT32_MAX);
  int64_t e_wide = 0;
  for (int k = 0; k < n; ++k) {
    const std::vector<int> v{k + 1, -(k + 1), 3 * k + 2};
    for (size_t i = 0; i < 3; ++i) {
      e_sum[i] += v[i], e_prod[i] *= v[i];
      e_max[i] = std::max(e_max[i], v[i]), e_min[i] = std::min(e_min[i], v[i]);
    }
    e_wide += int64_t{1} << (40 + k);
  }
  std::vector<int> e_avg = e_sum;
  for (int& v : e_avg) v /= n;
  CHECK(sum.read() == e_sum);
  CHECK(prod.read() == e_prod);
  CHECK(max.read() == e_max);
  CHECK(min.read() == e_min);
  CHECK(avg.read() == e_avg);
  CHECK(wide.read() == std::vector<int64_t>{e_wide});
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("ncclBroadcast from a root that is not rank 0, out of place") {
  const ncclComm_t comm = make_comm(everyone(), 0);
  const int root = world_size() - 1;
  std::vector<double> values(777);
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.25 * static_cast<double>(i) - 3.0;
  Device<double> send(world_rank() == root ? values : std::vector<double>(777, 0.0)),
      recv(std::vector<double>(777, -1.0));
  CHECK(ncclBroadcast(send.p, recv.p, 777, ncclFloat64, root, comm, nullptr) == ncclSuccess);
  CHECK(recv.read() == values);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("operations keep stream order with the stream's other work") {
  const ncclComm_t comm = make_comm(everyone(), 0);
  const int r = world_rank();
  Device<unsigned char> buf(std::vector<unsigned char>(1 << 16, 0));
  Stream s(cudaStreamDefault);
  if (r == 0) {  // the send reads the first memset's bytes, never the second's
    CHECK(cudaMemsetAsync(buf.p, 1, buf.n, s.s) == cudaSuccess);
    CHECK(ncclSend(buf.p, buf.n, ncclUint8, 1, comm, s.s) == ncclSuccess);
    CHECK(cudaMemsetAsync(buf.p, 2, buf.n, s.s) == cudaSuccess);
    CHECK(buf.read(s.s) == std::vector<unsigned char>(buf.n, 2));
  } else if (r == 1) {  // the copy after the receive sees what was received
    CHECK(ncclRecv(buf.p, buf.n, ncclUint8, 0, comm, s.s) == ncclSuccess);
    CHECK(buf.read(s.s) == std::vector<unsigned char>(buf.n, 1));
  }
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("a group on two streams: each stream waits for the whole group") {
  const ncclComm_t comm = make_comm(everyone(), 0);
  const int r = world_rank(), n = world_size();
  Device<int> mine(iota_from(r * 1000, 300)), got(std::vector<int>(300, -1));
  Stream a, b;
  REQUIRE(ncclGroupStart() == ncclSuccess);
  CHECK(ncclSend(mine.p, 300, ncclInt32, (r + 1) % n, comm, a.s) == ncclSuccess);
  CHECK(ncclRecv(got.p, 300, ncclInt32, (r + n - 1) % n, comm, b.s) == ncclSuccess);
  REQUIRE(ncclGroupEnd() == ncclSuccess);
  CHECK(got.read(a.s) == iota_from(((r + n - 1) % n) * 1000, 300));  // read on a: the receive was on b
  CHECK(cudaStreamSynchronize(b.s) == cudaSuccess);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("bad arguments are refused before anything is queued; a group with a refused call is dropped") {
  const ncclComm_t comm = make_comm(everyone(), 0);
  std::vector<int> host(4, 0);
  Device<int> dev(host);
  CHECK(ncclSend(host.data(), 4, ncclInt32, 0, comm, nullptr) == ncclInvalidArgument);  // host memory
  CHECK(ncclSend(dev.p, 5, ncclInt32, 0, comm, nullptr) == ncclInvalidArgument);        // past the end
  CHECK(ncclRecv(dev.p, 4, ncclInt32, world_size(), comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclSend(dev.p, 4, static_cast<ncclDataType_t>(42), 0, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclAllReduce(dev.p, dev.p, 2, ncclFloat16, ncclSum, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclBroadcast(dev.p, dev.p, 4, ncclInt32, -1, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclGroupEnd() == ncclInvalidUsage);
  REQUIRE(ncclGroupStart() == ncclSuccess);
  CHECK(ncclSend(dev.p, 4, ncclInt32, (world_rank() + 1) % world_size(), comm, nullptr) == ncclSuccess);
  CHECK(ncclRecv(host.data(), 4, ncclInt32, 0, comm, nullptr) == ncclInvalidArgument);
  CHECK(ncclGroupEnd() == ncclInvalidArgument);  // the send is dropped with it: nobody waits for it
  ncclComm_t none = nullptr;
  ncclUniqueId junk{};
  CHECK(ncclCommInitRank(&none, 2, junk, 0) == ncclInvalidArgument);
  CHECK(ncclCommInitRank(&none, 2, junk, 2) == ncclInvalidArgument);
  CHECK(std::string(ncclGetLastError(nullptr)).find("rank 2 of 2") != std::string::npos);
  CHECK(ncclCommDestroy(comm) == ncclSuccess);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST_CASE("ncclCommAbort returns at once, with a receive waiting for a send that never comes") {
  const ncclComm_t comm = make_comm({0, 1}, 0);
  if (world_rank() == 0) {
    Device<int> buf(std::vector<int>(1 << 20, 0));
    Stream s;
    CHECK(ncclRecv(buf.p, buf.n, ncclInt32, 1, comm, s.s) == ncclSuccess);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHECK(cudaStreamQuery(s.s) == cudaErrorNotReady);
    const auto start = std::chrono::steady_clock::now();
    CHECK(ncclCommAbort(comm) == ncclSuccess);
    CHECK(cudaStreamSynchronize(s.s) == cudaSuccess);  // the stream goes on
    CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  } else if (comm != nullptr) {
    CHECK(ncclCommDestroy(comm) == ncclSuccess);  // nothing queued: returns at once
  }
  MPI_Barrier(MPI_COMM_WORLD);
}

// Run in jobs of their own (ctest passes --no-skip and the case's name).
TEST_CASE("ncclCommInitRank refuses MPI below MPI_THREAD_MULTIPLE, saying so" * doctest::skip()) {
  ncclUniqueId id{};
  if (world_rank() == 0) ncclGetUniqueId(&id);
  MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD);
  ncclComm_t comm = nullptr;
  CHECK(ncclCommInitRank(&comm, world_size(), id, world_rank()) == ncclInvalidUsage);
  CHECK(comm == nullptr);
  CHECK(std::string(ncclGetLastError(nullptr)).find("MPI_THREAD_MULTIPLE") != std::string::npos);
}

TEST_CASE("a count mismatch fails the receiver's device with a message and an async error" * doctest::skip()) {
  const ncclComm_t comm = make_comm({0, 1}, 0);
  if (comm == nullptr) return;
  Device<int> buf(std::vector<int>(8, 3));
  if (world_rank() == 0) {
    CHECK(ncclSend(buf.p, 8, ncclInt32, 1, comm, nullptr) == ncclSuccess);
    CHECK(cudaStreamSynchronize(nullptr) == cudaSuccess);
  } else {
    CHECK(ncclRecv(buf.p, 4, ncclInt32, 0, comm, nullptr) == ncclSuccess);
    CHECK(cudaStreamSynchronize(nullptr) == cudaErrorLaunchFailure);
    ncclResult_t async = ncclSuccess;
    CHECK(ncclCommGetAsyncError(comm, &async) == ncclSuccess);
    CHECK(async == ncclInvalidUsage);
  }
  ncclCommAbort(comm);
}

int main(int argc, char** argv) {
  std::vector<char*> args;  // --mpi-funneled: initialise MPI with too low a thread level
  bool funneled = false;
  for (int k = 0; k < argc; ++k) {
    if (std::string(argv[k]) == "--mpi-funneled")
      funneled = true;
    else
      args.push_back(argv[k]);
  }
  int provided = 0;
  MPI_Init_thread(&argc, &argv, funneled ? MPI_THREAD_FUNNELED : MPI_THREAD_MULTIPLE, &provided);
  doctest::Context context(static_cast<int>(args.size()), args.data());
  const int rc = context.run();
  int mine = rc == 0 ? 0 : 1, failures = 0;  // one verdict: a failure on any process fails every one
  MPI_Allreduce(&mine, &failures, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Finalize();
  return failures;
}

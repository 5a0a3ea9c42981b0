// The mpi transport and the process group in a real MPI job: ctest runs this as
// `mpirun -np 3 test_comm_mpi` (and again with PD2BW_RANKS_PER_NODE=2). Every rank runs every test
// case in the same order, since most of them are collective.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "mpi/mpi_internal.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/process_group.hpp"

namespace ex = pd2bw::executor;

namespace {

ex::ProcessGroup* g_group = nullptr;

ex::ProcessGroup& group() { return *g_group; }

// What rank r contributes to the allreduce test: small, large, minus large, so that the sum depends on
// the order of addition ((small + large) - large loses small; small + (large - large) keeps it).
std::vector<float> contribution(int64_t r, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) {
    const auto k = static_cast<float>(i % 7 + 1);
    v[i] = r == 0 ? k : r == 1 ? 1e8f * k : -1e8f * k;
  }
  return v;
}

}  // namespace

TEST_CASE("the job has three processes, and this one knows its rank") {
  REQUIRE(group().size() == 3);
  const auto comm = group().make_comm("mpi", 0);
  CHECK(comm->rank() == group().rank());
  CHECK(comm->size() == 3);
  CHECK_FALSE(comm->accepts(ex::MemoryKind::device));
  CHECK(comm->accepts(ex::MemoryKind::host));
}

TEST_CASE("sends never wait, and each (source, tag) arrives in order with the tags kept apart") {
  const auto comm = group().make_comm("mpi", 0);
  constexpr int kMessages = 200;
  if (comm->rank() == 0) {
    for (int i = 0; i < kMessages; ++i) {  // nobody receives yet: every send returns at once
      const std::vector<int> a{i, i + 1}, b{-i};
      comm->send(1, 5, std::span<const int>(a));
      comm->send(1, 6, std::span<const int>(b));
    }
  } else if (comm->rank() == 1) {
    std::vector<int> b(1), a(2);
    for (int i = 0; i < kMessages; ++i) {  // tag 6 first: tag 5's messages wait their turn
      comm->recv(0, 6, std::span<int>(b));
      CHECK(b[0] == -i);
    }
    for (int i = 0; i < kMessages; ++i) {
      comm->recv(0, 5, std::span<int>(a));
      CHECK(a == std::vector<int>{i, i + 1});
    }
  }
  group().barrier();
}

TEST_CASE("a receive of the wrong size is an error naming both sizes") {
  const auto comm = group().make_comm("mpi", 0);
  if (comm->rank() == 0) {
    const std::vector<double> two{1.0, 2.0};
    comm->send(2, 9, std::span<const double>(two));
  } else if (comm->rank() == 2) {
    std::vector<double> one(1), two(2);
    CHECK_THROWS_WITH_AS(comm->recv(0, 9, std::span<double>(one)), doctest::Contains("has 16 bytes, expected 8"), pd2bw::Error);
    comm->recv(0, 9, std::span<double>(two));  // the message is still there for the right receive
    CHECK(two == std::vector<double>{1.0, 2.0});
  }
  group().barrier();
}

TEST_CASE("messages above a piece travel as several and arrive whole; empty messages too") {
  ex::mpi::Port port(MPI_COMM_WORLD, 1000);
  std::vector<unsigned char> big(2500), empty;
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<unsigned char>(i * 7 + 3);
  if (port.rank() == 0) {
    port.send(1, 3, big.data(), big.size());
    port.send(1, 3, empty.data(), 0);
    port.send(1, 4, big.data(), 1000);
  } else if (port.rank() == 1) {
    std::vector<unsigned char> got(2500, 0), exact(1000, 0);
    port.recv(0, 3, got.data(), got.size());
    CHECK(got == big);
    port.recv(0, 3, empty.data(), 0);
    CHECK(port.recv_any(0, exact.data(), exact.size()) == 4);
    CHECK(std::memcmp(exact.data(), big.data(), 1000) == 0);
  }
  group().barrier();
}

TEST_CASE("allreduce_sum over MPI is the fixed-order sum, bit for bit, on every member") {
  const auto comm = group().make_comm("mpi", 0);
  const ex::Group all = comm->group({0, 1, 2});
  constexpr size_t kN = 1031;
  std::vector<float> mine = contribution(comm->rank(), kN);
  comm->allreduce_sum(all, std::span<float>(mine));
  const auto a = contribution(0, kN), b = contribution(1, kN), c = contribution(2, kN);
  bool order_matters = false;
  for (size_t i = 0; i < kN; ++i) {
    const float reference = (a[i] + b[i]) + c[i];
    REQUIRE(std::memcmp(&mine[i], &reference, sizeof(float)) == 0);
    order_matters = order_matters || (a[i] + (b[i] + c[i])) != reference;
  }
  CHECK(order_matters);  // the data tells the fixed order from another one
}

TEST_CASE("overlapping groups are made once, agree on ids, and sum apart") {
  const auto comm = group().make_comm("mpi", 0);
  const int64_t r = comm->rank();
  std::vector<ex::Group> mine;
  if (r != 2) mine.push_back(comm->group({0, 1}));
  if (r != 0) mine.push_back(comm->group({1, 2}));
  mine.push_back(comm->group({2, 1, 0}));
  for (const auto& g : mine) {
    std::vector<double> v{static_cast<double>(r + 1)};
    comm->allreduce_sum(g, std::span<double>(v));
    double expect = 0;
    for (const int64_t m : g.members()) expect += static_cast<double>(m + 1);
    CHECK(v[0] == expect);
  }
  CHECK(mine.back().position() == 2 - r);
  CHECK(mine.back().members() == std::vector<int64_t>{2, 1, 0});
  if (mine.size() == 3) CHECK(mine[0].id() != mine[1].id());
}

TEST_CASE("all_agree is true only when every process says yes") {
  CHECK(group().all_agree(true));
  CHECK_FALSE(group().all_agree(group().rank() != 1));
  CHECK_FALSE(group().all_agree(false));
}

TEST_CASE("nodes: one host is one node, or PD2BW_RANKS_PER_NODE's blocks of ranks") {
  const auto node_of = group().node_of_ranks();
  REQUIRE(node_of.size() == 3);
  const char* k = std::getenv("PD2BW_RANKS_PER_NODE");
  if (k != nullptr && std::string(k) == "2") {
    CHECK(node_of == std::vector<int64_t>{0, 0, 1});
    CHECK(group().nodes() == 2);
    CHECK(group().node_rank() == group().rank() % 2);
  } else {
    CHECK(node_of == std::vector<int64_t>{0, 0, 0});  // mpirun on this one host
    CHECK(group().nodes() == 1);
    CHECK(group().node_rank() == group().rank());
  }
  CHECK(group().node() == node_of[static_cast<size_t>(group().rank())]);
  CHECK_FALSE(group().host().empty());
}

TEST_CASE("a device transport this build lacks is refused by name") {
  CHECK_THROWS_WITH_AS(group().make_comm("carrier-pigeon", 0), doctest::Contains("carrier-pigeon"), pd2bw::UsageError);
}

int main(int argc, char** argv) {
  int failures = 0;
  {
    auto joined = ex::join_process_group();
    g_group = joined.get();
    doctest::Context context(argc, argv);
    const int rc = context.run();
    // One verdict for the job: a failure on any rank fails every rank.
    failures = joined->all_agree(rc == 0) ? 0 : 1;
    g_group = nullptr;
  }
  return failures;
}

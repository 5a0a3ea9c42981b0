// The threads transport and the Comm contract: per-(source, tag) FIFO order, the allreduce bit-identical
// on every member and equal to the fixed-order reference sum, tags outside the allowed range rejected,
// group checks, and an abort that wakes a blocked receiver.
#include <doctest/doctest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/backend.hpp"
#include "pd2bw/executor/comm.hpp"

using namespace pd2bw;
using namespace pd2bw::executor;

namespace {

// Values of very different magnitudes, so the sum's bits depend on the order of the additions.
template <typename T>
std::vector<T> values_of(int64_t rank, size_t n) {
  std::vector<T> v(n);
  for (size_t i = 0; i < n; ++i)
    v[i] = static_cast<T>(std::sin(static_cast<double>(rank * 131 + static_cast<int64_t>(i) * 7 + 1)) *
                          std::pow(10.0, static_cast<double>((rank + static_cast<int64_t>(i)) % 9) - 4.0));
  return v;
}

template <typename T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

template <typename T>
void check_allreduce(int64_t ranks, const std::vector<int64_t>& members) {
  const size_t n = 257;
  std::vector<T> ref = values_of<T>(members[0], n), reversed = values_of<T>(members.back(), n);
  for (size_t g = 1; g < members.size(); ++g) {
    const auto v = values_of<T>(members[g], n);
    for (size_t i = 0; i < n; ++i) ref[i] += v[i];  // ((g0 + g1) + g2) + ...
  }
  for (size_t g = members.size() - 1; g-- > 0;) {
    const auto v = values_of<T>(members[g], n);
    for (size_t i = 0; i < n; ++i) reversed[i] += v[i];
  }
  // The data is chosen so that the order matters (from three members on; a + b == b + a): otherwise
  // this test could not tell orders apart.
  if (members.size() >= 3) REQUIRE_FALSE(same_bits(ref, reversed));
  auto comms = make_threads_comms(ranks);
  std::vector<std::vector<T>> out(static_cast<size_t>(ranks));
  run_on_threads(comms, [&](Comm& comm) {
    if (std::find(members.begin(), members.end(), comm.rank()) == members.end()) return;
    const Group g = comm.group(members);
    auto v = values_of<T>(comm.rank(), n);
    for (int rep = 0; rep < 3; ++rep) {  // the same group reused: each sum restarts from fresh values
      v = values_of<T>(comm.rank(), n);
      comm.allreduce_sum(g, std::span<T>(v));
    }
    out[static_cast<size_t>(comm.rank())] = v;
  });
  for (int64_t m : members) CHECK(same_bits(out[static_cast<size_t>(m)], ref));
}

}  // namespace

TEST_CASE("messages from one source under one tag arrive in send order; tags are separate queues") {
  auto comms = make_threads_comms(3);
  constexpr int kCount = 200;
  std::vector<int64_t> got_a, got_b, got_c;
  run_on_threads(comms, [&](Comm& comm) {
    if (comm.rank() == 1) {
      for (int64_t i = 0; i < kCount; ++i) {
        comm.send(0, 5, std::span<const int64_t>(&i, 1));
        const int64_t j = 1000 + i;
        comm.send(0, kMaxUserTag, std::span<const int64_t>(&j, 1));
      }
    } else if (comm.rank() == 2) {
      for (int64_t i = 0; i < kCount; ++i) comm.send(0, 5, std::span<const int64_t>(&i, 1));
    } else {
      int64_t x = 0;
      // Drain tag kMaxUserTag first: messages under another tag must not block or reorder it.
      for (int i = 0; i < kCount; ++i) {
        comm.recv(1, kMaxUserTag, std::span<int64_t>(&x, 1));
        got_b.push_back(x);
      }
      for (int i = 0; i < kCount; ++i) {
        comm.recv(2, 5, std::span<int64_t>(&x, 1));
        got_c.push_back(x);
        comm.recv(1, 5, std::span<int64_t>(&x, 1));
        got_a.push_back(x);
      }
    }
  });
  for (int64_t i = 0; i < kCount; ++i) {
    CHECK(got_a[static_cast<size_t>(i)] == i);
    CHECK(got_b[static_cast<size_t>(i)] == 1000 + i);
    CHECK(got_c[static_cast<size_t>(i)] == i);
  }
}

TEST_CASE("a size mismatch is an error naming both sizes") {
  auto comms = make_threads_comms(2);
  CHECK_THROWS_WITH_AS(run_on_threads(comms,
                                      [](Comm& comm) {
                                        std::vector<float> v(3, 1.0f);
                                        if (comm.rank() == 1) comm.send(0, 0, std::span<const float>(v));
                                        v.resize(4);
                                        if (comm.rank() == 0) comm.recv(1, 0, std::span<float>(v));
                                      }),
                       doctest::Contains("has 12 bytes, expected 16"), pd2bw::Error);
}

TEST_CASE("the allreduce is bit-identical on all members and equals the fixed-order reference") {
  check_allreduce<double>(4, {0, 1, 2, 3});
  check_allreduce<float>(4, {0, 1, 2, 3});
  check_allreduce<float>(5, {3, 1, 4});  // members in a non-sorted order; ranks 0 and 2 stay out
  check_allreduce<double>(5, {2});       // a group of one leaves the values alone
}

TEST_CASE("two groups with shared members keep their sums apart") {
  auto comms = make_threads_comms(3);
  std::vector<double> a(3), b(3);
  run_on_threads(comms, [&](Comm& comm) {
    const int64_t r = comm.rank();
    std::vector<Group> gs;
    if (r != 2) gs.push_back(comm.group({0, 1}));  // made in the same order by the members they share
    if (r != 0) gs.push_back(comm.group({1, 2}));
    std::vector<double> x{1.0 + static_cast<double>(r)}, y{10.0 * (1.0 + static_cast<double>(r))};
    if (r != 2) comm.allreduce_sum(gs.front(), std::span<double>(x));
    if (r != 0) comm.allreduce_sum(gs.back(), std::span<double>(y));
    a[static_cast<size_t>(r)] = x[0];
    b[static_cast<size_t>(r)] = y[0];
  });
  CHECK(a[0] == 3.0);
  CHECK(a[1] == 3.0);
  CHECK(b[1] == 50.0);
  CHECK(b[2] == 50.0);
}

TEST_CASE("tags outside [0, kMaxUserTag] and bad peers or groups are rejected") {
  auto comms = make_threads_comms(2);
  Comm& c = *comms[0];
  double x = 0;
  const std::span<const double> one(&x, 1);
  CHECK_THROWS_AS(c.send(1, -1, one), pd2bw::UsageError);
  CHECK_THROWS_AS(c.send(1, kMaxUserTag + 1, one), pd2bw::UsageError);  // the Comm's own collective tags
  CHECK_THROWS_AS(c.send(1, kMaxTag + 1, one), pd2bw::UsageError);
  CHECK_THROWS_AS(c.recv(1, 1 << 20, std::span<double>(&x, 1)), pd2bw::UsageError);
  CHECK_THROWS_AS(c.send(0, 1, one), pd2bw::UsageError);  // itself
  CHECK_THROWS_AS(c.send(2, 1, one), pd2bw::UsageError);  // not in the job
  CHECK_THROWS_AS(c.group({1}), pd2bw::UsageError);       // without this rank
  CHECK_THROWS_AS(c.group({0, 0}), pd2bw::UsageError);
  CHECK_THROWS_AS(c.group({0, 2}), pd2bw::UsageError);
  Group theirs;
  run_on_threads(comms, [&](Comm& comm) {
    const Group g = comm.group({0, 1});
    if (comm.rank() == 1) theirs = g;
  });
  std::vector<double> v(2);
  CHECK_THROWS_AS(c.allreduce_sum(theirs, std::span<double>(v)), pd2bw::UsageError);  // another rank's
  CHECK_THROWS_AS(c.allreduce_sum(Group{}, std::span<double>(v)), pd2bw::UsageError);
  c.send(1, 0, one);  // the bounds themselves are fine
  c.send(1, kMaxUserTag, one);
  comms[1]->recv(0, 0, std::span<double>(&x, 1));
  comms[1]->recv(0, kMaxUserTag, std::span<double>(&x, 1));
}

TEST_CASE("the threads transport takes device memory exactly when the build has a device backend") {
  auto comms = make_threads_comms(2);
  const auto names = backend_names();
  const bool built = std::find(names.begin(), names.end(), "cuda") != names.end();
  CHECK(comms[0]->accepts(MemoryKind::host));
  CHECK(comms[0]->accepts(MemoryKind::device) == built);
  double x = 0;
  if (!built)
    CHECK_THROWS_AS(comms[0]->send(1, 0, ConstMessageBuffer{&x, sizeof x, MemoryKind::device}), pd2bw::UsageError);
}

TEST_CASE("abort wakes a receiver that is blocked and fails later calls") {
  auto comms = make_threads_comms(2);
  std::string error;
  std::thread receiver([&] {
    double x = 0;
    try {
      comms[0]->recv(1, 3, std::span<double>(&x, 1));  // nothing is ever sent
    } catch (const pd2bw::Error& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  comms[1]->abort("rank 1 gave up");
  receiver.join();
  CHECK(error == "rank 1 gave up");
  double x = 0;
  CHECK_THROWS_WITH_AS(comms[0]->send(1, 0, std::span<const double>(&x, 1)), "rank 1 gave up", pd2bw::Error);
}

TEST_CASE("run_on_threads rethrows the first failure and stops the ranks waiting on it") {
  auto comms = make_threads_comms(3);
  CHECK_THROWS_WITH_AS(run_on_threads(comms,
                                      [](Comm& comm) {
                                        double x = 0;
                                        if (comm.rank() == 2) throw pd2bw::UsageError("bad input on rank 2");
                                        comm.recv(2, 0, std::span<double>(&x, 1));  // would wait forever
                                      }),
                       "bad input on rank 2", pd2bw::UsageError);
}

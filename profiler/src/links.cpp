// Times links: point-to-point round trips between two ranks and Comm::allreduce_sum<float> over a group.
// The same measurements run on any Comm: on the threads transport (ranks are threads of this process)
// or on the mpi transport between the processes of a job (process_links.cpp).
#include <algorithm>
#include <chrono>
#include <cstddef>
#include <exception>
#include <mutex>
#include <span>
#include <thread>

#include "measure.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/comm.hpp"

namespace pd2bw::profiler::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kTag = 7;  // the only point-to-point traffic of a link measurement
constexpr int64_t kWarmup = 1;

double ms_since(Clock::time_point t0) {
  return std::max(1e-6, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
}

// Runs body(comm) on one thread per rank of a threads job. If a rank throws, the job is aborted so that
// its peers stop waiting, and the first failure is rethrown here once every thread has finished.
template <typename Body>
void run_ranks(int64_t ranks, Body body) {
  auto comms = executor::make_threads_comms(ranks);
  std::exception_ptr failure;
  std::mutex mutex;
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      executor::Comm& comm = *comms[static_cast<size_t>(r)];
      try {
        body(comm);
      } catch (...) {
        {
          const std::lock_guard<std::mutex> lock(mutex);
          if (!failure) failure = std::current_exception();
        }
        comm.abort("profiler: a link measurement failed on another rank");
      }
    });
  }
  for (auto& t : threads) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

double p2p_ms_on(executor::Comm& comm, int64_t first, int64_t second, int64_t bytes, int64_t reps) {
  std::vector<std::byte> buffer(static_cast<size_t>(bytes));
  std::vector<double> samples;
  for (int64_t i = 0; i < kWarmup + reps; ++i) {
    if (comm.rank() == second) {
      comm.recv(first, kTag, std::span<std::byte>(buffer));
      comm.send(first, kTag, std::span<const std::byte>(buffer));
      continue;
    }
    const auto t0 = Clock::now();
    comm.send(second, kTag, std::span<const std::byte>(buffer));
    comm.recv(second, kTag, std::span<std::byte>(buffer));
    if (i >= kWarmup) samples.push_back(ms_since(t0) / 2);
  }
  return comm.rank() == first ? summarize(samples).median : 0.0;
}

double allreduce_ms_on(executor::Comm& comm, const executor::Group& group, int64_t bytes, int64_t reps) {
  const auto n = static_cast<size_t>(group.size());
  const auto me = static_cast<size_t>(group.position());
  // Zeros stay zeros however often they are summed, so repeated rounds never overflow.
  std::vector<float> values(static_cast<size_t>(bytes) / sizeof(float), 0.0f);
  std::vector<double> start(1), times(n);
  std::vector<double> samples;
  for (int64_t i = 0; i < kWarmup + reps; ++i) {
    comm.allreduce_sum(group, std::span<double>(start));  // a common start: nobody leaves before all arrive
    const auto t0 = Clock::now();
    comm.allreduce_sum(group, std::span<float>(values));
    std::fill(times.begin(), times.end(), 0.0);
    times[me] = ms_since(t0);
    comm.allreduce_sum(group, std::span<double>(times));  // x + 0 + ... + 0 == x: everyone's time, exactly
    if (i >= kWarmup) samples.push_back(*std::max_element(times.begin(), times.end()));
  }
  return summarize(samples).median;
}

double measure_p2p_ms(int64_t bytes, int64_t reps) {
  double ms = 0;
  run_ranks(2, [&](executor::Comm& comm) {
    const double v = p2p_ms_on(comm, 0, 1, bytes, reps);
    if (comm.rank() == 0) ms = v;
  });
  return ms;
}

double measure_allreduce_ms(int64_t bytes, int64_t ranks, int64_t reps) {
  std::vector<int64_t> members(static_cast<size_t>(ranks));
  for (int64_t r = 0; r < ranks; ++r) members[static_cast<size_t>(r)] = r;
  double ms = 0;
  run_ranks(ranks, [&](executor::Comm& comm) {
    const executor::Group all = comm.group(members);
    const double v = allreduce_ms_on(comm, all, bytes, reps);
    if (comm.rank() == 0) ms = v;
  });
  return ms;
}

}  // namespace pd2bw::profiler::detail

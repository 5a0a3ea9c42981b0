// Times the in-process links: point-to-point messages between two ranks and Comm::allreduce_sum<float> over
// several, with the ranks as threads of this process (the executor's threads transport).
#include <algorithm>
#include <barrier>
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
constexpr int64_t kTag = 7;  // the only traffic of these throwaway jobs

double ms_since(Clock::time_point t0) {
  return std::max(1e-6, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
}

// Runs body(rank, comm) on one thread per rank. If a rank throws, the job is aborted so that its peers
// stop waiting, and the first failure is rethrown here once every thread has finished.
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
        body(r, comm);
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

double measure_p2p_ms(int64_t bytes, int64_t reps) {
  std::vector<double> samples;
  constexpr int64_t kWarmup = 1;
  run_ranks(2, [&](int64_t rank, executor::Comm& comm) {
    std::vector<std::byte> buffer(static_cast<size_t>(bytes));
    for (int64_t i = 0; i < kWarmup + reps; ++i) {
      if (rank == 1) {
        comm.recv(0, kTag, std::span<std::byte>(buffer));
        comm.send(0, kTag, std::span<const std::byte>(buffer));
        continue;
      }
      const auto t0 = Clock::now();
      comm.send(1, kTag, std::span<const std::byte>(buffer));
      comm.recv(1, kTag, std::span<std::byte>(buffer));
      if (i >= kWarmup) samples.push_back(ms_since(t0) / 2);  // rank 0 alone writes samples
    }
  });
  return summarize(samples).median;
}

double measure_allreduce_ms(int64_t bytes, int64_t ranks, int64_t reps) {
  constexpr int64_t kWarmup = 1;
  const int64_t rounds = kWarmup + reps;
  // per_rank[round][rank]: each rank writes only its own slots.
  std::vector<std::vector<double>> per_rank(static_cast<size_t>(rounds),
                                           std::vector<double>(static_cast<size_t>(ranks)));
  std::vector<int64_t> group(static_cast<size_t>(ranks));
  for (int64_t r = 0; r < ranks; ++r) group[static_cast<size_t>(r)] = r;
  std::barrier start(static_cast<std::ptrdiff_t>(ranks));
  run_ranks(ranks, [&](int64_t rank, executor::Comm& comm) {
    // Zeros stay zeros however often they are summed, so repeated rounds never overflow.
    std::vector<float> values(static_cast<size_t>(bytes) / sizeof(float), 0.0f);
    const executor::Group all = comm.group(group);
    try {
      for (int64_t i = 0; i < rounds; ++i) {
        start.arrive_and_wait();
        const auto t0 = Clock::now();
        comm.allreduce_sum(all, std::span<float>(values));
        per_rank[static_cast<size_t>(i)][static_cast<size_t>(rank)] = ms_since(t0);
      }
    } catch (...) {
      start.arrive_and_drop();  // peers waiting at the barrier go on, meet the abort and stop too
      throw;
    }
  });
  std::vector<double> samples;
  for (int64_t i = kWarmup; i < rounds; ++i) {
    const auto& round = per_rank[static_cast<size_t>(i)];
    samples.push_back(*std::max_element(round.begin(), round.end()));
  }
  return summarize(samples).median;
}

}  // namespace pd2bw::profiler::detail

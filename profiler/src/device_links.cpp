// Times the links between stages on one GPU: point-to-point messages and the replicas' sum
// (Comm::allreduce_sum<float>) over device buffers, with each rank a thread holding a backend of its own
// (as the trainer runs several stages on one GPU), so the times include the threads transport's
// device-to-device copies and, for the sum, its staging through host memory.
#include <algorithm>
#include <barrier>
#include <chrono>
#include <memory>

#include "measure.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/comm.hpp"

namespace pd2bw::profiler::detail {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int64_t kTag = 7;  // the only traffic of these throwaway jobs
constexpr int64_t kWarmup = 1;

double ms_since(Clock::time_point t0) {
  return std::max(1e-6, std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
}

// A device buffer of `bytes` (zeros) on a rank's own backend, described for Comm.
struct DeviceMessage {
  std::unique_ptr<executor::Backend> backend;
  executor::Buffer buffer;
  DeviceMessage(const std::string& name, int64_t bytes) : backend(executor::make_backend(name)) {
    buffer = backend->alloc(executor::DType::f32, bytes / 4);
    backend->fill_zero(buffer.view());
    backend->synchronize();
  }
  executor::MessageBuffer message() {
    return {buffer.data<void>(), static_cast<size_t>(buffer.bytes()), executor::MemoryKind::device};
  }
  executor::Stream stream() { return {backend->native_stream()}; }
};

}  // namespace

double measure_device_p2p_ms(const std::string& backend, int64_t bytes, int64_t reps) {
  std::vector<double> samples;
  const auto comms = executor::make_threads_comms(2);
  executor::run_on_threads(comms, [&](executor::Comm& comm) {
    DeviceMessage m(backend, bytes);
    for (int64_t i = 0; i < kWarmup + reps; ++i) {
      if (comm.rank() == 1) {
        comm.recv(0, kTag, m.message(), m.stream());
        comm.send(0, kTag, m.message(), m.stream());
        continue;
      }
      const auto t0 = Clock::now();
      comm.send(1, kTag, m.message(), m.stream());
      comm.recv(1, kTag, m.message(), m.stream());
      m.backend->synchronize();  // the reply is in this rank's buffer
      if (i >= kWarmup) samples.push_back(ms_since(t0) / 2);
    }
  });
  return summarize(samples).median;
}

double measure_device_allreduce_ms(const std::string& backend, int64_t bytes, int64_t ranks, int64_t reps) {
  const int64_t rounds = kWarmup + reps;
  std::vector<std::vector<double>> per_rank(static_cast<size_t>(rounds), std::vector<double>(static_cast<size_t>(ranks)));
  std::vector<int64_t> members(static_cast<size_t>(ranks));
  for (int64_t r = 0; r < ranks; ++r) members[static_cast<size_t>(r)] = r;
  std::barrier start(static_cast<std::ptrdiff_t>(ranks));
  const auto comms = executor::make_threads_comms(ranks);
  executor::run_on_threads(comms, [&](executor::Comm& comm) {
    DeviceMessage m(backend, bytes);  // zeros stay zeros however often they are summed
    const executor::Group all = comm.group(members);
    try {
      for (int64_t i = 0; i < rounds; ++i) {
        start.arrive_and_wait();
        const auto t0 = Clock::now();
        comm.allreduce_sum(all, executor::ScalarType::f32, m.message(), m.stream());
        m.backend->synchronize();
        per_rank[static_cast<size_t>(i)][static_cast<size_t>(comm.rank())] = ms_since(t0);
      }
    } catch (...) {
      start.arrive_and_drop();  // peers waiting at the barrier go on, meet the abort and stop too
      throw;
    }
  });
  return median_of_slowest(per_rank, kWarmup);
}

}  // namespace pd2bw::profiler::detail

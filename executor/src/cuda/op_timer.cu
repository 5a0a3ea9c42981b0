// The per-op GPU times of PD2BW_CUDA_OP_PROFILE (see op_timer.hpp).
#include "cuda/op_timer.hpp"

#include "pd2bw/schemas/files.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>

namespace pd2bw::executor::cuda {

std::unique_ptr<OpTimer> OpTimer::from_environment() {
  const char* path = std::getenv("PD2BW_CUDA_OP_PROFILE");
  if (path == nullptr || *path == '\0') return nullptr;
  return std::make_unique<OpTimer>(path);
}

void OpTimer::begin(const char* op, cudaStream_t stream) {
  Record r{op, make_event(true), make_event(true)};
  check(cudaEventRecord(r.start.get(), stream), "cudaEventRecord (op timer)");
  records_.push_back(std::move(r));
}

void OpTimer::end(cudaStream_t stream) {
  if (!records_.empty()) (void)cudaEventRecord(records_.back().stop.get(), stream);
}

OpTimer::~OpTimer() {
  std::map<std::string, std::pair<int64_t, double>> totals;  // op -> (calls, ms)
  for (const Record& r : records_) {
    float ms = 0;
    if (cudaEventSynchronize(r.stop.get()) != cudaSuccess ||
        cudaEventElapsedTime(&ms, r.start.get(), r.stop.get()) != cudaSuccess) {
      (void)cudaGetLastError();
      continue;
    }
    auto& t = totals[r.op];
    ++t.first;
    t.second += ms;
  }
  std::string line = "{\"ops\": {";
  bool first = true;
  for (const auto& [op, t] : totals) {
    line += (first ? "\"" : ", \"") + op + "\": {\"calls\": " + std::to_string(t.first) +
            ", \"ms\": " + std::to_string(t.second) + "}";
    first = false;
  }
  line += "}}\n";
  static std::mutex mutex;  // several stages' backends may end at once
  const std::lock_guard<std::mutex> lock(mutex);
  // Appended without following a link at the path (the one way pd2bw opens a file it writes).
  const schemas::WriteFd out = schemas::open_for_writing(path_, schemas::WriteOpen::create_or_open, 0644);
  if (out.fd < 0) return;  // an opt-in trace: a path that cannot be written loses it, as before
  if (lseek(out.fd, 0, SEEK_END) >= 0) (void)!write(out.fd, line.data(), line.size());
  close(out.fd);
}

}  // namespace pd2bw::executor::cuda

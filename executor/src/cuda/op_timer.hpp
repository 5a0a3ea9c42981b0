// Where a step's time goes on the GPU, op by op: with PD2BW_CUDA_OP_PROFILE=FILE in the environment,
// each cuda backend records a pair of events around every op and, when it is destroyed, appends one
// JSON line {"ops": {"<op>": {"calls": N, "ms": total}, ...}} to FILE. Off (and free) otherwise. The
// events cost a few microseconds of launch time per op, so timings with it on are slightly pessimistic.
// Private to the cuda backend.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_api.hpp"

namespace pd2bw::executor::cuda {

class OpTimer {
 public:
  // Null unless PD2BW_CUDA_OP_PROFILE names a file.
  static std::unique_ptr<OpTimer> from_environment();
  explicit OpTimer(std::string path) : path_(std::move(path)) {}
  ~OpTimer();  // waits for the recorded events and appends the line (errors are ignored: no throw)
  OpTimer(const OpTimer&) = delete;
  OpTimer& operator=(const OpTimer&) = delete;

  // Records the start of `op` (a string literal) on the stream; end() closes the op begun last.
  void begin(const char* op, cudaStream_t stream);
  void end(cudaStream_t stream);

 private:
  struct Record {
    const char* op;
    EventHandle start, stop;
  };
  std::string path_;
  std::vector<Record> records_;
};

}  // namespace pd2bw::executor::cuda

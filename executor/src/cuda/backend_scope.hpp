// Brackets one op of the cuda backend with the OpTimer's events (nothing when it is off). Private to the
// cuda backend's sources.
#pragma once

#include "cuda/cuda_backend.hpp"
#include "cuda/op_timer.hpp"

namespace pd2bw::executor::cuda {

class CudaBackend::Scope {
 public:
  Scope(CudaBackend& be, const char* op) : be_(be) {
    if (be_.op_timer_) be_.op_timer_->begin(op, be_.stream());
  }
  ~Scope() {
    if (be_.op_timer_) be_.op_timer_->end(be_.stream());
  }
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  CudaBackend& be_;
};

}  // namespace pd2bw::executor::cuda

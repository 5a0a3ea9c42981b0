// The CUDA linear layer (cpu reference: executor/src/cpu/linear.cpp): y = x W^T + bias and its backward,
// every product through cuBLASLt (bf16 or fp32 in, fp32 accumulate, strict fp32 for fp32 so that it
// matches the reference; the bias as an epilogue), with plain cuBLAS as the fallback for a shape or
// alignment cuBLASLt has no algorithm for. One object per backend: its handles, its workspace and its
// plans (descriptors and the chosen algorithm per shape) live as long as the backend. Private.
#pragma once

#include <cstdint>
#include <memory>

#include "cuda/cuda_api.hpp"

namespace pd2bw::executor::cuda {

class Linear {
 public:
  Linear();
  ~Linear();
  Linear(const Linear&) = delete;
  Linear& operator=(const Linear&) = delete;

  // x: (N, In), weight: (Out, In), bias: (Out) or null, y: (N, Out). T: float or bf16_t.
  template <typename T>
  void forward(const T* x, const T* weight, const T* bias, T* y, int64_t n, int64_t in, int64_t out, cudaStream_t stream);
  // dy: (N, Out), x: (N, In), weight: (Out, In); dx: (N, In) overwritten, or null; dweight: (Out, In) +=;
  // dbias: (Out) += column sums of dy, or null; ones: (N) of 1 when dbias is given.
  template <typename T>
  void backward(const T* dy, const T* x, const T* weight, T* dx, float* dweight, float* dbias, const T* ones, int64_t n,
                int64_t in, int64_t out, cudaStream_t stream);

  // Bytes of device memory the object holds (its workspace), outside every arena.
  int64_t workspace_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace pd2bw::executor::cuda

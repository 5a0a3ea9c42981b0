// CUDA SGD with momentum over a stage's whole flat fp32 buffer in one launch (cpu reference: sgd_step in
// executor/src/optimizer.cpp), chunked like adamw.cu; double arithmetic, each operation rounded alone.
#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {
namespace {

constexpr int kThreads = 256;

// chunks: (num_chunks), one per block; p_in, g, momentum, p_out: the flat buffers (p_out may be p_in).
static __global__ void __launch_bounds__(kThreads)
    sgd_kernel(SgdArgs a, const OptimizerChunk* chunks, const float* p_in, const float* g, float* momentum,
               float* p_out) {
  const OptimizerChunk ch = chunks[blockIdx.x];
  const double decay = ch.matrix != 0 ? a.weight_decay : 0.0;
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += kThreads) {
    const double p = static_cast<double>(p_in[i]);
    const double gi = __dadd_rn(__dmul_rn(static_cast<double>(g[i]), a.grad_scale), __dmul_rn(decay, p));
    const double buf = __dadd_rn(__dmul_rn(a.momentum, static_cast<double>(momentum[i])), gi);
    momentum[i] = static_cast<float>(buf);
    p_out[i] = static_cast<float>(__dsub_rn(p, __dmul_rn(a.lr, buf)));
  }
}

}  // namespace

void sgd_step(const SgdArgs& args, const OptimizerChunk* chunks, int64_t num_chunks, const float* p_in, const float* g,
              float* momentum, float* p_out, cudaStream_t stream) {
  if (num_chunks < 0 || num_chunks > (int64_t{1} << 31) - 1) throw_usage("sgd_step", "bad chunk count");
  if (num_chunks == 0) return;
  launch<sgd_kernel>(static_cast<unsigned>(num_chunks), kThreads, 0, stream, args, chunks, p_in, g, momentum, p_out);
  check_launch("sgd_kernel");
}

}  // namespace pd2bw::executor::cuda

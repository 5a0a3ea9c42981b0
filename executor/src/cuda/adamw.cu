// CUDA AdamW over a stage's whole flat fp32 buffer in one launch (cpu reference: adamw_step in
// executor/src/optimizer.cpp): one block per chunk of a tensor, so weight decay (on matrices only) is
// known per block. Per element the arithmetic is the reference's, in double, with every operation
// rounded on its own (no fused multiply-add), so equal inputs give the reference's bits.
#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {
namespace {

constexpr int kThreads = 256;

// chunks: (num_chunks), one per block; p_in, g, m, v, p_out: the flat buffers (p_out may be p_in).
static __global__ void __launch_bounds__(kThreads)
    adamw_kernel(AdamWArgs a, const OptimizerChunk* chunks, const float* p_in, const float* g, float* m, float* v,
                 float* p_out) {
  const OptimizerChunk ch = chunks[blockIdx.x];
  const double decay = ch.matrix != 0 ? a.weight_decay : 0.0;
  for (int64_t i = ch.begin + threadIdx.x; i < ch.end; i += kThreads) {
    const double gi = __dmul_rn(static_cast<double>(g[i]), a.grad_scale);
    const double mt = __dadd_rn(__dmul_rn(a.beta1, static_cast<double>(m[i])), __dmul_rn(a.one_minus_beta1, gi));
    const double vt =
        __dadd_rn(__dmul_rn(a.beta2, static_cast<double>(v[i])), __dmul_rn(a.one_minus_beta2, __dmul_rn(gi, gi)));
    m[i] = static_cast<float>(mt);
    v[i] = static_cast<float>(vt);
    const double p = static_cast<double>(p_in[i]);
    const double step = __ddiv_rn(mt, a.bias_correction1);
    const double denom = __dadd_rn(__dsqrt_rn(__ddiv_rn(vt, a.bias_correction2)), a.eps);
    const double update = __dadd_rn(__ddiv_rn(step, denom), __dmul_rn(decay, p));
    p_out[i] = static_cast<float>(__dsub_rn(p, __dmul_rn(a.lr, update)));
  }
}

}  // namespace

void adamw_step(const AdamWArgs& args, const OptimizerChunk* chunks, int64_t num_chunks, const float* p_in, const float* g,
                float* m, float* v, float* p_out, cudaStream_t stream) {
  if (num_chunks < 0 || num_chunks > (int64_t{1} << 31) - 1) throw_usage("adamw_step", "bad chunk count");
  if (num_chunks == 0) return;
  launch<adamw_kernel>(static_cast<unsigned>(num_chunks), kThreads, 0, stream, args, chunks, p_in, g, m, v, p_out);
  check_launch("adamw_kernel");
}

}  // namespace pd2bw::executor::cuda

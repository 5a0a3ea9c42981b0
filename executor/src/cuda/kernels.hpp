// The launchers of the CUDA backend's kernels, one op per .cu file beside this header, each with the
// cpu op of the same name (executor/src/cpu/, executor/src/optimizer.cpp) as its reference.
//
// Every launcher checks its sizes (UsageError), does nothing for an empty tensor, launches on the
// given stream and checks the launch. T is the compute dtype's storage (float or bf16_t); arithmetic is
// fp32 and a bf16 output is rounded to nearest even once, as the cpu backend does. Per-row statistics
// and parameter gradients are float. Every reduction runs in a fixed order (no atomics on values), so
// results repeat bit for bit from run to run. Pointers are device memory of the stream's device.
// Private to the executor.
#pragma once

#include <cstdint>

#include "cuda/cuda_api.hpp"

namespace pd2bw::executor::cuda {

// ---- elementwise.cu ---------------------------------------------------------------------------------
// a, b, out: (n); out may alias a or b.
template <typename T>
void add(const T* a, const T* b, T* out, int64_t n, cudaStream_t stream);
// acc: (n) += x: (n).
template <typename T>
void accumulate(T* acc, const T* x, int64_t n, cudaStream_t stream);
// y: (N, Out) += bias: (Out) on every row.
template <typename T>
void add_bias(T* y, const T* bias, int64_t n, int64_t out, cudaStream_t stream);
// x: (n) = 1.
template <typename T>
void fill_ones(T* x, int64_t n, cudaStream_t stream);

// ---- cast.cu ----------------------------------------------------------------------------------------
// dst: (n) = src: (n) converted, rounding to nearest even (From, To: float, double, bf16_t).
template <typename From, typename To>
void cast(const From* src, To* dst, int64_t n, cudaStream_t stream);

// ---- gelu.cu ----------------------------------------------------------------------------------------
// x, y: (n); y may alias x.
template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, cudaStream_t stream);
// dy, x: (n); dx: (n), may alias dy.
template <typename T>
void gelu_backward(const T* dy, const T* x, T* dx, int64_t n, cudaStream_t stream);

// ---- layernorm.cu -----------------------------------------------------------------------------------
// x: (N, C), gamma, beta: (C), y: (N, C); mean, rstd: (N).
template <typename T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, float* mean, float* rstd, int64_t n, int64_t c,
                       cudaStream_t stream);
// Floats of scratch layernorm_backward needs.
int64_t layernorm_backward_scratch(int64_t n, int64_t c);
// dy, x: (N, C), gamma: (C), mean, rstd: (N); dx: (N, C) overwritten, or null to skip; dgamma, dbeta: (C) +=,
// both null to skip (then scratch may be null).
template <typename T>
void layernorm_backward(const T* dy, const T* x, const T* gamma, const float* mean, const float* rstd, T* dx,
                        float* dgamma, float* dbeta, int64_t n, int64_t c, float* scratch, cudaStream_t stream);

// ---- attention.cu -----------------------------------------------------------------------------------
// The largest head dimension C / H the kernels take.
inline constexpr int64_t kMaxHeadDim = 128;
// qkv: (B, T, 3C); out: (B, T, C); lse: (B, H, T) log-sum-exp of each row's scaled, masked scores.
template <typename T>
void attention_forward(const T* qkv, T* out, float* lse, int64_t b, int64_t t, int64_t c, int64_t h,
                       cudaStream_t stream);
// Floats of scratch attention_backward needs.
int64_t attention_backward_scratch(int64_t b, int64_t t, int64_t h);
// dout, out: (B, T, C), qkv: (B, T, 3C), lse: (B, H, T) as the forward wrote; dqkv: (B, T, 3C).
template <typename T>
void attention_backward(const T* dout, const T* qkv, const T* out, const float* lse, T* dqkv, int64_t b, int64_t t,
                        int64_t c, int64_t h, float* scratch, cudaStream_t stream);

// ---- embedding.cu -----------------------------------------------------------------------------------
// tokens: (B, T) in [0, V), wte: (V, C), wpe: (>= T, C), out: (B, T, C). A token outside [0, V) gives a
// zero row and lowers *bad (initially ~0) to (position << 32 | token) of the first such position.
template <typename T>
void embedding_forward(const int32_t* tokens, const T* wte, const T* wpe, T* out, int64_t b, int64_t t, int64_t c,
                       int64_t v, unsigned long long* bad, cudaStream_t stream);
// Bytes of scratch embedding_backward needs for n = B*T tokens.
int64_t embedding_backward_scratch(int64_t n);
// tokens: (B, T), dout: (B, T, C); dwte: (V, C) += rows of dout gathered by token (tokens outside [0, V)
// are skipped); dwpe: (>= T, C) += the sums over B.
template <typename T>
void embedding_backward(const int32_t* tokens, const T* dout, float* dwte, float* dwpe, int64_t b, int64_t t,
                        int64_t c, int64_t v, void* scratch, int64_t scratch_bytes, cudaStream_t stream);

// ---- cross_entropy.cu -------------------------------------------------------------------------------
// Doubles of scratch cross_entropy_forward needs.
int64_t cross_entropy_scratch(int64_t n);
// logits: (N, V), targets: (N); lse: (N); loss: (1) = the mean over rows of lse - logit[target]. A target
// outside [0, V) counts 0 and lowers *bad to (row << 32 | target) of the first such row.
template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, float* lse, double* loss, int64_t n, int64_t v,
                           double* scratch, unsigned long long* bad, cudaStream_t stream);
// dlogits: (N, V) = (softmax - onehot) * scale; may alias logits.
template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const float* lse, T* dlogits, int64_t n, int64_t v,
                            double scale, cudaStream_t stream);

// ---- adamw.cu, sgd.cu: fp32 master weights, gradients and moments ------------------------------------
// A range of one tensor of a flat parameter buffer; the update kernels run one block per chunk.
struct OptimizerChunk {
  int64_t begin = 0, end = 0;
  int64_t matrix = 0;  // 1: weight decay applies (a 2-D tensor)
};
inline constexpr int64_t kOptimizerChunk = int64_t{1} << 16;  // elements per chunk at most

struct AdamWArgs {
  double lr, beta1, beta2, one_minus_beta1, one_minus_beta2, bias_correction1, bias_correction2, eps, weight_decay,
      grad_scale;
};
// p_in, g, m, v, p_out: the flat buffers; p_out may be p_in itself.
void adamw_step(const AdamWArgs& args, const OptimizerChunk* chunks, int64_t num_chunks, const float* p_in, const float* g,
                float* m, float* v, float* p_out, cudaStream_t stream);

struct SgdArgs {
  double lr, momentum, weight_decay, grad_scale;
};
void sgd_step(const SgdArgs& args, const OptimizerChunk* chunks, int64_t num_chunks, const float* p_in, const float* g,
              float* momentum, float* p_out, cudaStream_t stream);

// ---- sum_of_squares.cu ------------------------------------------------------------------------------
// Doubles of scratch sum_of_squares needs.
int64_t sum_of_squares_scratch(int64_t n);
// out: (1) = the sum of x[i]^2 in double over x: (n).
void sum_of_squares(const float* x, int64_t n, double* scratch, double* out, cudaStream_t stream);

}  // namespace pd2bw::executor::cuda

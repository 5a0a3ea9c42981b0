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
#include "pd2bw/executor/backend.hpp"

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
// x, y: (n); y may alias x. kind: the tanh approximation or the exact erf form.
template <typename T>
void gelu_forward(const T* x, T* y, int64_t n, GeluKind kind, cudaStream_t stream);
// dy, x: (n); dx: (n), may alias dy.
template <typename T>
void gelu_backward(const T* dy, const T* x, T* dx, int64_t n, GeluKind kind, cudaStream_t stream);

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
// Which keys a query sees (AttentionMask on the device). causal: keys <= the query (lengths unused);
// otherwise keys < lengths[b], or all T when lengths is null. lengths: (B) i32, each in [1, T]: a length
// outside is taken as the nearest of 1 and T and lowers *bad (initially ~0) to (b << 32 | length) of the
// first such sequence (bad may be null when lengths is).
struct AttentionKeys {
  bool causal = true;
  const int32_t* lengths = nullptr;
  unsigned long long* bad = nullptr;
};
// qkv: (B, T, 3C); out: (B, T, C); lse: (B, H, T) log-sum-exp of each row's scaled, masked scores.
template <typename T>
void attention_forward(const T* qkv, T* out, float* lse, int64_t b, int64_t t, int64_t c, int64_t h,
                       const AttentionKeys& keys, cudaStream_t stream);
// Floats of scratch attention_backward needs.
int64_t attention_backward_scratch(int64_t b, int64_t t, int64_t h);
// dout, out: (B, T, C), qkv: (B, T, 3C), lse: (B, H, T) as the forward wrote, keys: the forward's;
// dqkv: (B, T, 3C).
template <typename T>
void attention_backward(const T* dout, const T* qkv, const T* out, const float* lse, T* dqkv, int64_t b, int64_t t,
                        int64_t c, int64_t h, const AttentionKeys& keys, float* scratch, cudaStream_t stream);

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

// ---- type_embedding.cu ------------------------------------------------------------------------------
// types: (N) in [0, R), table: (R, C); out: (N, C) += table[types[i]]. A type outside [0, R) adds
// nothing and lowers *bad (initially ~0) to (row << 32 | type) of the first such row.
template <typename T>
void type_embedding_forward(const int32_t* types, const T* table, T* out, int64_t n, int64_t c, int64_t r,
                            unsigned long long* bad, cudaStream_t stream);
// types: (N), dout: (N, C); dtable: (R, C) += the rows of dout of each type, added in row order (rows of a
// type outside [0, R) are skipped).
template <typename T>
void type_embedding_backward(const int32_t* types, const T* dout, float* dtable, int64_t n, int64_t c, int64_t r,
                             cudaStream_t stream);

// ---- cross_entropy.cu -------------------------------------------------------------------------------
// The target of a row no loss counts (kIgnoreTarget of data.hpp).
inline constexpr int32_t kIgnoredTarget = -100;
// Doubles of scratch cross_entropy_forward needs.
int64_t cross_entropy_scratch(int64_t n);
// logits: (N, V), targets: (N); lse: (N) of every row; loss: (1) = the mean of lse - logit[target] over
// the K rows whose target is not kIgnoredTarget (0 when K = 0). Any other target outside [0, V) counts
// 0 and lowers *bad to (row << 32 | target) of the first such row.
template <typename T>
void cross_entropy_forward(const T* logits, const int32_t* targets, float* lse, double* loss, int64_t n, int64_t v,
                           double* scratch, unsigned long long* bad, cudaStream_t stream);
// dlogits: (N, V) = (softmax - onehot) * loss_scale / K on the counted rows, 0 on the ignored ones; may
// alias logits. count: (1) device scratch, where K is counted first.
template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const float* lse, T* dlogits, int64_t n, int64_t v,
                            double loss_scale, int32_t* count, cudaStream_t stream);

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

// The CPU reference ops of the executor: forward and backward of each coarse op of a GPT.
//
// Conventions shared by every op here:
// - Tensors are contiguous row-major arrays; the shape of each argument is in its comment, e.g. x: (N, C).
//   The caller owns every buffer; an op never allocates memory the caller must free.
// - T is float or double (explicitly instantiated in executor/src/cpu/*.cpp).
// - Input gradients (dx, dqkv, dlogits) are OVERWRITTEN; parameter gradients (dweight, dbias, dgamma,
//   dbeta, dwte, dwpe) are ACCUMULATED (+=) so gradients sum over the microbatches of a step.
// - Every reduction runs in a fixed order and no op starts a thread, so results are bit-reproducible
//   from run to run and do not depend on buffer addresses.
// - Output buffers must not overlap inputs unless a comment allows it.
// - Ops validate only what is cheap and data-dependent (token and target ids); they throw pd2bw::Error
//   for an id out of range. Dimensions are the caller's contract (all > 0).
#pragma once

#include <cstdint>

namespace pd2bw::executor::cpu {

// The epsilon added to the variance in every layer norm (as GPT-2).
inline constexpr double kLayerNormEps = 1e-5;

// ---- linear: y = x W^T + bias -------------------------------------------------------------------
// x: (N, In), weight: (Out, In), bias: (Out) or nullptr (no bias), y: (N, Out).
template <typename T>
void linear_forward(const T* x, const T* weight, const T* bias, T* y, int64_t n, int64_t in, int64_t out);
// dy: (N, Out), x: (N, In), weight: (Out, In).
// dx: (N, In) overwritten with dy W, or nullptr to skip; dweight: (Out, In) += dy^T x, or nullptr to skip;
// dbias: (Out) += column sums of dy, or nullptr to skip (or when the layer has no bias). Each part's
// arithmetic is the same whether the others run, so the input and the weight halves may run apart.
template <typename T>
void linear_backward(const T* dy, const T* x, const T* weight, T* dx, T* dweight, T* dbias, int64_t n,
                     int64_t in, int64_t out);

// ---- layer norm over the last dimension, with affine gamma/beta ---------------------------------
// x: (N, C), gamma: (C), beta: (C), y: (N, C); saves mean: (N) and rstd: (N) = 1/sqrt(var + eps) for
// the backward pass (biased variance, as PyTorch).
template <typename T>
void layernorm_forward(const T* x, const T* gamma, const T* beta, T* y, T* mean, T* rstd, int64_t n,
                       int64_t c);
// dy: (N, C), x: (N, C), gamma: (C), mean: (N), rstd: (N) as saved by the forward pass.
// dx: (N, C) overwritten, or nullptr to skip; dgamma: (C) +=; dbeta: (C) +=, both or neither nullptr to
// skip. As for linear_backward, each part's arithmetic does not depend on the other's running.
template <typename T>
void layernorm_backward(const T* dy, const T* x, const T* gamma, const T* mean, const T* rstd, T* dx,
                        T* dgamma, T* dbeta, int64_t n, int64_t c);

// ---- GELU, tanh approximation (as GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) ----------
// x: (n), y: (n); y may alias x.
template <typename T>
void gelu_forward(const T* x, T* y, int64_t n);
// dy: (n), x: (n) the forward input; dx: (n) overwritten, may alias dy.
template <typename T>
void gelu_backward(const T* dy, const T* x, T* dx, int64_t n);
// ---- GELU, exact (as BERT): x Phi(x) = 0.5 x (1 + erf(x / sqrt(2))); shapes as above ------------------
template <typename T>
void gelu_erf_forward(const T* x, T* y, int64_t n);
// dx = dy (Phi(x) + x phi(x)).
template <typename T>
void gelu_erf_backward(const T* dy, const T* x, T* dx, int64_t n);

// ---- multi-head self-attention core (no projections) --------------------------------------------
// qkv: (B, T, 3C) laid out [q | k | v] along the last dimension, head h owning columns
// [h*hd, (h+1)*hd) of each part, hd = C / H (C must be divisible by H).
// out: (B, T, C) = softmax(q k^T / sqrt(hd) + mask) v, heads concatenated. The mask: with `causal`, query
// r sees keys s <= r (GPT); otherwise it sees every key s < lengths[b] (BERT's key padding mask), or all
// T keys when lengths is nullptr. lengths: (B), each in [1, T], else pd2bw::Error.
// probs: (B, H, T, T) saved softmax probabilities; masked entries are written as 0.
template <typename T>
void attention_forward(const T* qkv, T* out, T* probs, int64_t b, int64_t t, int64_t c, int64_t h, bool causal = true,
                       const int32_t* lengths = nullptr);
// dout: (B, T, C), qkv: (B, T, 3C), probs: (B, H, T, T) as saved, causal and lengths: the forward's;
// dqkv: (B, T, 3C) overwritten.
template <typename T>
void attention_backward(const T* dout, const T* qkv, const T* probs, T* dqkv, int64_t b, int64_t t, int64_t c,
                        int64_t h, bool causal = true, const int32_t* lengths = nullptr);

// ---- token + position embedding ------------------------------------------------------------------
// tokens: (B, T) ids in [0, V), wte: (V, C), wpe: (Tmax, C) with T <= Tmax, out: (B, T, C).
// Throws pd2bw::Error naming the position of the first token outside [0, V).
template <typename T>
void embedding_forward(const int32_t* tokens, const T* wte, const T* wpe, T* out, int64_t b, int64_t t,
                       int64_t c, int64_t v);
// dout: (B, T, C); dwte: (V, C) += rows of dout gathered by token; dwpe: (Tmax, C) += sums over B.
// Tokens are assumed valid (they were checked by the forward pass).
template <typename T>
void embedding_backward(const int32_t* tokens, const T* dout, T* dwte, T* dwpe, int64_t b, int64_t t,
                        int64_t c);

// ---- token-type embedding (BERT's segment embedding) ------------------------------------------------
// types: (N) ids in [0, R), table: (R, C); out: (N, C) += table[types[i]].
// Throws pd2bw::Error naming the position of the first type outside [0, R).
template <typename T>
void type_embedding_forward(const int32_t* types, const T* table, T* out, int64_t n, int64_t c, int64_t r);
// dout: (N, C); dtable: (R, C) += rows of dout gathered by type, in row order.
template <typename T>
void type_embedding_backward(const int32_t* types, const T* dout, T* dtable, int64_t n, int64_t c);

// ---- softmax cross-entropy --------------------------------------------------------------------------
// logits: (N, V), targets: (N) ids in [0, V) or kIgnoreTarget (data.hpp, -100: a row no loss counts);
// lse: (N) saved log-sum-exp of each row (every row, counted or not).
// Returns the mean over the K counted rows of -log softmax(logits)[target], accumulated in double (0 when
// K = 0). Throws pd2bw::Error naming the row of the first other target outside [0, V).
template <typename T>
double cross_entropy_forward(const T* logits, const int32_t* targets, T* lse, int64_t n, int64_t v);
// logits: (N, V), targets: (N), lse: (N) as saved; dlogits: (N, V) overwritten with
// (softmax(logits) - onehot(target)) * loss_scale / K on the counted rows and 0 on the ignored ones, i.e.
// the gradient of loss_scale * the forward's loss. A step of m microbatches passes loss_scale = 1/m.
// dlogits may alias logits.
template <typename T>
void cross_entropy_backward(const T* logits, const int32_t* targets, const T* lse, T* dlogits, int64_t n,
                            int64_t v, double loss_scale);

// ---- elementwise helpers --------------------------------------------------------------------------
// a: (n), b: (n), out: (n) = a + b; out may alias a or b (residual connections).
template <typename T>
void add(const T* a, const T* b, T* out, int64_t n);
// acc: (n) += x: (n) (sums gradients of a value used twice, e.g. a residual input).
template <typename T>
void accumulate(T* acc, const T* x, int64_t n);

}  // namespace pd2bw::executor::cpu

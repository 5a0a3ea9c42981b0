// The seam between the GPT layers and the machine that runs them. A Backend owns a memory arena (one
// per pipeline stage), runs the coarse ops of a GPT on its own buffers, and keeps a timer and memory
// statistics. The layers (gpt.hpp) and the stage runtime are written once against this interface;
// `cpu` (Eigen, executor/src/cpu/) is built always, and further backends (a CUDA one) plug in through
// the registry below, which is the only code that knows which backends were built.
//
// Conventions for every op:
// - Tensors are contiguous row-major Views; each argument's shape is in its comment, e.g. x: (N, C).
// - Activations, weights and stashes are in the compute dtype C (f32, f64 or bf16). Parameter gradients
//   (dweight, dbias, dgamma, dbeta, dwte, dwpe) and per-row statistics (mean, rstd, lse) are in
//   accumulate_dtype(C) (f32 for bf16). An op throws UsageError for a dtype it does not support.
// - Input gradients (dx, dqkv, dlogits) are OVERWRITTEN; parameter gradients are ACCUMULATED (+=).
// - Every reduction runs in a fixed order, so results are bit-reproducible from run to run.
// - Outputs must not overlap inputs unless a comment allows it. Ops may run asynchronously on a device
//   (in the order they were called, on the backend's one stream); a buffer's contents are visible to
//   the host only through to_host(), and a host-visible backend (cpu) is the only one whose buffers the
//   host may read directly.
// - Data-dependent errors (a token or target id out of range) throw Error; a device backend reports
//   them at its next synchronising call (to_host, sum_of_squares, elapsed_ms, synchronize).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "pd2bw/executor/dtype.hpp"
#include "pd2bw/executor/layout.hpp"

namespace pd2bw::executor {

struct AdamWConfig;
struct SgdConfig;

// A non-owning typed range of a backend's memory. numel counts elements of dtype.
struct ConstView {
  const void* data = nullptr;
  DType dtype = DType::f32;
  int64_t numel = 0;
  bool empty() const { return data == nullptr || numel == 0; }
  int64_t bytes() const { return numel * dtype_bytes(dtype); }
  template <typename T>
  const T* as() const { return static_cast<const T*>(data); }
  // Elements [offset, offset + count); the caller keeps the range inside the view.
  ConstView slice(int64_t offset, int64_t count) const {
    return {static_cast<const char*>(data) + offset * dtype_bytes(dtype), dtype, count};
  }
};

struct View {
  void* data = nullptr;
  DType dtype = DType::f32;
  int64_t numel = 0;
  bool empty() const { return data == nullptr || numel == 0; }
  int64_t bytes() const { return numel * dtype_bytes(dtype); }
  template <typename T>
  T* as() const { return static_cast<T*>(data); }
  View slice(int64_t offset, int64_t count) const {
    return {static_cast<char*>(data) + offset * dtype_bytes(dtype), dtype, count};
  }
  operator ConstView() const { return {data, dtype, numel}; }  // NOLINT(google-explicit-constructor)
};

template <typename T>
View view_of(T* data, int64_t numel) { return {data, dtype_of<T>(), numel}; }
template <typename T>
ConstView view_of(const T* data, int64_t numel) { return {data, dtype_of<T>(), numel}; }

// Where a Buffer's memory goes back when the Buffer dies (an arena).
class BufferOwner {
 public:
  virtual void release(void* data, int64_t bytes) noexcept = 0;

 protected:
  ~BufferOwner() = default;
};

// A move-only block of a backend's memory of `numel` elements of `dtype`, returned to its arena when
// destroyed or reset. A default-constructed Buffer is empty.
class Buffer {
 public:
  Buffer() = default;
  Buffer(BufferOwner* owner, void* data, DType dtype, int64_t numel) : owner_(owner), data_(data), dtype_(dtype), numel_(numel) {}
  Buffer(Buffer&& o) noexcept { swap(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    Buffer(std::move(o)).swap(*this);
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  ~Buffer() { reset(); }

  void reset() {
    if (owner_ != nullptr) owner_->release(data_, bytes());
    owner_ = nullptr;
    data_ = nullptr;
    numel_ = 0;
  }
  bool empty() const { return numel_ == 0; }
  DType dtype() const { return dtype_; }
  int64_t numel() const { return numel_; }
  int64_t bytes() const { return numel_ * dtype_bytes(dtype_); }
  View view() { return {data_, dtype_, numel_}; }
  ConstView view() const { return {data_, dtype_, numel_}; }
  ConstView cview() const { return view(); }
  template <typename T>
  T* data() { return static_cast<T*>(data_); }
  template <typename T>
  const T* data() const { return static_cast<const T*>(data_); }
  // Same dtype, length and bytes. Reads the memory from the host: for host-visible backends (cpu) and
  // tests only.
  friend bool operator==(const Buffer& a, const Buffer& b);

 private:
  void swap(Buffer& o) noexcept {
    std::swap(owner_, o.owner_);
    std::swap(data_, o.data_);
    std::swap(dtype_, o.dtype_);
    std::swap(numel_, o.numel_);
  }
  BufferOwner* owner_ = nullptr;
  void* data_ = nullptr;
  DType dtype_ = DType::f32;
  int64_t numel_ = 0;
};

// Bytes of the buffers a backend's arena has handed out and not yet got back (current), the most at
// any time since the last reset_peak (peak), and what the arena holds from the system, free blocks
// kept for reuse included (reserved). fresh_allocations counts blocks taken from the system.
struct MemoryStats {
  int64_t current_bytes = 0;
  int64_t peak_bytes = 0;
  int64_t reserved_bytes = 0;
  int64_t fresh_allocations = 0;
};

// A point on a backend's compute clock (cpu: this thread's CPU time; a GPU backend: an event).
struct TimerMark {
  double cpu_ms = 0;
  int64_t event = -1;
};

// What a backend's attention keeps for its backward: `numel` elements of `dtype` (the cpu: the
// softmax probabilities, (B, H, T, T) in the compute dtype; a flash-style kernel: each row's
// log-sum-exp, (B, H, T) in fp32).
struct AttentionStash {
  DType dtype = DType::f32;
  int64_t numel = 0;
};

// Which keys each query of an attention op sees. causal: key s <= query r (GPT); otherwise every key of
// the query's sequence (BERT). lengths: (B) i32, each in [1, T]: keys at positions >= lengths[b] are
// padding and get no weight (BERT's key padding mask); empty: every sequence has all T keys. Query rows
// at or past their sequence's length are computed like the others (they attend to the valid keys), so
// every output is finite; a loss ignores those positions. A length outside [1, T] throws Error (a device
// backend at its next synchronising call).
struct AttentionMask {
  bool causal = true;
  ConstView lengths;
  static AttentionMask causal_mask() { return {}; }
  static AttentionMask bidirectional(ConstView lengths) { return {false, lengths}; }
};

// GELU's two forms: tanh, the approximation GPT-2 uses; erf, the exact x * Phi(x) BERT uses.
enum class GeluKind { tanh, erf };

class Backend {
 public:
  virtual ~Backend() = default;
  // The registry name ("cpu", ...).
  virtual std::string_view name() const = 0;
  // Whether layers may compute in `compute` (f32, f64, bf16) on this backend.
  virtual bool supports(DType compute) const = 0;
  // Whether the host may read and write this backend's buffers through their pointers (cpu: yes; a
  // device backend: no, its buffers move through to_host / from_host or a device transport).
  virtual bool host_visible() const { return true; }
  // The opaque stream this backend's ops run on, in call order (a cudaStream_t for a CUDA backend), for
  // a transport that orders its copies after them; null for a host backend.
  virtual void* native_stream() { return nullptr; }
  // Waits until every op called so far has finished (a no-op for a host backend). Throws Error for a
  // data-dependent error an earlier op found.
  virtual void synchronize() {}

  // ---- memory and time ------------------------------------------------------------------------------
  // A buffer of numel >= 0 elements from this backend's arena; contents unspecified. Blocks are reused
  // by size, so a stage that allocates the same shapes every microbatch reaches a steady state with no
  // allocation from the system. Throws Error when the memory cannot be had.
  virtual Buffer alloc(DType dtype, int64_t numel) = 0;
  virtual MemoryStats memory() const = 0;
  virtual void reset_peak() = 0;
  virtual TimerMark mark() = 0;
  // Compute time between two marks of this backend, in milliseconds. A device backend waits for `to`
  // to be reached and may recycle both marks: each mark is passed to elapsed_ms at most once.
  virtual double elapsed_ms(const TimerMark& from, const TimerMark& to) = 0;

  // ---- data movement --------------------------------------------------------------------------------
  virtual void fill_zero(View x) = 0;
  // dst = src element by element (same numel); converts when the dtypes differ (f32/f64/bf16, rounding
  // to nearest even), copies bytes otherwise. Throws UsageError for mismatched lengths.
  virtual void copy(ConstView src, View dst) = 0;
  // host: src.bytes() bytes; returns once they are there (a device backend waits for the ops before).
  virtual void to_host(ConstView src, void* host) = 0;
  // host: dst.bytes() bytes, which the caller may reuse as soon as the call returns.
  virtual void from_host(const void* host, View dst) = 0;

  // ---- GPT ops (shapes and semantics as the CPU reference in ops.hpp) ---------------------------------
  // x: (N, In), weight: (Out, In), bias: (Out) or empty, y: (N, Out) = x W^T + bias.
  virtual void linear_forward(ConstView x, ConstView weight, ConstView bias, View y, int64_t n, int64_t in, int64_t out) = 0;
  // dy: (N, Out), x: (N, In), weight: (Out, In) (may be empty when dx is); dx: (N, In) or empty;
  // dweight: (Out, In) += or empty; dbias: (Out) += or empty. The parts are independent: the same bits
  // whether computed in one call or apart (a split backward's B and W halves).
  virtual void linear_backward(ConstView dy, ConstView x, ConstView weight, View dx, View dweight, View dbias, int64_t n,
                               int64_t in, int64_t out) = 0;
  // x: (N, C), gamma, beta: (C), y: (N, C); mean, rstd: (N) saved for the backward.
  virtual void layernorm_forward(ConstView x, ConstView gamma, ConstView beta, View y, View mean, View rstd, int64_t n,
                                 int64_t c) = 0;
  // dy, x: (N, C), gamma: (C), mean, rstd: (N); dx: (N, C) or empty; dgamma, dbeta: (C) +=, both or
  // neither empty. As for linear_backward, an empty part is skipped and the others keep their bits.
  virtual void layernorm_backward(ConstView dy, ConstView x, ConstView gamma, ConstView mean, ConstView rstd, View dx,
                                  View dgamma, View dbeta, int64_t n, int64_t c) = 0;
  // x, y: (n), y may alias x.
  virtual void gelu_forward(ConstView x, View y, int64_t n, GeluKind kind) = 0;
  // dy, x: (n); dx: (n), may alias dy.
  virtual void gelu_backward(ConstView dy, ConstView x, View dx, int64_t n, GeluKind kind) = 0;
  // The stash attention_forward writes for a microbatch of b sequences of t tokens over h heads in
  // `compute`. The default is the cpu's: the probabilities, (B, H, T, T) in the compute dtype.
  virtual AttentionStash attention_stash(DType compute, int64_t b, int64_t t, int64_t h) const {
    return {compute, b * h * t * t};
  }
  // qkv: (B, T, 3C); out: (B, T, C); stash: attention_stash(...) elements, saved for the backward;
  // mask: which keys each query sees (AttentionMask; lengths (B) i32 or empty).
  virtual void attention_forward(ConstView qkv, View out, View stash, int64_t b, int64_t t, int64_t c, int64_t h,
                                 const AttentionMask& mask) = 0;
  // dout: (B, T, C), qkv: (B, T, 3C), out: (B, T, C) as the forward wrote it, stash: as the forward
  // wrote it, mask: the forward's; dqkv: (B, T, 3C).
  virtual void attention_backward(ConstView dout, ConstView qkv, ConstView out, ConstView stash, View dqkv, int64_t b,
                                  int64_t t, int64_t c, int64_t h, const AttentionMask& mask) = 0;
  // tokens: (B, T) i32 in [0, V), wte: (V, C), wpe: (Tmax, C), out: (B, T, C). Throws Error for an id
  // out of range.
  virtual void embedding_forward(ConstView tokens, ConstView wte, ConstView wpe, View out, int64_t b, int64_t t,
                                 int64_t c, int64_t v) = 0;
  // dout: (B, T, C); dwte: (V, C) +=; dwpe: (Tmax, C) +=.
  virtual void embedding_backward(ConstView tokens, ConstView dout, View dwte, View dwpe, int64_t b, int64_t t,
                                  int64_t c) = 0;
  // types: (N) i32 in [0, R), table: (R, C); out: (N, C) += table[types[i]] (BERT's token-type embedding).
  // Throws Error for a type out of range.
  virtual void type_embedding_forward(ConstView types, ConstView table, View out, int64_t n, int64_t c, int64_t r) = 0;
  // types: (N), dout: (N, C); dtable: (R, C) += the rows of dout summed by type, each in row order.
  virtual void type_embedding_backward(ConstView types, ConstView dout, View dtable, int64_t n, int64_t c, int64_t r) = 0;
  // logits: (N, V), targets: (N) i32 in [0, V) or kIgnoreTarget (data.hpp: a position no loss counts);
  // lse: (N); loss: (1) f64 = the mean of -log softmax[target] over the K rows whose target is not ignored
  // (0 when K = 0). Throws Error for any other target out of range.
  virtual void cross_entropy_forward(ConstView logits, ConstView targets, View lse, View loss, int64_t n, int64_t v) = 0;
  // dlogits: (N, V) = (softmax - onehot) * loss_scale / K on the counted rows, 0 on ignored ones (the
  // gradient of loss_scale * the forward's loss); may alias logits.
  virtual void cross_entropy_backward(ConstView logits, ConstView targets, ConstView lse, View dlogits, int64_t n,
                                      int64_t v, double loss_scale) = 0;
  // out = a + b, (n); out may alias a or b.
  virtual void add(ConstView a, ConstView b, View out, int64_t n) = 0;
  // acc += x, (n).
  virtual void accumulate(View acc, ConstView x, int64_t n) = 0;

  // ---- optimizer (master weights, gradients and moments in f32 or f64, all of one dtype) --------------
  // As adamw_step / sgd_step in optimizer.hpp; params_out may be params_in itself, and grads may be
  // params_out itself: every implementation reads an element's gradient before it writes that element's
  // weight (2BW's deferred update parks a gradient in the buffer the update then overwrites).
  virtual void adamw_step(const AdamWConfig& config, const ParamLayout& layout, double lr, int64_t step, double grad_scale,
                          ConstView params_in, ConstView grads, View m, View v, View params_out) = 0;
  virtual void sgd_step(const SgdConfig& config, const ParamLayout& layout, double lr, double grad_scale,
                        ConstView params_in, ConstView grads, View momentum, View params_out) = 0;
  // Sum of squares in index order, accumulated in double.
  virtual double sum_of_squares(ConstView values) = 0;
};

// ---- the registry -------------------------------------------------------------------------------------
using BackendFactory = std::function<std::unique_ptr<Backend>()>;

// A new backend instance (with its own arena) by name. Throws UsageError naming the backends built when
// `name` is unknown.
std::unique_ptr<Backend> make_backend(std::string_view name);
// Names of the backends this build can make, in registration order ("cpu" first).
std::vector<std::string> backend_names();
// Adds a backend under `name` (a test's or a plugin's). Throws UsageError when the name is taken.
void register_backend(const std::string& name, BackendFactory factory);
// A process-wide cpu backend for code that runs layers outside a pipeline stage (the sequential
// reference model, the profiler's helpers, tests). Its arena is shared and thread-safe.
Backend& default_backend();

}  // namespace pd2bw::executor

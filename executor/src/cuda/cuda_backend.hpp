// The cuda backend's class: the Backend of executor/include/pd2bw/executor/backend.hpp on one NVIDIA GPU.
// Every op runs on the backend's one stream in call order and returns without waiting; the host waits
// only in to_host, sum_of_squares, elapsed_ms and synchronize, which also report the data-dependent
// errors (a token, token type, target or sequence length out of range) that kernels flag in mapped host
// memory. Memory comes from a
// caching arena over cudaMalloc (one per backend, i.e. per pipeline stage), so a stage stops asking the
// driver for memory after its first step. Private to the executor; the registry reaches it through
// cuda_factory.hpp.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "cuda/cuda_api.hpp"
#include "pd2bw/executor/backend.hpp"

namespace pd2bw::executor {
class CachingArena;
}

namespace pd2bw::executor::cuda {

class Linear;
class OpTimer;
struct AttentionKeys;

class CudaBackend final : public Backend {
 public:
  // On the current device. Throws UsageError("no CUDA device: ...") when none is visible.
  CudaBackend();
  ~CudaBackend() override;
  std::string_view name() const override { return "cuda"; }
  bool supports(DType compute) const override { return compute == DType::f32 || compute == DType::bf16; }
  bool host_visible() const override { return false; }
  void* native_stream() override { return stream_.get(); }
  void synchronize() override;

  Buffer alloc(DType dtype, int64_t numel) override;
  MemoryStats memory() const override;
  void reset_peak() override;
  TimerMark mark() override;
  double elapsed_ms(const TimerMark& from, const TimerMark& to) override;

  void fill_zero(View x) override;
  void copy(ConstView src, View dst) override;
  void to_host(ConstView src, void* host) override;
  void from_host(const void* host, View dst) override;

  void linear_forward(ConstView x, ConstView weight, ConstView bias, View y, int64_t n, int64_t in, int64_t out) override;
  void linear_backward(ConstView dy, ConstView x, ConstView weight, View dx, View dweight, View dbias, int64_t n, int64_t in,
                       int64_t out) override;
  void layernorm_forward(ConstView x, ConstView gamma, ConstView beta, View y, View mean, View rstd, int64_t n,
                         int64_t c) override;
  void layernorm_backward(ConstView dy, ConstView x, ConstView gamma, ConstView mean, ConstView rstd, View dx, View dgamma,
                          View dbeta, int64_t n, int64_t c) override;
  void gelu_forward(ConstView x, View y, int64_t n, GeluKind kind) override;
  void gelu_backward(ConstView dy, ConstView x, View dx, int64_t n, GeluKind kind) override;
  // The flash-style kernel keeps the log-sum-exp of each row: (B, H, T) in fp32.
  AttentionStash attention_stash(DType compute, int64_t b, int64_t t, int64_t h) const override;
  void attention_forward(ConstView qkv, View out, View lse, int64_t b, int64_t t, int64_t c, int64_t h,
                         const AttentionMask& mask) override;
  void attention_backward(ConstView dout, ConstView qkv, ConstView out, ConstView lse, View dqkv, int64_t b, int64_t t,
                          int64_t c, int64_t h, const AttentionMask& mask) override;
  void embedding_forward(ConstView tokens, ConstView wte, ConstView wpe, View out, int64_t b, int64_t t, int64_t c,
                         int64_t v) override;
  void embedding_backward(ConstView tokens, ConstView dout, View dwte, View dwpe, int64_t b, int64_t t, int64_t c) override;
  void type_embedding_forward(ConstView types, ConstView table, View out, int64_t n, int64_t c, int64_t r) override;
  void type_embedding_backward(ConstView types, ConstView dout, View dtable, int64_t n, int64_t c, int64_t r) override;
  void cross_entropy_forward(ConstView logits, ConstView targets, View lse, View loss, int64_t n, int64_t v) override;
  void cross_entropy_backward(ConstView logits, ConstView targets, ConstView lse, View dlogits, int64_t n, int64_t v,
                              double loss_scale) override;
  void add(ConstView a, ConstView b, View out, int64_t n) override;
  void accumulate(View acc, ConstView x, int64_t n) override;
  void adamw_step(const AdamWConfig& config, const ParamLayout& layout, double lr, int64_t step, double grad_scale,
                  ConstView params_in, ConstView grads, View m, View v, View params_out) override;
  void sgd_step(const SgdConfig& config, const ParamLayout& layout, double lr, double grad_scale, ConstView params_in,
                ConstView grads, View momentum, View params_out) override;
  double sum_of_squares(ConstView values) override;

 private:
  // What a kernel flagged in mapped host memory since the last check, and what its message needs.
  struct Flags {
    unsigned long long bad_token = ~0ULL;   // (position << 32 | token) of the first bad token
    unsigned long long bad_target = ~0ULL;  // (row << 32 | target) of the first bad target
    unsigned long long bad_type = ~0ULL;    // (row << 32 | type) of the first bad token type
    unsigned long long bad_length = ~0ULL;  // (sequence << 32 | length) of the first bad attention length
  };
  class Scope;  // times one op when an OpTimer is on
  cudaStream_t stream() const { return stream_.get(); }
  void wait();  // synchronises the stream, then throws for a flagged error
  void check_flags();
  [[noreturn]] void throw_flagged(const Flags& seen) const;
  // The mask's arguments for the attention kernels (lengths checked, the error flag attached).
  AttentionKeys attention_keys(const char* op, const AttentionMask& mask, int64_t b, int64_t t);
  const void* ones(DType t, int64_t n);  // n ones of t, kept
  // The chunk table of the optimizer kernels for a layout (kept per layout); returns its chunk count.
  const void* chunks(const ParamLayout& layout, int64_t* count);

  int device_ = 0;
  StreamHandle stream_;
  std::unique_ptr<CachingArena> arena_;
  std::unique_ptr<Linear> linear_;
  PinnedMemory flags_memory_;
  Flags* flags_ = nullptr;         // host view of the mapped flags
  Flags* flags_device_ = nullptr;  // the same memory as the kernels see it
  // The sizes the error messages name, of the latest op of each kind.
  int64_t embedding_t_ = 1, embedding_v_ = 0, cross_entropy_v_ = 0, type_embedding_r_ = 0, attention_t_ = 0;
  std::vector<EventHandle> events_;
  std::vector<int64_t> free_events_;
  Buffer ones_f32_, ones_bf16_;
  struct ChunkTable {
    std::vector<int64_t> signature;  // (offset, numel, matrix) per tensor
    Buffer table;
    int64_t count = 0;
  };
  std::vector<ChunkTable> chunk_tables_;
  std::unique_ptr<OpTimer> op_timer_;
};

}  // namespace pd2bw::executor::cuda

// The cpu backend's class, for the registry (and for tests that wrap it). Private to the executor.
#pragma once

#include <memory>
#include <string>

#include "pd2bw/executor/backend.hpp"

namespace pd2bw::executor {
class CachingArena;
}

namespace pd2bw::executor::cpu {

class CpuBackend final : public Backend {
 public:
  explicit CpuBackend(std::string name = "cpu");
  ~CpuBackend() override;
  std::string_view name() const override { return name_; }
  bool supports(DType compute) const override;
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
  void attention_forward(ConstView qkv, View out, View probs, int64_t b, int64_t t, int64_t c, int64_t h,
                         const AttentionMask& mask) override;
  void attention_backward(ConstView dout, ConstView qkv, ConstView out, ConstView probs, View dqkv, int64_t b, int64_t t,
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
  std::string name_;
  std::unique_ptr<CachingArena> arena_;
};

}  // namespace pd2bw::executor::cpu

// The cpu backend: the Eigen reference ops of ops.hpp behind the Backend interface, in f64, f32 or bf16
// storage (fp32 arithmetic), with a caching arena over aligned host memory and this thread's CPU clock.
#include "cpu/cpu_backend.hpp"

#include <time.h>

#include <fmt/format.h>

#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "backend/arena.hpp"
#include "cpu/kernel_level.hpp"
#include "cpu/staged.hpp"
#include "pd2bw/executor/ops.hpp"
#include "pd2bw/executor/optimizer.hpp"

namespace pd2bw::executor::cpu {

void widen(const bf16* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = static_cast<float>(src[i]);
}
void narrow(const float* src, bf16* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16(src[i]);
}

namespace {

void* host_block(int64_t bytes) {
  void* p = std::aligned_alloc(64, static_cast<size_t>(bytes));
  if (p == nullptr)
    throw Error(fmt::format("out of host memory: could not allocate {} bytes", bytes),
                "plan a smaller model or microbatch for the cpu backend");
  return p;
}

double thread_cpu_ms() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) * 1e-6;
}

void check_same_length(int64_t a, int64_t b, const char* what) {
  if (a != b) throw UsageError(fmt::format("cpu backend: {} of {} elements into {}", what, a, b));
}

// The nearest bf16 of a double. Going through float rounds twice: a double just off a bf16 midpoint
// can round to a float on the midpoint, whose tie then goes to even, maybe away from the double. Such a
// float is moved one float ulp back towards the double (still strictly between the two bf16 values), so
// the second rounding falls on the double's side.
bf16 bf16_nearest(double d) {
  float f = static_cast<float>(d);
  if (static_cast<double>(f) != d && !std::isnan(d) && (std::bit_cast<uint32_t>(f) & 0xffffu) == 0x8000u)
    f = std::nextafter(f, d > static_cast<double>(f) ? std::numeric_limits<float>::infinity()
                                                     : -std::numeric_limits<float>::infinity());
  return bf16(f);
}

template <typename From, typename To>
void convert(const From* src, To* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (std::is_same_v<From, double> && std::is_same_v<To, bf16>)
      dst[i] = bf16_nearest(src[i]);
    else if constexpr (std::is_same_v<To, bf16>)
      dst[i] = bf16(static_cast<float>(src[i]));
    else if constexpr (std::is_same_v<From, bf16>)
      dst[i] = static_cast<To>(static_cast<float>(src[i]));
    else
      dst[i] = static_cast<To>(src[i]);
  }
}

template <typename From>
void convert_to(const From* src, View dst) {
  switch (dst.dtype) {
    case DType::f32: return convert(src, dst.as<float>(), dst.numel);
    case DType::f64: return convert(src, dst.as<double>(), dst.numel);
    case DType::bf16: return convert(src, dst.as<bf16>(), dst.numel);
    default: throw UsageError("cpu backend: copy between int32 and float buffers");
  }
}

// The master-weight dtype of an optimizer step: f32 or f64, every buffer alike.
template <typename F>
void on_master(std::initializer_list<DType> dtypes, F&& f) {
  const DType t = *dtypes.begin();
  for (DType d : dtypes)
    if (d != t) throw UsageError("cpu backend: optimizer buffers of different dtypes");
  if (t == DType::f32)
    f(float{});
  else if (t == DType::f64)
    f(double{});
  else
    throw UsageError(fmt::format("cpu backend: master weights in {}; they must be float or double", to_string(t)));
}

template <typename T>
std::span<T> span_of(View v) { return {v.as<T>(), static_cast<size_t>(v.numel)}; }
template <typename T>
std::span<const T> span_of(ConstView v) { return {v.as<T>(), static_cast<size_t>(v.numel)}; }

}  // namespace

CpuBackend::CpuBackend(std::string name)
    : name_(std::move(name)), arena_(std::make_unique<CachingArena>(host_block, [](void* p) { std::free(p); })) {
  detail::kernel_level();  // an unusable PD2BW_CPU_KERNELS stops here, before any op
}
CpuBackend::~CpuBackend() = default;

bool CpuBackend::supports(DType compute) const {
  return compute == DType::f32 || compute == DType::f64 || compute == DType::bf16;
}
Buffer CpuBackend::alloc(DType dtype, int64_t numel) { return arena_->alloc(dtype, numel); }
MemoryStats CpuBackend::memory() const { return arena_->stats(); }
void CpuBackend::reset_peak() { arena_->reset_peak(); }
TimerMark CpuBackend::mark() { return {thread_cpu_ms(), -1}; }
double CpuBackend::elapsed_ms(const TimerMark& from, const TimerMark& to) { return to.cpu_ms - from.cpu_ms; }

void CpuBackend::fill_zero(View x) {
  if (!x.empty()) std::memset(x.data, 0, static_cast<size_t>(x.bytes()));
}

void CpuBackend::copy(ConstView src, View dst) {
  check_same_length(src.numel, dst.numel, "copy");
  if (src.empty()) return;
  if (src.dtype == dst.dtype) {
    std::memmove(dst.data, src.data, static_cast<size_t>(src.bytes()));
    return;
  }
  switch (src.dtype) {
    case DType::f32: return convert_to(src.as<float>(), dst);
    case DType::f64: return convert_to(src.as<double>(), dst);
    case DType::bf16: return convert_to(src.as<bf16>(), dst);
    default: throw UsageError("cpu backend: copy between int32 and float buffers");
  }
}

void CpuBackend::to_host(ConstView src, void* host) {
  if (!src.empty()) std::memcpy(host, src.data, static_cast<size_t>(src.bytes()));
}
void CpuBackend::from_host(const void* host, View dst) {
  if (!dst.empty()) std::memcpy(dst.data, host, static_cast<size_t>(dst.bytes()));
}

void CpuBackend::linear_forward(ConstView x, ConstView weight, ConstView bias, View y, int64_t n, int64_t in, int64_t out) {
  run_staged(x.dtype, [&](auto& s) { cpu::linear_forward(s.in(x), s.in(weight), s.in(bias), s.out(y), n, in, out); });
}

void CpuBackend::linear_backward(ConstView dy, ConstView x, ConstView weight, View dx, View dweight, View dbias, int64_t n,
                                 int64_t in, int64_t out) {
  run_staged(x.dtype, [&](auto& s) {
    cpu::linear_backward(s.in(dy), s.in(x), s.in(weight), s.out(dx), s.acc(dweight), s.acc(dbias), n, in, out);
  });
}

void CpuBackend::layernorm_forward(ConstView x, ConstView gamma, ConstView beta, View y, View mean, View rstd, int64_t n,
                                   int64_t c) {
  run_staged(x.dtype, [&](auto& s) {
    cpu::layernorm_forward(s.in(x), s.in(gamma), s.in(beta), s.out(y), s.acc(mean), s.acc(rstd), n, c);
  });
}

void CpuBackend::layernorm_backward(ConstView dy, ConstView x, ConstView gamma, ConstView mean, ConstView rstd, View dx,
                                    View dgamma, View dbeta, int64_t n, int64_t c) {
  run_staged(x.dtype, [&](auto& s) {
    cpu::layernorm_backward(s.in(dy), s.in(x), s.in(gamma), s.acc(mean), s.acc(rstd), s.out(dx), s.acc(dgamma),
                            s.acc(dbeta), n, c);
  });
}

void CpuBackend::gelu_forward(ConstView x, View y, int64_t n, GeluKind kind) {
  run_staged(x.dtype, [&](auto& s) {
    if (kind == GeluKind::erf)
      cpu::gelu_erf_forward(s.in(x), s.out(y), n);
    else
      cpu::gelu_forward(s.in(x), s.out(y), n);
  });
}
void CpuBackend::gelu_backward(ConstView dy, ConstView x, View dx, int64_t n, GeluKind kind) {
  run_staged(x.dtype, [&](auto& s) {
    if (kind == GeluKind::erf)
      cpu::gelu_erf_backward(s.in(dy), s.in(x), s.out(dx), n);
    else
      cpu::gelu_backward(s.in(dy), s.in(x), s.out(dx), n);
  });
}

namespace {
// The key lengths of a mask, (B) i32, or nullptr for none.
const int32_t* mask_lengths(const AttentionMask& mask, int64_t b) {
  if (mask.lengths.empty()) return nullptr;
  if (mask.lengths.dtype != DType::i32 || mask.lengths.numel < b)
    throw UsageError(fmt::format("attention: the mask's lengths must be {} i32 values", b));
  return mask.lengths.as<int32_t>();
}
}  // namespace

void CpuBackend::attention_forward(ConstView qkv, View out, View probs, int64_t b, int64_t t, int64_t c, int64_t h,
                                   const AttentionMask& mask) {
  const int32_t* lengths = mask_lengths(mask, b);
  run_staged(qkv.dtype, [&](auto& s) {
    cpu::attention_forward(s.in(qkv), s.out(out), s.out(probs), b, t, c, h, mask.causal, lengths);
  });
}
// The probabilities hold everything the backward needs; the forward's output is not read.
void CpuBackend::attention_backward(ConstView dout, ConstView qkv, ConstView /*out*/, ConstView probs, View dqkv, int64_t b,
                                    int64_t t, int64_t c, int64_t h, const AttentionMask& mask) {
  const int32_t* lengths = mask_lengths(mask, b);
  run_staged(qkv.dtype, [&](auto& s) {
    cpu::attention_backward(s.in(dout), s.in(qkv), s.in(probs), s.out(dqkv), b, t, c, h, mask.causal, lengths);
  });
}

void CpuBackend::embedding_forward(ConstView tokens, ConstView wte, ConstView wpe, View out, int64_t b, int64_t t,
                                   int64_t c, int64_t v) {
  run_staged(wte.dtype, [&](auto& s) {
    cpu::embedding_forward(s.ids(tokens), s.in(wte), s.in(wpe), s.out(out), b, t, c, v);
  });
}
void CpuBackend::embedding_backward(ConstView tokens, ConstView dout, View dwte, View dwpe, int64_t b, int64_t t,
                                    int64_t c) {
  run_staged(dout.dtype,
             [&](auto& s) { cpu::embedding_backward(s.ids(tokens), s.in(dout), s.acc(dwte), s.acc(dwpe), b, t, c); });
}

void CpuBackend::type_embedding_forward(ConstView types, ConstView table, View out, int64_t n, int64_t c, int64_t r) {
  run_staged(table.dtype,
             [&](auto& s) { cpu::type_embedding_forward(s.ids(types), s.in(table), s.inout(out), n, c, r); });
}
void CpuBackend::type_embedding_backward(ConstView types, ConstView dout, View dtable, int64_t n, int64_t c,
                                         int64_t /*r*/) {
  run_staged(dout.dtype,
             [&](auto& s) { cpu::type_embedding_backward(s.ids(types), s.in(dout), s.acc(dtable), n, c); });
}

void CpuBackend::cross_entropy_forward(ConstView logits, ConstView targets, View lse, View loss, int64_t n, int64_t v) {
  if (loss.dtype != DType::f64 || loss.numel != 1) throw UsageError("cpu backend: the loss is one double");
  run_staged(logits.dtype, [&](auto& s) {
    *loss.as<double>() = cpu::cross_entropy_forward(s.in(logits), s.ids(targets), s.acc(lse), n, v);
  });
}
void CpuBackend::cross_entropy_backward(ConstView logits, ConstView targets, ConstView lse, View dlogits, int64_t n,
                                        int64_t v, double loss_scale) {
  run_staged(logits.dtype, [&](auto& s) {
    cpu::cross_entropy_backward(s.in(logits), s.ids(targets), s.acc(lse), s.out(dlogits), n, v, loss_scale);
  });
}

void CpuBackend::add(ConstView a, ConstView b, View out, int64_t n) {
  run_staged(a.dtype, [&](auto& s) { cpu::add(s.in(a), s.in(b), s.out(out), n); });
}
void CpuBackend::accumulate(View acc, ConstView x, int64_t n) {
  run_staged(x.dtype, [&](auto& s) { cpu::accumulate(s.inout(acc), s.in(x), n); });
}

void CpuBackend::adamw_step(const AdamWConfig& config, const ParamLayout& layout, double lr, int64_t step,
                            double grad_scale, ConstView params_in, ConstView grads, View m, View v, View params_out) {
  on_master({params_in.dtype, grads.dtype, m.dtype, v.dtype, params_out.dtype}, [&](auto zero) {
    using T = decltype(zero);
    executor::adamw_step<T>(config, layout, lr, step, grad_scale, span_of<T>(params_in), span_of<T>(grads),
                            span_of<T>(m), span_of<T>(v), span_of<T>(params_out));
  });
}

void CpuBackend::sgd_step(const SgdConfig& config, const ParamLayout& layout, double lr, double grad_scale,
                          ConstView params_in, ConstView grads, View momentum, View params_out) {
  on_master({params_in.dtype, grads.dtype, momentum.dtype, params_out.dtype}, [&](auto zero) {
    using T = decltype(zero);
    executor::sgd_step<T>(config, layout, lr, grad_scale, span_of<T>(params_in), span_of<T>(grads),
                          span_of<T>(momentum), span_of<T>(params_out));
  });
}

double CpuBackend::sum_of_squares(ConstView values) {
  double out = 0;
  on_master({values.dtype}, [&](auto zero) {
    using T = decltype(zero);
    out = executor::sum_of_squares<T>(span_of<T>(values));
  });
  return out;
}

}  // namespace pd2bw::executor::cpu

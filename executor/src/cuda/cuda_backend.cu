// The cuda backend (see cuda_backend.hpp): memory, clock, data movement and the checks every op makes
// before its launcher (kernels.hpp, linear.hpp) runs it on the backend's stream.
#include "cuda/cuda_backend.hpp"

#include <climits>
#include <cmath>
#include <functional>
#include <initializer_list>
#include <new>

#include "backend/arena.hpp"
#include "cuda/backend_checks.hpp"
#include "cuda/backend_scope.hpp"
#include "cuda/kernels.hpp"
#include "cuda/linear.hpp"
#include "cuda/op_timer.hpp"
#include "pd2bw/executor/optimizer.hpp"

namespace pd2bw::executor::cuda {

void throw_cuda(cudaError_t status, const std::string& what) {
  throw Error("CUDA error in " + what + ": " + cudaGetErrorName(status) + ": " + cudaGetErrorString(status),
              "an error from an earlier asynchronous op can surface here; run under compute-sanitizer to find it");
}

void throw_usage(const char* op, const std::string& what) {
  throw UsageError(std::string("cuda backend: ") + op + ": " + what);
}

namespace {

std::string str(int64_t x) { return std::to_string(x); }

void* device_block(int64_t bytes) {
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, static_cast<size_t>(bytes));
  if (status != cudaSuccess) {
    (void)cudaGetLastError();  // not sticky: leave no error for the next launch check to report
    size_t free_bytes = 0, total = 0;
    (void)cudaMemGetInfo(&free_bytes, &total);
    (void)cudaGetLastError();
    throw Error("out of device memory: cudaMalloc of " + str(bytes) + " bytes failed (" + cudaGetErrorString(status) +
                    "; " + str(static_cast<int64_t>(free_bytes)) + " of " + str(static_cast<int64_t>(total)) +
                    " bytes free)",
                "plan with less memory per device (pd2bw plan --device-memory), a smaller microbatch or recompute");
  }
  return p;
}

}  // namespace

CudaBackend::CudaBackend() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    throw UsageError(std::string("no CUDA device: ") +
                         (status != cudaSuccess ? cudaGetErrorString(status) : "the driver sees none"),
                     "run on a machine with an NVIDIA GPU and its driver, or use the cpu backend (--device cpu)");
  }
  check(cudaGetDevice(&device_), "cudaGetDevice");
  stream_ = make_stream();
  arena_ = std::make_unique<CachingArena>(device_block, [](void* p) { (void)cudaFree(p); });
  linear_ = std::make_unique<Linear>();
  void* flags = nullptr;
  check(cudaHostAlloc(&flags, sizeof(Flags), cudaHostAllocMapped), "cudaHostAlloc (error flags)");
  flags_memory_ = PinnedMemory(flags);
  flags_ = new (flags) Flags{};
  void* device_view = nullptr;
  check(cudaHostGetDevicePointer(&device_view, flags, 0), "cudaHostGetDevicePointer");
  flags_device_ = static_cast<Flags*>(device_view);
  op_timer_ = OpTimer::from_environment();
}

CudaBackend::~CudaBackend() {
  // Kernels may still read buffers that are about to go back to the driver.
  (void)cudaStreamSynchronize(stream_.get());
  (void)cudaGetLastError();
  op_timer_.reset();
  chunk_tables_.clear();
  ones_f32_.reset();
  ones_bf16_.reset();
}

void CudaBackend::wait() {
  check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
  check_flags();
}

void CudaBackend::synchronize() { wait(); }

Buffer CudaBackend::alloc(DType dtype, int64_t numel) { return arena_->alloc(dtype, numel); }
MemoryStats CudaBackend::memory() const { return arena_->stats(); }
void CudaBackend::reset_peak() { arena_->reset_peak(); }

TimerMark CudaBackend::mark() {
  int64_t id = 0;
  if (!free_events_.empty()) {
    id = free_events_.back();
    free_events_.pop_back();
  } else {
    id = static_cast<int64_t>(events_.size());
    events_.push_back(make_event(true));
  }
  check(cudaEventRecord(events_[static_cast<size_t>(id)].get(), stream()), "cudaEventRecord");
  return {0.0, id};
}

double CudaBackend::elapsed_ms(const TimerMark& from, const TimerMark& to) {
  const auto n = static_cast<int64_t>(events_.size());
  if (from.event < 0 || from.event >= n || to.event < 0 || to.event >= n)
    throw_usage("elapsed_ms", "a mark this backend did not make");
  const cudaEvent_t a = events_[static_cast<size_t>(from.event)].get(), b = events_[static_cast<size_t>(to.event)].get();
  check(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  free_events_.push_back(from.event);
  if (to.event != from.event) free_events_.push_back(to.event);
  check_flags();
  return static_cast<double>(ms);
}

void CudaBackend::fill_zero(View x) {
  if (!x.empty()) check(cudaMemsetAsync(x.data, 0, static_cast<size_t>(x.bytes()), stream()), "cudaMemsetAsync");
}

void CudaBackend::copy(ConstView src, View dst) {
  Scope scope(*this, "copy");
  if (src.numel != dst.numel)
    throw_usage("copy", str(src.numel) + " elements into " + str(dst.numel));
  if (src.empty()) return;
  if (src.dtype == dst.dtype) {
    check(cudaMemcpyAsync(dst.data, src.data, static_cast<size_t>(src.bytes()), cudaMemcpyDeviceToDevice, stream()),
          "cudaMemcpyAsync (device to device)");
    return;
  }
  const int64_t n = src.numel;
  using D = DType;
  const auto s = src.dtype, d = dst.dtype;
  if (s == D::f32 && d == D::bf16) return cast(src.as<float>(), dst.as<bf16_t>(), n, stream());
  if (s == D::f32 && d == D::f64) return cast(src.as<float>(), dst.as<double>(), n, stream());
  if (s == D::f64 && d == D::f32) return cast(src.as<double>(), dst.as<float>(), n, stream());
  if (s == D::f64 && d == D::bf16) return cast(src.as<double>(), dst.as<bf16_t>(), n, stream());
  if (s == D::bf16 && d == D::f32) return cast(src.as<bf16_t>(), dst.as<float>(), n, stream());
  if (s == D::bf16 && d == D::f64) return cast(src.as<bf16_t>(), dst.as<double>(), n, stream());
  throw_usage("copy", "between int32 and float buffers");
}

void CudaBackend::to_host(ConstView src, void* host) {
  if (!src.empty())
    check(cudaMemcpyAsync(host, src.data, static_cast<size_t>(src.bytes()), cudaMemcpyDeviceToHost, stream()),
          "cudaMemcpyAsync (device to host)");
  wait();
}

// A copy from pageable memory returns once the driver has staged it, so the caller may reuse `host`
// at once; from page-locked memory the DMA reads it later, so that case waits.
void CudaBackend::from_host(const void* host, View dst) {
  if (dst.empty()) return;
  check(cudaMemcpyAsync(dst.data, host, static_cast<size_t>(dst.bytes()), cudaMemcpyHostToDevice, stream()),
        "cudaMemcpyAsync (host to device)");
  cudaPointerAttributes attributes{};
  if (cudaPointerGetAttributes(&attributes, host) != cudaSuccess) (void)cudaGetLastError();
  if (attributes.type == cudaMemoryTypeHost) check(cudaStreamSynchronize(stream()), "cudaStreamSynchronize");
}

void CudaBackend::linear_forward(ConstView x, ConstView weight, ConstView bias, View y, int64_t n, int64_t in,
                                 int64_t out) {
  Scope scope(*this, "linear_forward");
  const char* op = "linear_forward";
  const DType t = compute_of(op, {x.dtype, weight.dtype, y.dtype});
  need(op, "x", x, t, n * in);
  need(op, "weight", weight, t, out * in);
  need(op, "y", y, t, n * out);
  if (!bias.empty()) need(op, "bias", bias, t, out);
  dispatch(t, [&](auto z) {
    using T = decltype(z);
    linear_->forward<T>(ptr<T>(x), ptr<T>(weight), ptr<T>(bias), ptr<T>(y), n, in, out, stream());
  });
}

void CudaBackend::linear_backward(ConstView dy, ConstView x, ConstView weight, View dx, View dweight, View dbias,
                                  int64_t n, int64_t in, int64_t out) {
  Scope scope(*this, "linear_backward");
  const char* op = "linear_backward";
  const DType t = compute_of(op, {dy.dtype, x.dtype});
  need(op, "dy", dy, t, n * out);
  need(op, "x", x, t, n * in);
  if (!dx.empty()) need(op, "weight", weight, t, out * in);
  if (!dx.empty()) need(op, "dx", dx, t, n * in);
  if (!dweight.empty()) need(op, "dweight", dweight, DType::f32, out * in);
  if (!dbias.empty()) need(op, "dbias", dbias, DType::f32, out);
  const void* one = dbias.empty() ? nullptr : ones(t, n);
  dispatch(t, [&](auto z) {
    using T = decltype(z);
    linear_->backward<T>(ptr<T>(dy), ptr<T>(x), ptr<T>(weight), ptr<T>(dx), ptr<float>(dweight), ptr<float>(dbias),
                         static_cast<const T*>(one), n, in, out, stream());
  });
}

void CudaBackend::layernorm_forward(ConstView x, ConstView gamma, ConstView beta, View y, View mean, View rstd, int64_t n,
                                    int64_t c) {
  Scope scope(*this, "layernorm_forward");
  const char* op = "layernorm_forward";
  const DType t = compute_of(op, {x.dtype, gamma.dtype, beta.dtype, y.dtype});
  need(op, "x", x, t, n * c);
  need(op, "gamma", gamma, t, c);
  need(op, "beta", beta, t, c);
  need(op, "y", y, t, n * c);
  need(op, "mean", mean, DType::f32, n);
  need(op, "rstd", rstd, DType::f32, n);
  dispatch(t, [&](auto z) {
    using T = decltype(z);
    cuda::layernorm_forward<T>(ptr<T>(x), ptr<T>(gamma), ptr<T>(beta), ptr<T>(y), ptr<float>(mean), ptr<float>(rstd), n,
                               c, stream());
  });
}

void CudaBackend::layernorm_backward(ConstView dy, ConstView x, ConstView gamma, ConstView mean, ConstView rstd, View dx,
                                     View dgamma, View dbeta, int64_t n, int64_t c) {
  Scope scope(*this, "layernorm_backward");
  const char* op = "layernorm_backward";
  const DType t = compute_of(op, {dy.dtype, x.dtype, gamma.dtype});
  need(op, "dy", dy, t, n * c);
  need(op, "x", x, t, n * c);
  need(op, "gamma", gamma, t, c);
  need(op, "mean", mean, DType::f32, n);
  need(op, "rstd", rstd, DType::f32, n);
  if (!dx.empty()) need(op, "dx", dx, t, n * c);
  if (dgamma.empty() != dbeta.empty()) throw_usage(op, "dgamma and dbeta are both given or both empty");
  if (!dgamma.empty()) need(op, "dgamma", dgamma, DType::f32, c);
  if (!dbeta.empty()) need(op, "dbeta", dbeta, DType::f32, c);
  Buffer work = dgamma.empty() ? Buffer() : scratch(*this, DType::f32, layernorm_backward_scratch(n, c));
  dispatch(t, [&](auto z) {
    using T = decltype(z);
    cuda::layernorm_backward<T>(ptr<T>(dy), ptr<T>(x), ptr<T>(gamma), ptr<float>(mean), ptr<float>(rstd), ptr<T>(dx),
                                ptr<float>(dgamma), ptr<float>(dbeta), n, c, work.data<float>(), stream());
  });
}

void CudaBackend::gelu_forward(ConstView x, View y, int64_t n, GeluKind kind) {
  Scope scope(*this, "gelu_forward");
  const DType t = compute_of("gelu_forward", {x.dtype, y.dtype});
  need("gelu_forward", "x", x, t, n);
  need("gelu_forward", "y", y, t, n);
  dispatch(t, [&](auto z) {
    using T = decltype(z);
    cuda::gelu_forward<T>(ptr<T>(x), ptr<T>(y), n, kind, stream());
  });
}

void CudaBackend::gelu_backward(ConstView dy, ConstView x, View dx, int64_t n, GeluKind kind) {
  Scope scope(*this, "gelu_backward");
  const DType t = compute_of("gelu_backward", {dy.dtype, x.dtype, dx.dtype});
  need("gelu_backward", "dy", dy, t, n);
  need("gelu_backward", "x", x, t, n);
  need("gelu_backward", "dx", dx, t, n);
  dispatch(t, [&](auto z) {
    using T = decltype(z);
    cuda::gelu_backward<T>(ptr<T>(dy), ptr<T>(x), ptr<T>(dx), n, kind, stream());
  });
}

AttentionStash CudaBackend::attention_stash(DType /*compute*/, int64_t b, int64_t t, int64_t h) const {
  return {DType::f32, b * h * t};
}

void CudaBackend::attention_forward(ConstView qkv, View out, View lse, int64_t b, int64_t t, int64_t c, int64_t h,
                                    const AttentionMask& mask) {
  Scope scope(*this, "attention_forward");
  const char* op = "attention_forward";
  const DType dt = compute_of(op, {qkv.dtype, out.dtype});
  need(op, "qkv", qkv, dt, b * t * 3 * c);
  need(op, "out", out, dt, b * t * c);
  need(op, "stash", lse, DType::f32, b * h * t);
  const AttentionKeys keys = attention_keys(op, mask, b, t);
  dispatch(dt, [&](auto z) {
    using T = decltype(z);
    cuda::attention_forward<T>(ptr<T>(qkv), ptr<T>(out), ptr<float>(lse), b, t, c, h, keys, stream());
  });
}

void CudaBackend::attention_backward(ConstView dout, ConstView qkv, ConstView out, ConstView lse, View dqkv, int64_t b,
                                     int64_t t, int64_t c, int64_t h, const AttentionMask& mask) {
  Scope scope(*this, "attention_backward");
  const char* op = "attention_backward";
  const DType dt = compute_of(op, {dout.dtype, qkv.dtype, out.dtype, dqkv.dtype});
  need(op, "dout", dout, dt, b * t * c);
  need(op, "qkv", qkv, dt, b * t * 3 * c);
  need(op, "out", out, dt, b * t * c);
  need(op, "stash", lse, DType::f32, b * h * t);
  need(op, "dqkv", dqkv, dt, b * t * 3 * c);
  const AttentionKeys keys = attention_keys(op, mask, b, t);
  Buffer work = scratch(*this, DType::f32, attention_backward_scratch(b, t, h));
  dispatch(dt, [&](auto z) {
    using T = decltype(z);
    cuda::attention_backward<T>(ptr<T>(dout), ptr<T>(qkv), ptr<T>(out), ptr<float>(lse), ptr<T>(dqkv), b, t, c, h, keys,
                                work.data<float>(), stream());
  });
}

AttentionKeys CudaBackend::attention_keys(const char* op, const AttentionMask& mask, int64_t b, int64_t t) {
  if (mask.causal) return {};  // a causal mask reads no lengths, as the cpu's
  if (!mask.lengths.empty()) need(op, "lengths", mask.lengths, DType::i32, b);
  attention_t_ = t;
  return {false, ptr<int32_t>(mask.lengths), &flags_device_->bad_length};
}

void CudaBackend::add(ConstView a, ConstView b, View out, int64_t n) {
  Scope scope(*this, "add");
  const DType dt = compute_of("add", {a.dtype, b.dtype, out.dtype});
  need("add", "a", a, dt, n);
  need("add", "b", b, dt, n);
  need("add", "out", out, dt, n);
  dispatch(dt, [&](auto z) {
    using T = decltype(z);
    cuda::add<T>(ptr<T>(a), ptr<T>(b), ptr<T>(out), n, stream());
  });
}

void CudaBackend::accumulate(View acc, ConstView x, int64_t n) {
  Scope scope(*this, "accumulate");
  const DType dt = compute_of("accumulate", {acc.dtype, x.dtype});
  need("accumulate", "acc", acc, dt, n);
  need("accumulate", "x", x, dt, n);
  dispatch(dt, [&](auto z) {
    using T = decltype(z);
    cuda::accumulate<T>(ptr<T>(acc), ptr<T>(x), n, stream());
  });
}

const void* CudaBackend::ones(DType t, int64_t n) {
  Buffer& b = t == DType::f32 ? ones_f32_ : ones_bf16_;
  if (b.numel() < n) {
    b = alloc(t, n);
    dispatch(t, [&](auto z) {
      using T = decltype(z);
      fill_ones<T>(b.data<T>(), n, stream());
    });
  }
  return b.data<void>();
}

}  // namespace pd2bw::executor::cuda

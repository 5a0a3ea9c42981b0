// The cuda backend's ops that read ids (see cuda_backend.hpp): token + position embedding, token-type
// embedding and cross-entropy, and the error flags in mapped host memory through which their kernels
// (and attention's, for a bad sequence length) report data errors at the next synchronising call.
#include <string>

#include "cuda/backend_checks.hpp"
#include "cuda/backend_scope.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/kernels.hpp"

namespace pd2bw::executor::cuda {

namespace {
std::string str(int64_t x) { return std::to_string(x); }
}  // namespace

void CudaBackend::check_flags() {
  volatile Flags* mapped = flags_;  // written by kernels: read the memory, not a cached copy
  Flags seen;
  seen.bad_token = mapped->bad_token;
  seen.bad_target = mapped->bad_target;
  seen.bad_type = mapped->bad_type;
  seen.bad_length = mapped->bad_length;
  // Kernels queued later may still run and lower a flag: the host writes the flags only when it has seen
  // one raised (and then ends the run), so no raise can be lost between this read and a reset.
  if (seen.bad_token == ~0ULL && seen.bad_target == ~0ULL && seen.bad_type == ~0ULL && seen.bad_length == ~0ULL) return;
  mapped->bad_token = ~0ULL;
  mapped->bad_target = ~0ULL;
  mapped->bad_type = ~0ULL;
  mapped->bad_length = ~0ULL;
  throw_flagged(seen);
}

namespace {
// The (index, value) a flag holds: index << 32 | the value's 32 bits.
int64_t flag_index(unsigned long long flag) { return static_cast<int64_t>(flag >> 32); }
std::string flag_value(unsigned long long flag) {
  return std::to_string(static_cast<int32_t>(static_cast<uint32_t>(flag & 0xffffffffULL)));
}
}  // namespace

void CudaBackend::throw_flagged(const Flags& seen) const {
  const char* vocabulary = "check that the data set was tokenised with the model's vocabulary";
  if (seen.bad_token != ~0ULL) {
    const int64_t position = flag_index(seen.bad_token);
    throw Error("embedding: token " + flag_value(seen.bad_token) + " at (batch " + str(position / embedding_t_) +
                    ", position " + str(position % embedding_t_) + ") is outside [0, " + str(embedding_v_) + ")",
                vocabulary);
  }
  if (seen.bad_type != ~0ULL)
    throw Error("embedding: token type " + flag_value(seen.bad_type) + " at position " +
                    str(flag_index(seen.bad_type)) + " is outside [0, " + str(type_embedding_r_) + ")",
                "token types are segment ids: 0 for the first segment, 1 for the second");
  if (seen.bad_length != ~0ULL)
    throw Error("attention: sequence " + str(flag_index(seen.bad_length)) + " has length " +
                    flag_value(seen.bad_length) + ", outside [1, " + str(attention_t_) + "]",
                "a key padding mask's lengths count each sequence's real tokens, at least one");
  throw Error("cross_entropy: target " + flag_value(seen.bad_target) + " in row " + str(flag_index(seen.bad_target)) +
                  " is outside [0, " + str(cross_entropy_v_) + ")",
              vocabulary);
}

void CudaBackend::embedding_forward(ConstView tokens, ConstView wte, ConstView wpe, View out, int64_t b, int64_t t,
                                    int64_t c, int64_t v) {
  Scope scope(*this, "embedding_forward");
  const char* op = "embedding_forward";
  const DType dt = compute_of(op, {wte.dtype, wpe.dtype, out.dtype});
  need(op, "tokens", tokens, DType::i32, b * t);
  need(op, "wte", wte, dt, v * c);
  need(op, "wpe", wpe, dt, t * c);
  need(op, "out", out, dt, b * t * c);
  embedding_t_ = t;
  embedding_v_ = v;
  dispatch(dt, [&](auto z) {
    using T = decltype(z);
    cuda::embedding_forward<T>(ptr<int32_t>(tokens), ptr<T>(wte), ptr<T>(wpe), ptr<T>(out), b, t, c, v,
                               &flags_device_->bad_token, stream());
  });
}

void CudaBackend::embedding_backward(ConstView tokens, ConstView dout, View dwte, View dwpe, int64_t b, int64_t t,
                                     int64_t c) {
  Scope scope(*this, "embedding_backward");
  const char* op = "embedding_backward";
  const DType dt = compute_of(op, {dout.dtype});
  if (c <= 0) throw_usage(op, "bad width");
  need(op, "tokens", tokens, DType::i32, b * t);
  need(op, "dout", dout, dt, b * t * c);
  need(op, "dwpe", dwpe, DType::f32, t * c);
  need(op, "dwte", dwte, DType::f32, c);
  const int64_t v = dwte.numel / c;  // the table's rows: the vocabulary
  const int64_t bytes = embedding_backward_scratch(b * t);
  Buffer work = scratch(*this, DType::i32, ceil_div(bytes, 4));
  dispatch(dt, [&](auto z) {
    using T = decltype(z);
    cuda::embedding_backward<T>(ptr<int32_t>(tokens), ptr<T>(dout), ptr<float>(dwte), ptr<float>(dwpe), b, t, c, v,
                                work.data<void>(), bytes, stream());
  });
}

void CudaBackend::type_embedding_forward(ConstView types, ConstView table, View out, int64_t n, int64_t c, int64_t r) {
  Scope scope(*this, "type_embedding_forward");
  const char* op = "type_embedding_forward";
  const DType dt = compute_of(op, {table.dtype, out.dtype});
  need(op, "types", types, DType::i32, n);
  need(op, "table", table, dt, r * c);
  need(op, "out", out, dt, n * c);
  type_embedding_r_ = r;
  dispatch(dt, [&](auto z) {
    using T = decltype(z);
    cuda::type_embedding_forward<T>(ptr<int32_t>(types), ptr<T>(table), ptr<T>(out), n, c, r, &flags_device_->bad_type,
                                    stream());
  });
}

void CudaBackend::type_embedding_backward(ConstView types, ConstView dout, View dtable, int64_t n, int64_t c,
                                          int64_t r) {
  Scope scope(*this, "type_embedding_backward");
  const char* op = "type_embedding_backward";
  const DType dt = compute_of(op, {dout.dtype});
  need(op, "types", types, DType::i32, n);
  need(op, "dout", dout, dt, n * c);
  need(op, "dtable", dtable, DType::f32, r * c);
  dispatch(dt, [&](auto z) {
    using T = decltype(z);
    cuda::type_embedding_backward<T>(ptr<int32_t>(types), ptr<T>(dout), ptr<float>(dtable), n, c, r, stream());
  });
}

void CudaBackend::cross_entropy_forward(ConstView logits, ConstView targets, View lse, View loss, int64_t n,
                                        int64_t v) {
  Scope scope(*this, "cross_entropy_forward");
  const char* op = "cross_entropy_forward";
  const DType dt = compute_of(op, {logits.dtype});
  need(op, "logits", logits, dt, n * v);
  need(op, "targets", targets, DType::i32, n);
  need(op, "lse", lse, DType::f32, n);
  if (loss.dtype != DType::f64 || loss.numel != 1) throw_usage(op, "the loss is one double");
  cross_entropy_v_ = v;
  Buffer work = scratch(*this, DType::f64, cross_entropy_scratch(n));
  dispatch(dt, [&](auto z) {
    using T = decltype(z);
    cuda::cross_entropy_forward<T>(ptr<T>(logits), ptr<int32_t>(targets), ptr<float>(lse), ptr<double>(loss), n, v,
                                   work.data<double>(), &flags_device_->bad_target, stream());
  });
}

void CudaBackend::cross_entropy_backward(ConstView logits, ConstView targets, ConstView lse, View dlogits, int64_t n,
                                         int64_t v, double loss_scale) {
  Scope scope(*this, "cross_entropy_backward");
  const char* op = "cross_entropy_backward";
  const DType dt = compute_of(op, {logits.dtype, dlogits.dtype});
  need(op, "logits", logits, dt, n * v);
  need(op, "targets", targets, DType::i32, n);
  need(op, "lse", lse, DType::f32, n);
  need(op, "dlogits", dlogits, dt, n * v);
  Buffer count = alloc(DType::i32, 1);  // K, counted on the device
  dispatch(dt, [&](auto z) {
    using T = decltype(z);
    cuda::cross_entropy_backward<T>(ptr<T>(logits), ptr<int32_t>(targets), ptr<float>(lse), ptr<T>(dlogits), n, v,
                                    loss_scale, count.data<int32_t>(), stream());
  });
}

}  // namespace pd2bw::executor::cuda

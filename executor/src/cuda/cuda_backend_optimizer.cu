// The cuda backend's optimizer ops: AdamW and SGD over a stage's flat fp32 buffers in one launch each
// (adamw.cu, sgd.cu), with the layout's chunk table uploaded once and kept, and the sum of squares the
// clipping needs (the one value a step reads back).
#include <algorithm>
#include <cmath>
#include <functional>

#include "backend/arena.hpp"
#include "cuda/backend_scope.hpp"
#include "cuda/kernels.hpp"
#include "pd2bw/executor/optimizer.hpp"

namespace pd2bw::executor::cuda {

namespace {

void need_f32(const char* op, const char* what, ConstView v, int64_t numel) {
  if (v.dtype != DType::f32)
    throw_usage(op, std::string(what) + " is " + std::string(to_string(v.dtype)) + "; the cuda backend keeps fp32 masters");
  if (v.numel != numel || (numel > 0 && v.data == nullptr))
    throw Error(std::string(op) + ": a buffer has " + std::to_string(v.numel) + " elements, the layout has " +
                std::to_string(numel));
}

// As the reference's check: in place needs the very same buffer.
void check_overlap(const char* op, ConstView in, ConstView out) {
  const auto* a = static_cast<const char*>(in.data);
  const auto* b = static_cast<const char*>(out.data);
  const std::less<const char*> before;
  if (a != b && before(a, b + out.bytes()) && before(b, a + in.bytes()))
    throw Error(std::string(op) + ": params_out partially overlaps params_in (in place needs the same buffer)");
}

}  // namespace

const void* CudaBackend::chunks(const ParamLayout& layout, int64_t* count) {
  std::vector<int64_t> signature;
  for (const TensorInfo& t : layout) {
    signature.push_back(t.offset);
    signature.push_back(t.numel());
    signature.push_back(t.is_matrix() ? 1 : 0);
  }
  for (ChunkTable& c : chunk_tables_)
    if (c.signature == signature) {
      *count = c.count;
      return c.table.data<void>();
    }
  std::vector<OptimizerChunk> table;
  for (const TensorInfo& t : layout)
    for (int64_t begin = t.offset; begin < t.offset + t.numel(); begin += kOptimizerChunk)
      table.push_back({begin, std::min(begin + kOptimizerChunk, t.offset + t.numel()), t.is_matrix() ? 1 : 0});
  ChunkTable c;
  c.signature = std::move(signature);
  c.count = static_cast<int64_t>(table.size());
  const int64_t words = c.count * static_cast<int64_t>(sizeof(OptimizerChunk) / sizeof(int64_t));
  static_assert(sizeof(OptimizerChunk) % sizeof(int64_t) == 0, "chunks are whole int64 words");
  if (words > 0) {
    c.table = alloc(DType::f64, words);  // 8-byte words; only the bytes matter
    from_host(table.data(), c.table.view());
  }
  chunk_tables_.push_back(std::move(c));
  *count = chunk_tables_.back().count;
  return chunk_tables_.back().table.data<void>();
}

void CudaBackend::adamw_step(const AdamWConfig& config, const ParamLayout& layout, double lr, int64_t step,
                             double grad_scale, ConstView params_in, ConstView grads, View m, View v, View params_out) {
  Scope scope(*this, "adamw_step");
  const char* op = "adamw_step";
  const int64_t n = layout_numel(layout);
  const ConstView views[] = {params_in, grads, m, v, params_out};
  const char* names[] = {"params_in", "grads", "m", "v", "params_out"};
  for (int i = 0; i < 5; ++i) need_f32(op, names[i], views[i], n);
  check_overlap(op, params_in, params_out);
  if (step < 1) throw Error("adamw_step: step " + std::to_string(step) + " must be >= 1 (1-based)");
  AdamWArgs a{};
  a.lr = lr;
  a.beta1 = config.beta1;
  a.beta2 = config.beta2;
  a.one_minus_beta1 = 1.0 - config.beta1;
  a.one_minus_beta2 = 1.0 - config.beta2;
  a.bias_correction1 = 1.0 - std::pow(config.beta1, static_cast<double>(step));
  a.bias_correction2 = 1.0 - std::pow(config.beta2, static_cast<double>(step));
  a.eps = config.eps;
  a.weight_decay = config.weight_decay;
  a.grad_scale = grad_scale;
  int64_t count = 0;
  const auto* table = static_cast<const OptimizerChunk*>(chunks(layout, &count));
  cuda::adamw_step(a, table, count, params_in.as<float>(), grads.as<float>(), m.as<float>(), v.as<float>(),
                   params_out.as<float>(), stream());
}

void CudaBackend::sgd_step(const SgdConfig& config, const ParamLayout& layout, double lr, double grad_scale,
                           ConstView params_in, ConstView grads, View momentum, View params_out) {
  Scope scope(*this, "sgd_step");
  const char* op = "sgd_step";
  const int64_t n = layout_numel(layout);
  const ConstView views[] = {params_in, grads, momentum, params_out};
  const char* names[] = {"params_in", "grads", "momentum", "params_out"};
  for (int i = 0; i < 4; ++i) need_f32(op, names[i], views[i], n);
  check_overlap(op, params_in, params_out);
  const SgdArgs a{lr, config.momentum, config.weight_decay, grad_scale};
  int64_t count = 0;
  const auto* table = static_cast<const OptimizerChunk*>(chunks(layout, &count));
  cuda::sgd_step(a, table, count, params_in.as<float>(), grads.as<float>(), momentum.as<float>(), params_out.as<float>(),
                 stream());
}

double CudaBackend::sum_of_squares(ConstView values) {
  Scope scope(*this, "sum_of_squares");
  if (values.dtype != DType::f32) throw_usage("sum_of_squares", "the cuda backend sums fp32 gradients only");
  Buffer work = alloc(DType::f64, sum_of_squares_scratch(values.numel) + 1);
  const View out = work.view().slice(work.numel() - 1, 1);
  cuda::sum_of_squares(static_cast<const float*>(values.data), values.numel, work.data<double>(), out.as<double>(),
                       stream());
  double total = 0;
  to_host(out, &total);
  return total;
}

}  // namespace pd2bw::executor::cuda

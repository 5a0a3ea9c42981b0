// GPT configuration checks, layer names and layouts, GPT-2 initialisation, and the owned buffers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string_view>

#include "pd2bw/error.hpp"
#include "gpt_internal.hpp"
#include "pd2bw/executor/gpt.hpp"
#include "pd2bw/executor/rng.hpp"

namespace pd2bw::executor {
namespace {

void require_positive(int64_t value, const char* field) {
  if (value <= 0) throw UsageError(fmt::format("GPT config: {} = {} must be > 0", field, value));
}

void check_layer(const GptConfig& config, int64_t layer) {
  if (layer < 0 || layer >= config.layer_count()) {
    throw UsageError(fmt::format("GPT layer index {} is outside [0, {})", layer, config.layer_count()));
  }
}

// Parameters of the whole model, times 64 bytes (double weights, versions, gradients and moments): every
// tensor's element count and byte size is below this, so once it fits nothing derived overflows.
void check_model_size(const GptConfig& g) {
  const char* what = "the GPT's parameter count";
  const int64_t c = g.d_model;
  const int64_t block = checked_add(checked_mul(12, checked_mul(c, c, what), what), checked_mul(13, c, what), what);
  const int64_t tables = checked_mul(checked_add(checked_mul(2, g.vocab, what), g.seq_len, what), c, what);
  const int64_t all = checked_add(checked_mul(block, g.blocks, what), checked_add(tables, checked_mul(2, c, what), what), what);
  (void)checked_mul(all, 64, "the GPT's parameter bytes (weights, gradients and moments in double)");
}

void push_block(ParamLayout& out, int64_t c, int64_t i) {
  const std::string p = fmt::format("h.{}.", i);
  push_tensor(out, p + "ln_1.weight", {c});
  push_tensor(out, p + "ln_1.bias", {c});
  push_tensor(out, p + "attn.c_attn.weight", {3 * c, c});
  push_tensor(out, p + "attn.c_attn.bias", {3 * c});
  push_tensor(out, p + "attn.c_proj.weight", {c, c});
  push_tensor(out, p + "attn.c_proj.bias", {c});
  push_tensor(out, p + "ln_2.weight", {c});
  push_tensor(out, p + "ln_2.bias", {c});
  push_tensor(out, p + "mlp.c_fc.weight", {4 * c, c});
  push_tensor(out, p + "mlp.c_fc.bias", {4 * c});
  push_tensor(out, p + "mlp.c_proj.weight", {c, 4 * c});
  push_tensor(out, p + "mlp.c_proj.bias", {c});
}

bool ends_with(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

void GptConfig::validate() const {
  require_positive(vocab, "vocab");
  require_positive(seq_len, "seq_len");
  require_positive(d_model, "d_model");
  require_positive(heads, "heads");
  if (blocks < 0) throw UsageError(fmt::format("GPT config: blocks = {} must be >= 0", blocks));
  if (d_model % heads != 0) {
    throw UsageError(fmt::format("GPT config: d_model = {} is not divisible by heads = {}", d_model, heads));
  }
  (void)layer_count();
  check_model_size(*this);
}

GptLayerKind gpt_layer_kind(const GptConfig& config, int64_t layer) {
  check_layer(config, layer);
  if (layer == 0) return GptLayerKind::embedding;
  return layer == config.layer_count() - 1 ? GptLayerKind::head : GptLayerKind::block;
}

std::string gpt_layer_name(const GptConfig& config, int64_t layer) {
  switch (gpt_layer_kind(config, layer)) {
    case GptLayerKind::embedding:
      return "embedding";
    case GptLayerKind::block:
      return fmt::format("block.{}", layer - 1);
    case GptLayerKind::head:
      break;
  }
  return "head";
}

ParamLayout gpt_layer_layout(const GptConfig& config, int64_t layer) {
  config.validate();
  const int64_t c = config.d_model;
  ParamLayout out;
  switch (gpt_layer_kind(config, layer)) {
    case GptLayerKind::embedding:
      push_tensor(out, "wte.weight", {config.vocab, c});
      push_tensor(out, "wpe.weight", {config.seq_len, c});
      break;
    case GptLayerKind::block:
      push_block(out, c, layer - 1);
      break;
    case GptLayerKind::head:
      push_tensor(out, "ln_f.weight", {c});
      push_tensor(out, "ln_f.bias", {c});
      if (!config.tie_embeddings) push_tensor(out, "lm_head.weight", {config.vocab, c});
      break;
  }
  return out;
}

template <typename T>
void init_gpt_layer(const GptConfig& config, int64_t layer, uint64_t seed, std::span<T> params) {
  const ParamLayout layout = gpt_layer_layout(config, layer);
  if (static_cast<int64_t>(params.size()) != layout_numel(layout)) {
    throw UsageError(fmt::format("init of layer {}: buffer has {} elements, the layout needs {}", layer,
                                 params.size(), layout_numel(layout)));
  }
  const double std_dev = 0.02;
  const double residual_std =
      std_dev / std::sqrt(2.0 * static_cast<double>(std::max<int64_t>(config.blocks, 1)));
  for (const TensorInfo& t : layout) {
    T* out = params.data() + t.offset;
    const int64_t n = t.numel();
    if (!t.is_matrix()) {
      // Layer-norm gammas ("*.weight" of 1-D tensors) start at 1; every bias and beta at 0.
      const T value = ends_with(t.name, ".weight") ? T(1) : T(0);
      for (int64_t i = 0; i < n; ++i) out[i] = value;
      continue;
    }
    const double sd = ends_with(t.name, "c_proj.weight") ? residual_std : std_dev;
    NormalRng rng(tensor_seed(seed, layer, t.name));
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(sd * rng.next());
  }
}

template <typename T>
LayerBuffers<T>::LayerBuffers(const GptConfig& config, int64_t layer, uint64_t seed, Buffers buffers)
    : config_(config), layout_(gpt_layer_layout(config, layer)) {
  if (buffers == Buffers::none) return;
  params_.resize(static_cast<size_t>(layout_numel(layout_)));
  grads_.assign(params_.size(), T(0));
  init_gpt_layer<T>(config_, layer, seed, params_);
}

template <typename T>
void LayerBuffers<T>::zero_grads() {
  for (T& g : grads_) g = T(0);
}

void detail::check_backend(const Backend& backend, DType compute, const char* layer) {
  if (!backend.supports(compute))
    throw UsageError(fmt::format("{}: the {} backend cannot compute in {}", layer, backend.name(), to_string(compute)));
}

template void init_gpt_layer<float>(const GptConfig&, int64_t, uint64_t, std::span<float>);
template void init_gpt_layer<double>(const GptConfig&, int64_t, uint64_t, std::span<double>);
template class LayerBuffers<float>;
template class LayerBuffers<double>;

}  // namespace pd2bw::executor

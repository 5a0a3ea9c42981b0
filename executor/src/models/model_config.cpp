// Model configuration checks, layer kinds and names, the families' layouts and initialisation, and the
// owned buffers.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string_view>

#include "pd2bw/error.hpp"
#include "models/family.hpp"
#include "models/layer_internal.hpp"
#include "pd2bw/executor/layers.hpp"
#include "pd2bw/executor/rng.hpp"

namespace pd2bw::executor {
namespace {

void require_positive(int64_t value, const char* field) {
  if (value <= 0) throw UsageError(fmt::format("model config: {} = {} must be > 0", field, value));
}

void check_layer(const ModelConfig& config, int64_t layer) {
  if (layer < 0 || layer >= config.layer_count()) {
    throw UsageError(fmt::format("layer index {} is outside [0, {})", layer, config.layer_count()));
  }
}

// Parameters of the whole model, times 64 bytes (double weights, versions, gradients and moments): every
// tensor's element count and byte size is below this, so once it fits nothing derived overflows.
void check_model_size(const ModelConfig& g) {
  const char* what = "the model's parameter count";
  const int64_t c = g.d_model;
  const int64_t block = checked_add(checked_mul(12, checked_mul(c, c, what), what), checked_mul(13, c, what), what);
  const int64_t rows = checked_add(checked_add(checked_mul(2, g.vocab, what), g.seq_len, what), kBertTypeVocab + 8, what);
  // Tables and norms, the bert head's dense (C, C) and its decoder bias (V).
  const int64_t tables = checked_add(checked_add(checked_mul(rows, c, what), checked_mul(c, c, what), what), g.vocab, what);
  const int64_t all = checked_add(checked_mul(block, g.blocks, what), checked_add(tables, checked_mul(2, c, what), what), what);
  (void)checked_mul(all, 64, "the model's parameter bytes (weights, gradients and moments in double)");
}

}  // namespace

std::string_view to_string(ModelFamily family) { return family == ModelFamily::bert ? "bert" : "gpt"; }
std::string_view to_string(LnPlacement ln) { return ln == LnPlacement::post ? "post" : "pre"; }

ModelFamily parse_model_family(std::string_view word) {
  if (word == "gpt") return ModelFamily::gpt;
  if (word == "bert") return ModelFamily::bert;
  throw UsageError(fmt::format("unknown model family '{}'", word.substr(0, 40)), "use gpt or bert");
}

LnPlacement parse_ln_placement(std::string_view word) {
  if (word == "pre") return LnPlacement::pre;
  if (word == "post") return LnPlacement::post;
  throw UsageError(fmt::format("unknown layer-norm placement '{}'", word.substr(0, 40)),
                   "use pre (before attention and MLP) or post (after each residual add)");
}

LnPlacement default_ln(ModelFamily family) { return family == ModelFamily::bert ? LnPlacement::post : LnPlacement::pre; }

ModelConfig ModelConfig::of(ModelFamily family) {
  ModelConfig c;
  c.family = family;
  c.ln = default_ln(family);
  c.tie_embeddings = family == ModelFamily::bert;
  return c;
}

void ModelConfig::validate() const {
  require_positive(vocab, "vocab");
  require_positive(seq_len, "seq_len");
  require_positive(d_model, "d_model");
  require_positive(heads, "heads");
  if (blocks < 0) throw UsageError(fmt::format("model config: blocks = {} must be >= 0", blocks));
  if (d_model % heads != 0) {
    throw UsageError(fmt::format("model config: d_model = {} is not divisible by heads = {}", d_model, heads));
  }
  if (family == ModelFamily::gpt && ln != LnPlacement::pre)
    throw UsageError("model config: a gpt model's blocks are pre-LN", "drop the post-LN setting, or use --model bert");
  if (family == ModelFamily::bert && !tie_embeddings)
    throw UsageError("model config: a bert model's decoder is tied to its word embeddings",
                     "set tie_embeddings for bert");
  (void)layer_count();
  check_model_size(*this);
}

LayerKind layer_kind(const ModelConfig& config, int64_t layer) {
  check_layer(config, layer);
  if (layer == 0) return LayerKind::embedding;
  return layer == config.layer_count() - 1 ? LayerKind::head : LayerKind::block;
}

std::string layer_name(const ModelConfig& config, int64_t layer) {
  switch (layer_kind(config, layer)) {
    case LayerKind::embedding:
      return "embedding";
    case LayerKind::block:
      return fmt::format("block.{}", layer - 1);
    case LayerKind::head:
      break;
  }
  return "head";
}

ParamLayout layer_layout(const ModelConfig& config, int64_t layer) {
  config.validate();
  const bool bert = config.is_bert();
  switch (layer_kind(config, layer)) {
    case LayerKind::embedding:
      return bert ? detail::bert::embedding_layout(config) : detail::gpt::embedding_layout(config);
    case LayerKind::block:
      return bert ? detail::bert::block_layout(config, layer - 1) : detail::gpt::block_layout(config, layer - 1);
    case LayerKind::head:
      break;
  }
  return bert ? detail::bert::head_layout(config) : detail::gpt::head_layout(config);
}

std::string_view tied_copy_name(const ModelConfig& config) {
  return config.is_bert() ? "cls.predictions.decoder.weight" : "lm_head.weight";
}

template <typename T>
void init_layer(const ModelConfig& config, int64_t layer, uint64_t seed, std::span<T> params) {
  const ParamLayout layout = layer_layout(config, layer);
  if (static_cast<int64_t>(params.size()) != layout_numel(layout)) {
    throw UsageError(fmt::format("init of layer {}: buffer has {} elements, the layout needs {}", layer,
                                 params.size(), layout_numel(layout)));
  }
  for (const TensorInfo& t : layout) {
    T* out = params.data() + t.offset;
    const int64_t n = t.numel();
    if (!t.is_matrix()) {
      // Layer-norm gammas ("*.weight" of 1-D tensors) start at 1; every bias and beta at 0.
      const T value = t.name.ends_with(".weight") ? T(1) : T(0);
      for (int64_t i = 0; i < n; ++i) out[i] = value;
      continue;
    }
    const double sd = config.is_bert() ? detail::bert::init_std(config, t.name) : detail::gpt::init_std(config, t.name);
    NormalRng rng(tensor_seed(seed, layer, t.name));
    for (int64_t i = 0; i < n; ++i) out[i] = static_cast<T>(sd * rng.next());
  }
}

template <typename T>
LayerBuffers<T>::LayerBuffers(const ModelConfig& config, int64_t layer, uint64_t seed, Buffers buffers)
    : config_(config), layout_(layer_layout(config, layer)) {
  if (buffers == Buffers::none) return;
  params_.resize(static_cast<size_t>(layout_numel(layout_)));
  grads_.assign(params_.size(), T(0));
  init_layer<T>(config_, layer, seed, params_);
}

template <typename T>
void LayerBuffers<T>::zero_grads() {
  for (T& g : grads_) g = T(0);
}

void detail::check_backend(const Backend& backend, DType compute, const char* layer) {
  if (!backend.supports(compute))
    throw UsageError(fmt::format("{}: the {} backend cannot compute in {}", layer, backend.name(), to_string(compute)));
}

template void init_layer<float>(const ModelConfig&, int64_t, uint64_t, std::span<float>);
template void init_layer<double>(const ModelConfig&, int64_t, uint64_t, std::span<double>);
template class LayerBuffers<float>;
template class LayerBuffers<double>;

}  // namespace pd2bw::executor

// A model description: which family (GPT, BERT), its sizes, and what each of its layers holds. Every
// family has the same layer list: layer 0 "embedding", layers 1..blocks "block.{i}", and the last layer
// "head" (which computes the loss), so the profile, the planner and the pipeline runtime see one shape.
//
// - gpt: a causal decoder as GPT-2: token + position embedding; pre-LN blocks with causal attention and
//   the tanh GELU; final layer norm, LM head (own or tied to the token table) and cross-entropy over
//   every position. Parameter names as Hugging Face's GPT2LMHeadModel ("wte.weight", "h.{i}.attn.c_attn.weight").
// - bert: an encoder as BERT (Devlin et al.) and Hugging Face's BertForMaskedLM: word + position +
//   token-type embeddings, then a layer norm; blocks with bidirectional attention under a key padding
//   mask and the exact (erf) GELU, post-LN (BERT's) or pre-LN (Megatron's, with a final layer norm in the
//   head); the masked-LM head: dense + GELU + layer norm, then a decoder tied to the word embeddings with a
//   bias of its own, and cross-entropy over the masked positions only. Parameter names as BertForMaskedLM
//   ("bert.embeddings.word_embeddings.weight", "bert.encoder.layer.{i}.attention.self.query.weight", ...).
//   No next-sentence head (RoBERTa showed it unnecessary).
//
// A family lives in executor/src/models/<family>/ (its embedding, head, layouts and initialisation);
// the block, shared by the families, in executor/src/models/common/.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "pd2bw/checked.hpp"
#include "pd2bw/executor/layout.hpp"

namespace pd2bw::executor {

enum class ModelFamily { gpt, bert };
// Where a block puts its layer norms: before attention and MLP (pre, GPT's) or after each residual add
// (post, BERT's).
enum class LnPlacement { pre, post };

// "gpt" / "bert" and "pre" / "post" (the plan's and the profile's words).
std::string_view to_string(ModelFamily family);
std::string_view to_string(LnPlacement ln);
// Throws pd2bw::UsageError naming the accepted words.
ModelFamily parse_model_family(std::string_view word);
LnPlacement parse_ln_placement(std::string_view word);
// The family's own placement: pre for gpt, post for bert.
LnPlacement default_ln(ModelFamily family);

// BERT's token types (segments A and B).
inline constexpr int64_t kBertTypeVocab = 2;

// The fields in this order, so that ModelConfig{V, T, C, H, L, tied} is a gpt.
struct ModelConfig {
  int64_t vocab = 0;    // V (bert: special tokens included)
  int64_t seq_len = 0;  // Tmax: the position table's length; a microbatch may use seq <= seq_len
  int64_t d_model = 0;  // C
  int64_t heads = 0;    // H; C must be divisible by H
  int64_t blocks = 0;   // transformer blocks; the model has blocks + 2 layers
  // The LM head reuses the token table (gpt: optional; bert: always, its decoder is tied).
  bool tie_embeddings = false;
  ModelFamily family = ModelFamily::gpt;
  LnPlacement ln = LnPlacement::pre;  // bert: post unless configured otherwise

  // A config of `family` with its defaults (bert: tied, post-LN).
  static ModelConfig of(ModelFamily family);
  // Throws pd2bw::UsageError naming the first bad field (a dim <= 0, C % H != 0, blocks < 0, a gpt with
  // post-LN, an untied bert), or when the model is so large that its parameter bytes (in double, with
  // versions, gradients and moments) would overflow int64, so no size derived from a valid config overflows.
  void validate() const;
  // blocks + 2; throws UsageError when that overflows.
  int64_t layer_count() const { return checked_add(blocks, 2, "the model's layer count (blocks + 2)"); }
  bool is_bert() const { return family == ModelFamily::bert; }
};

enum class LayerKind { embedding, block, head };

// Kind and profile name ("embedding", "block.{i}", "head") of a model layer index in
// [0, layer_count()). Both throw pd2bw::UsageError for an index out of range.
LayerKind layer_kind(const ModelConfig& config, int64_t layer);
std::string layer_name(const ModelConfig& config, int64_t layer);

// The parameter layout of a model layer, in the family's checkpoint names (see above). The token table
// leads the embedding's layout (EmbeddingLayer::kWteOffset). Throws pd2bw::UsageError for an invalid
// config or an index out of range.
ParamLayout layer_layout(const ModelConfig& config, int64_t layer);

// The name of the head stage's copy of a tied token table (the runtime keeps one when the head and the
// embedding sit on different stages): the family's name for its LM head's weight ("lm_head.weight",
// "cls.predictions.decoder.weight").
std::string_view tied_copy_name(const ModelConfig& config);

// Writes the family's initialisation of a model layer into params (length layout_numel of that layer).
// gpt (GPT-2's): weights ~ N(0, 0.02^2), residual projections (attn.c_proj, mlp.c_proj) ~ N(0, (0.02 /
// sqrt(2 blocks))^2); bert (BERT's): every matrix and table ~ N(0, 0.02^2). Both: layer-norm gamma 1 and
// beta 0, biases 0. Each tensor draws from its own stream seeded by (seed, layer, name), computed in double
// and rounded to T, so a float model starts at the float rounding of the double model, identically on every
// platform and for every stage split. Throws pd2bw::UsageError when params has the wrong length.
template <typename T>
void init_layer(const ModelConfig& config, int64_t layer, uint64_t seed, std::span<T> params);

}  // namespace pd2bw::executor

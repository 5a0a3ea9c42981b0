// Checking a pipeline configuration and deriving it from a plan.
#include <fmt/format.h>

#include <algorithm>

#include "pd2bw/checked.hpp"
#include "pd2bw/error.hpp"
#include "pd2bw/executor/pipeline.hpp"

namespace pd2bw::executor {

namespace {

// The largest per-microbatch buffers a stage allocates, in bytes of double: rows x (4C, 3C, V), the
// attention probabilities B x H x S x S and the boundary activation. Throws UsageError on overflow.
void check_microbatch_sizes(const PipelineConfig& c) {
  const char* what = "a microbatch's activation size";
  const int64_t rows = checked_mul(c.microbatch_size, c.seq, what);
  const int64_t widest = std::max(checked_mul(4, c.model.d_model, what), c.model.vocab);
  (void)checked_mul(checked_mul(rows, widest, what), 8, what);
  const int64_t probs = checked_mul(checked_mul(rows, c.model.heads, what), c.seq, what);
  (void)checked_mul(probs, 8, what);
}

}  // namespace

void PipelineConfig::validate() const {
  model.validate();
  PipelineShape::validate(model.layer_count());
  for (int64_t c = depth; c < chunks_total(); ++c)
    if (recompute[static_cast<size_t>(c)] != recompute[static_cast<size_t>(position_of(c))])
      throw UsageError(fmt::format("chunks {} and {} share a rank but not their recompute flag", position_of(c), c),
                       "a rank recomputes all of its chunks or none");
  if (seq < 1 || seq > model.seq_len)
    throw UsageError(fmt::format("sequence length {} is outside 1..{} (the model's)", seq, model.seq_len));
  check_microbatch_sizes(*this);
}

PipelineConfig pipeline_from_plan(const schemas::Plan& plan, const ModelConfig& model) {
  if (plan.num_layers != model.layer_count())
    throw UsageError(fmt::format("the plan splits {} layers but the model has {} (embedding, {} blocks, head)",
                                 plan.num_layers, model.layer_count(), model.blocks),
                     "plan with the profile of this model");
  PipelineConfig c;
  static_cast<pipeline::PipelineShape&>(c) = pipeline::shape_of(plan);
  c.model = model;
  c.seq = model.seq_len;
  c.validate();
  return c;
}

}  // namespace pd2bw::executor

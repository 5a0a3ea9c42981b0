// Checking a pipeline configuration and deriving it from a plan.
#include <fmt/format.h>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/pipeline.hpp"

namespace pd2bw::executor {

void PipelineConfig::validate() const {
  model.validate();
  PipelineShape::validate(model.layer_count());
  if (seq < 1 || seq > model.seq_len)
    throw UsageError(fmt::format("sequence length {} is outside 1..{} (the model's)", seq, model.seq_len));
}

PipelineConfig pipeline_from_plan(const schemas::Plan& plan, const GptConfig& model) {
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

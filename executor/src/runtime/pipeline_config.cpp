// Checking a pipeline configuration and deriving it from a plan.
#include <fmt/format.h>

#include <set>

#include "pd2bw/error.hpp"
#include "pd2bw/executor/pipeline.hpp"

namespace pd2bw::executor {

void PipelineConfig::validate() const {
  model.validate();
  if (depth < 1 || width < 1 || microbatches < 1 || microbatch_size < 1)
    throw UsageError(fmt::format("pipeline needs d, w, m, b >= 1 (got d={} w={} m={} b={})", depth, width,
                                 microbatches, microbatch_size));
  if (seq < 1 || seq > model.seq_len)
    throw UsageError(fmt::format("sequence length {} is outside 1..{} (the model's)", seq, model.seq_len));
  if (schedule == schemas::Schedule::two_bw && microbatches < depth)
    throw UsageError(fmt::format("2bw needs m >= d (got m={} d={})", microbatches, depth));
  if (static_cast<int64_t>(bounds.size()) != depth + 1 || bounds.front() != 0 ||
      bounds.back() != model.layer_count())
    throw UsageError(fmt::format("stage bounds must run from 0 to the model's {} layers in {} stages",
                                 model.layer_count(), depth));
  for (int64_t i = 0; i < depth; ++i)
    if (bounds[static_cast<size_t>(i)] >= bounds[static_cast<size_t>(i + 1)])
      throw UsageError(fmt::format("stage {} holds no layers", i));
  if (static_cast<int64_t>(recompute.size()) != depth) throw UsageError("one recompute flag per stage is needed");
  std::set<int64_t> seen;
  if (static_cast<int64_t>(ranks.size()) != depth) throw UsageError("the rank table needs one row per stage");
  for (const auto& row : ranks) {
    if (static_cast<int64_t>(row.size()) != width) throw UsageError("the rank table needs one rank per replica");
    for (int64_t r : row)
      if (r < 0 || r >= depth * width || !seen.insert(r).second)
        throw UsageError(fmt::format("rank {} is out of range or repeated in the rank table", r));
  }
}

PipelineConfig pipeline_from_plan(const schemas::Plan& plan, const GptConfig& model) {
  if (plan.num_layers != model.layer_count())
    throw UsageError(fmt::format("the plan splits {} layers but the model has {} (embedding, {} blocks, head)",
                                 plan.num_layers, model.layer_count(), model.blocks),
                     "plan with the profile of this model");
  PipelineConfig c;
  c.model = model;
  c.schedule = plan.schedule;
  c.depth = plan.depth;
  c.width = plan.width;
  c.microbatches = plan.microbatches_per_step;
  c.microbatch_size = plan.microbatch_size;
  c.seq = model.seq_len;
  for (const auto& st : plan.stages) {
    c.bounds.push_back(st.layer_begin);
    c.recompute.push_back(st.recompute);
    c.ranks.push_back(st.ranks);
  }
  c.bounds.push_back(plan.stages.back().layer_end);
  c.validate();
  return c;
}

}  // namespace pd2bw::executor

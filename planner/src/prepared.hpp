// A candidate with its per-stage links and in-flight counts resolved once, so that pricing a stage in
// the partitioner's inner loops is a handful of arithmetic operations. Private to the planner.
#pragma once

#include <cstdint>
#include <vector>

#include "pd2bw/planner/cost_model.hpp"

namespace pd2bw::planner::detail {

struct PreparedStage {
  int64_t in_level = -1;   // level of the link to the previous stage (-1: first stage)
  int64_t out_level = -1;  // level of the link to the next stage (-1: last stage)
  int64_t ar_level = -1;   // level the stage's replicas span (-1: width 1)
  int64_t in_flight = 0;
  const double* in_p2p = nullptr;   // CostModel::input_p2p_ms at in_level, or null
  const double* out_p2p = nullptr;  // CostModel::output_p2p_ms at out_level, or null
};

struct PreparedCandidate {
  Candidate candidate;
  int64_t factor = 0;  // pipeline_factor
  StaticFactors statics;
  int64_t limit_bytes = 0, reserve_bytes = 0;
  RecomputePolicy policy = RecomputePolicy::auto_;
  // The profile's per-layer arrays at the candidate's microbatch size.
  const double *compute = nullptr, *fwd = nullptr;
  const int64_t *stash = nullptr, *params = nullptr, *in_bytes = nullptr, *out_bytes = nullptr;
  std::vector<PreparedStage> stages;
};

PreparedCandidate prepare(const CostModel& model, const Candidate& c);

// The numbers the partitioner needs, without the memory breakdown.
struct QuickCost {
  bool feasible = true;
  bool recompute = false;
  double compute_ms = 0, p2p_ms = 0, allreduce_ms = 0, step_ms = 0;
  int64_t plain_bytes = 0;  // total memory without recompute
  int64_t redo_bytes = 0;   // total memory with recompute
  int64_t in_bytes = 0, out_bytes = 0;  // the stage's boundary tensors
  int64_t param_bytes = 0;  // parameters of the stage's layers (compute dtype)
  int64_t stash_one = 0;    // one microbatch's stash of the whole stage
  int64_t comm_bytes = 0;   // send/receive buffers
};
QuickCost quick_price(const CostModel& model, const PreparedCandidate& pc, int64_t stage, int64_t begin,
                      int64_t end);

// The one pricing function behind CostModel::stage_cost and the partitioner.
StageCost price_stage(const CostModel& model, const PreparedCandidate& pc, int64_t stage, int64_t begin,
                      int64_t end);

}  // namespace pd2bw::planner::detail
